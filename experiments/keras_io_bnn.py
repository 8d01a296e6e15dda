"""keras.io's "Probabilistic Bayesian Neural Networks" regression, ported to bayes_planet.

The keras.io example builds its Bayesian network from tfp.layers (``DenseVariational`` with a
``MultivariateNormalTriL`` posterior, an ``IndependentNormal`` output), which needs Keras 2
(tf-keras). This is the same network with the library's Keras 3 layers (it runs on Keras 2
too)::

    python experiments/keras_io_bnn.py --out runs/keras_io_bnn            # the lesson: 2 sizes
    python experiments/keras_io_bnn.py --epochs 2 --train-size 200 --out /tmp/bnn   # seconds

The pieces, each the library's counterpart of the tfp.layers one (docs/porting_from_tfp.md):

* two ``DenseReparameterization(8, activation="sigmoid")`` hidden layers whose kernels have
  tfp's full-covariance posterior at tfp's start
  (``kernel_initializer="trainable_full_covariance_normal"``) and whose biases have the
  mean-field posterior at the same start (``"trainable_normal_wide"``), both with the N(0, 1)
  prior (``"normal_kl_divergence"``);
* the KL weight ``1 / train_size`` of ``DenseVariational(kl_weight=...)`` is
  ``bl.set_dataset_size(model, train_size)``;
* ``Dense(2)`` + ``tfp.layers.IndependentNormal(1)`` is ``Dense(2)`` + ``bl.Normal()`` (loc
  and softplus scale), trained on ``bl.negative_log_likelihood``.

Data: keras.io reads the UCI wine-quality set through tensorflow_datasets, which downloads
it; nothing here may download, so the script generates a wine-like set instead
(`wine_like_data`: 4,898 examples of 11 correlated features and a continuous quality
around 6 with heteroscedastic noise). The numbers are therefore not keras.io's.

For every ``--train-size`` it trains one model, then on ``--test-size`` held-out examples
reports the RMSE of the predictive mean, the mean epistemic spread (stddev of the predicted
mean over ``--samples`` weight draws) and the mean aleatoric stddev (the output layer's
scale), saves the model to ``model_<size>.keras`` and reloads it: its posterior-mean
predictions must equal the trained model's exactly. keras.io's lesson: the smaller training
set leaves the wider epistemic spread. Writes ``results.json`` (and, per size,
``model_<size>.keras``, ``posterior_mean_<size>.npy``) into ``--out`` and ``test_inputs.npy``.
"""

import argparse
import json
import pathlib
import time

import numpy as np

NUM_FEATURES = 11
DATASET_SIZE = 4898  # wine quality: 1,599 red + 3,299 white wines


def wine_like_data(num_examples=DATASET_SIZE, seed=0):
    """A wine-quality-like regression set, generated: ``(x, y)`` float32 arrays.

    11 features, correlated through a fixed random mixing of standard normals and shifted and
    scaled per feature (as chemical measurements are); the quality is ``5.9`` plus a linear
    part, an interaction and a saturating part of the features, and noise whose stddev grows
    with the first feature (0.4 to 0.9): a target of mean ≈ 6 and stddev ≈ 0.9.
    """
    rng = np.random.default_rng(seed)
    mixing = rng.normal(0.0, 1.0, (NUM_FEATURES, NUM_FEATURES)) / np.sqrt(NUM_FEATURES)
    latent = rng.standard_normal((num_examples, NUM_FEATURES)) @ mixing
    offsets = rng.uniform(0.5, 10.0, NUM_FEATURES)
    scales = rng.uniform(0.1, 3.0, NUM_FEATURES)
    x = offsets + scales * latent
    weights = rng.normal(0.0, 0.3, NUM_FEATURES)
    signal = latent @ weights + 0.3 * latent[:, 1] * latent[:, 2] + 0.4 * np.tanh(latent[:, 3])
    noise_stddev = 0.65 + 0.25 * np.tanh(latent[:, 0])
    y = 5.9 + signal + noise_stddev * rng.standard_normal(num_examples)
    return x.astype("float32"), y[:, None].astype("float32")


