"""The embedded demo: a drop-in Bayesian CNN on scikit-learn's bundled digits.

The same `keras.Sequential` CNN is built with `Conv2D`/`Dense` and with their
Flipout twins (paper Fig. 4); both train with ``model.fit`` and the demo prints
test accuracy and the predictive uncertainty (entropy of the MC-averaged
prediction) on clean vs noise-corrupted test digits.
"""

import time

import numpy as np

from bayes_planet._keras import keras, tf
from bayes_planet.layers import Conv2DFlipout, DenseFlipout, set_dataset_size

__all__ = ["build_cnn", "load_digits_split", "main", "predictive"]


def load_digits_split(seed=0, test_fraction=0.2):
    """scikit-learn's 8×8 digits as float32 images in [0, 1], split train/test."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[..., None]
    y = digits.target.astype("int64")
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def build_cnn(conv_cls=keras.layers.Conv2D, dense_cls=None, dataset_size=None):
    """A small CNN; pass Bayesian layer classes to make it Bayesian (nothing else changes)."""
    dense_cls = dense_cls or (DenseFlipout if conv_cls is Conv2DFlipout else keras.layers.Dense)
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        conv_cls(16, 3, padding="same", activation="relu"),
        conv_cls(32, 3, strides=2, padding="same", activation="relu"),
        keras.layers.Flatten(),
        dense_cls(10),
    ])
    if dataset_size:
        set_dataset_size(model, dataset_size)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def predictive(model, x, samples=20):
    """MC predictive probabilities and their entropy (nats) per example."""
    probs = tf.reduce_mean(
        tf.stack([tf.nn.softmax(model(x, training=False)) for _ in range(samples)]), 0)
    entropy = -tf.reduce_sum(probs * tf.math.log(probs + 1e-12), -1)
    return probs.numpy(), entropy.numpy()


def main(epochs=20, samples=20, seed=0):
    """Trains the deterministic and the Bayesian CNN; prints and returns their metrics."""
    (x_train, y_train), (x_test, y_test) = load_digits_split(seed)
    noisy = np.clip(x_test + np.random.default_rng(seed).normal(0, 0.5, x_test.shape), 0, 1)
    results = {}
    for name, conv in (("Conv2D", keras.layers.Conv2D), ("Conv2DFlipout", Conv2DFlipout)):
        keras.utils.set_random_seed(seed)
        model = build_cnn(conv, dataset_size=len(x_train))
        start = time.perf_counter()
        model.fit(x_train, y_train, epochs=epochs, batch_size=64, verbose=0)
        seconds = time.perf_counter() - start
        probs, entropy = predictive(model, x_test, samples)
        _, noisy_entropy = predictive(model, noisy.astype("float32"), samples)
        results[name] = {
            "accuracy": float(np.mean(probs.argmax(-1) == y_test)),
            "entropy_clean": float(entropy.mean()),
            "entropy_noisy": float(noisy_entropy.mean()),
            "train_seconds": seconds,
        }
    print(f"digits: {len(x_train)} train / {len(x_test)} test, {epochs} epochs, "
          f"{samples} MC samples")
    print(f"{'model':<15}{'accuracy':>10}{'H(clean)':>11}{'H(noisy)':>11}{'train s':>9}")
    for name, r in results.items():
        print(f"{name:<15}{r['accuracy']:>10.3f}{r['entropy_clean']:>11.3f}"
              f"{r['entropy_noisy']:>11.3f}{r['train_seconds']:>9.1f}")
    return results


if __name__ == "__main__":
    main()
