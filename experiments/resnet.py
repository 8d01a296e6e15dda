"""Bayesian ResNet (Bayesian Layers, Fig. 15): one switch makes a ResNet Bayesian.

The paper's example builds a ResNet whose convolutions come from one name::

    Conv2D = Conv2DReparameterization if bayesian else keras.layers.Conv2D

Everything else (batch norm, shortcuts, pooling, the dense head) is unchanged. This
script trains both versions, with the same seed, on scikit-learn's offline 8x8 digits
(1,797 images, 10 classes; the only offline image classification set here) and
reports accuracy, negative log-likelihood and expected calibration error on the held-out
split (`bayes_planet.uncertainty.metrics.classification_metrics`; the Bayesian ResNet's predictive
is the mean of ``eval_samples`` Monte Carlo weight samples)::

    python experiments/resnet.py --preset resnet --out runs/resnet
    python experiments/resnet.py --preset resnet debug --out /tmp/resnet     # seconds

Writes ``config.yaml`` and ``results.json`` into ``--out``.
"""

import pathlib

import numpy as np

from bayes_planet import yaml_config
from bayes_planet.experiment import example_main

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")


def build_resnet(bayesian, filters, blocks_per_stage, num_classes=10, seed=0):
    """A small pre-activation ResNet for ``[8, 8, 1]`` images (He et al., 2016).

    Args:
      bayesian: use `Conv2DReparameterization` for every convolution (the paper's
        switch) instead of ``keras.layers.Conv2D``.
      filters: filters of the first stage; each later stage doubles them and halves
        the resolution.
      blocks_per_stage: residual blocks per stage (list; its length is the number of
        stages).
      num_classes: outputs of the (deterministic) dense head, as logits.
      seed: int; the Bayesian convolutions get seeds ``seed * 1000 + i``.

    Returns a functional `keras.Model` from images to logits.
    """
    from bayes_planet.layers import Conv2DReparameterization, keras

    Conv2D = Conv2DReparameterization if bayesian else keras.layers.Conv2D  # noqa: N806
    count = iter(range(10**6))

    def conv(filters, kernel_size, strides=1):
        extra = {"seed": seed * 1000 + next(count)} if bayesian else {}
        return Conv2D(filters, kernel_size, strides, "same", use_bias=False, **extra)

    def block(x, filters, strides):
        y = keras.layers.Activation("relu")(keras.layers.BatchNormalization()(x))
        shortcut = x
        if strides != 1 or x.shape[-1] != filters:
            shortcut = conv(filters, 1, strides)(y)
        y = conv(filters, 3, strides)(y)
        y = keras.layers.Activation("relu")(keras.layers.BatchNormalization()(y))
        y = conv(filters, 3)(y)
        return keras.layers.Add()([shortcut, y])

    images = keras.Input((8, 8, 1))
    x = conv(filters, 3)(images)
    for stage, num_blocks in enumerate(blocks_per_stage):
        for i in range(num_blocks):
            x = block(x, filters * 2**stage, 2 if stage > 0 and i == 0 else 1)
    x = keras.layers.Activation("relu")(keras.layers.BatchNormalization()(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    logits = keras.layers.Dense(num_classes)(x)
    return keras.Model(images, logits, name="bayesian_resnet" if bayesian else "resnet")


def _predictive_samples(model, x, samples):
    """``[samples, N, classes]`` softmax probabilities (fresh weight noise per sample)."""
    import tensorflow as tf

    call = tf.function(lambda t: tf.nn.softmax(model(t, training=False)))
    return np.stack([call(x).numpy() for _ in range(samples)])


def run_resnet(cfg, seed, out_dir):
    """Trains the deterministic and the Bayesian ResNet; held-out accuracy, NLL, ECE."""
    del out_dir
    from bayes_planet.layers import keras, set_dataset_size
    from bayes_planet.layers.demo import load_digits_split
    from bayes_planet.uncertainty.metrics import classification_metrics

    (x_train, y_train), (x_test, y_test) = load_digits_split(seed, cfg["test_fraction"])
    results = {"num_train": len(x_train), "num_test": len(x_test)}
    for name, bayesian in (("deterministic", False), ("bayesian", True)):
        keras.utils.set_random_seed(seed)
        model = build_resnet(bayesian, cfg["filters"], cfg["blocks_per_stage"], seed=seed)
        if bayesian:  # the KL per training image: the ELBO per example
            set_dataset_size(model, len(x_train))
        model.compile(
            keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(
                cfg["learning_rate"], cfg["epochs"] * -(-len(x_train) // cfg["batch_size"]))),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x_train, y_train, batch_size=cfg["batch_size"],
                            epochs=cfg["epochs"], verbose=0)
        samples = _predictive_samples(model, x_test, cfg["eval_samples"] if bayesian else 1)
        metrics = classification_metrics(samples, y_test, bins=cfg["ece_bins"])
        results[name] = {
            **{key: round(value, 4) for key, value in metrics.items()},
            "final_train_loss": round(history.history["loss"][-1], 4),
            "num_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
        }
    return results


EXAMPLES = {"resnet": run_resnet}


def main(argv=None):
    return example_main(argv, __doc__, CONFIG_PATH, EXAMPLES, "resnet")


if __name__ == "__main__":
    yaml_config.run_script(main, deterministic=True)