def build_model(train_size, seed, hidden_units=(8, 8)):
    """keras.io's probabilistic BNN with the library's layers (see the module docstring)."""
    import bayes_planet.layers as bl
    from bayes_planet.layers import keras

    inputs = keras.Input((NUM_FEATURES,), name="features")
    features = keras.layers.BatchNormalization()(inputs)
    for i, units in enumerate(hidden_units):
        features = bl.DenseReparameterization(
            units, activation="sigmoid",
            kernel_initializer="trainable_full_covariance_normal",
            bias_initializer="trainable_normal_wide",
            kernel_regularizer="normal_kl_divergence",
            bias_regularizer="normal_kl_divergence",
            seed=seed + i + 1)(features)
    distribution_params = keras.layers.Dense(2)(features)
    outputs = bl.Normal(seed=seed + 100)(distribution_params)
    model = keras.Model(inputs, outputs)
    bl.set_dataset_size(model, train_size)  # keras.io's kl_weight = 1 / train_size
    return model


def predictive(model, x, num_samples):
    """``(mean, epistemic, aleatoric)`` per example: the mean over ``num_samples`` weight
    draws of the predicted mean, the stddev of that predicted mean over the draws, and the
    mean predicted scale."""
    draws = [model(x) for _ in range(num_samples)]
    means = np.stack([np.asarray(d.distribution.mean())[:, 0] for d in draws])
    scales = np.stack([np.asarray(d.distribution.stddev())[:, 0] for d in draws])
    return means.mean(0), means.std(0), scales.mean(0)


def train_one(train_size, args, data, out):
    """Trains, evaluates, saves and reloads the model of one training-set size."""
    import bayes_planet.layers as bl
    from bayes_planet.layers import keras

    x, y = data
    x_train, y_train = x[:train_size], y[:train_size]
    x_test, y_test = x[-args.test_size:], y[-args.test_size:]
    keras.utils.set_random_seed(args.seed)
    model = build_model(train_size, seed=args.seed)
    model.compile(keras.optimizers.RMSprop(args.learning_rate), loss=bl.negative_log_likelihood)
    start = time.perf_counter()
    history = model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                        verbose=0).history["loss"]
    seconds = time.perf_counter() - start
    mean, epistemic, aleatoric = predictive(model, x_test, args.samples)

    path = out / f"model_{train_size}.keras"
    model.save(path)
    reloaded = keras.models.load_model(path)
    with bl.posterior_mean(model):
        ours = np.asarray(model(x_test).distribution.mean())
    with bl.posterior_mean(reloaded):
        theirs = np.asarray(reloaded(x_test).distribution.mean())
    np.save(out / f"posterior_mean_{train_size}.npy", ours)
    return {
        "train_size": train_size,
        "loss_first_epoch": float(history[0]),
        "loss_last_epoch": float(history[-1]),
        "train_seconds": round(seconds, 2),
        "test_rmse": float(np.sqrt(np.mean((mean - y_test[:, 0]) ** 2))),
        "mean_epistemic_stddev": float(epistemic.mean()),
        "mean_aleatoric_stddev": float(aleatoric.mean()),
        "reload_max_abs_difference": float(np.max(np.abs(ours - theirs))),
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train-size", type=int, nargs="+", default=[1250, 4163],
                        help="training-set sizes, one model each (default: keras.io's 30 %% "
                             "and 85 %% of the 4,898 examples)")
    parser.add_argument("--test-size", type=int, default=735)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--samples", type=int, default=100, help="weight draws per prediction")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "samples", "test_size"):
        if getattr(args, name) < 1:
            parser.error(f"Expected a positive integer. Received: --{name.replace('_', '-')}="
                         f"{getattr(args, name)}")
    if any(size < 1 or size + args.test_size > DATASET_SIZE for size in args.train_size):
        parser.error(f"Expected training sizes in [1, {DATASET_SIZE - args.test_size}] (the "
                     f"test set takes the last {args.test_size}). Received: --train-size="
                     f"{args.train_size}")
    return args


def main(argv=None):
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = wine_like_data(seed=args.seed)
    np.save(args.out / "test_inputs.npy", data[0][-args.test_size:])
    runs = [train_one(size, args, data, args.out) for size in args.train_size]
    results = {"data": "wine_like_data (generated)", "epochs": args.epochs,
               "batch_size": args.batch_size, "samples": args.samples, "seed": args.seed,
               "runs": runs}
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"{'train size':>10} {'RMSE':>7} {'epistemic':>9} {'aleatoric':>9} {'loss':>15}")
    for r in runs:
        print(f"{r['train_size']:>10} {r['test_rmse']:>7.3f} {r['mean_epistemic_stddev']:>9.3f} "
              f"{r['mean_aleatoric_stddev']:>9.3f} {r['loss_first_epoch']:>7.3f}→"
              f"{r['loss_last_epoch']:.3f}")
    return results


if __name__ == "__main__":
    main()
