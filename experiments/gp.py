"""Gaussian-process examples of Bayesian Layers: a deep GP (Fig. 5), a Cox process (Fig. 8).

One script; the example and its sizes come from presets in ``gp.yaml``::

    python experiments/gp.py --preset deep_gp --out runs/deep_gp
    python experiments/gp.py --preset cox_process --out runs/cox_process
    python experiments/gp.py --preset cox_process debug --out /tmp/cox   # seconds
    python experiments/gp.py --preset deep_gp --set deep_gp.steps=1000 --out runs/x

``deep_gp``: regression on scikit-learn's offline diabetes data (442 patients, 10
features), a three-layer doubly stochastic deep GP (stacked `SparseGaussianProcess`
layers) beside a single sparse GP and an exact GP with hyperparameters fitted by
maximizing the marginal likelihood. Reports test RMSE and negative log-likelihood
per point in the target's original units.

``cox_process``: a log-Gaussian Cox process. The *model* program draws the log rate
from a GP prior (`GaussianProcess`) and the points from a `PoissonProcess`; the
*posterior* program is a `SparseGaussianProcess` sharing its kernel and mean. They
are joined with `tracing.tape` and `tracing.condition` (Fig. 8 / Fig. 13). Points
are simulated from a known intensity; the report compares the learned intensity
with the truth and with constant and histogram baselines.

Writes ``config.yaml``, ``results.json`` (and ``cox_intensity.png``) into ``--out``.
"""

import math
import pathlib
import time

import numpy as np

from bayes_planet import yaml_config
from bayes_planet.experiment import example_main

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")


# ---------------------------------------------------------------- configuration
def load_config(presets=(), overrides=(), path=CONFIG_PATH):
    """``defaults`` merged with each preset in order, then ``key.sub=value`` overrides."""
    return yaml_config.load(presets, overrides, path=path).to_dict()


# ---------------------------------------------------------------- shared helpers
def _gaussian_metrics(y, means, variances, y_scale):
    """RMSE and mean NLL of a Gaussian mixture predictive, in original target units.

    ``y``: ``[n]`` standardized targets; ``means``/``variances``: ``[S, n]`` components.
    """
    from scipy.special import logsumexp

    rmse = float(np.sqrt(np.mean((means.mean(0) - y) ** 2)) * y_scale)
    log_prob = -0.5 * np.log(2 * np.pi * variances) - (y - means) ** 2 / (2 * variances)
    log_prob = logsumexp(log_prob, axis=0) - np.log(len(means))
    return {"rmse": rmse, "nll": float(-np.mean(log_prob) + np.log(y_scale))}


# ---------------------------------------------------------------- Fig. 5: deep GP
def _load_diabetes(test_fraction, seed):
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    perm = np.random.default_rng(seed).permutation(len(x))
    num_test = int(round(test_fraction * len(x)))
    test, train = perm[:num_test], perm[num_test:]
    x_mean, x_std = x[train].mean(0), x[train].std(0)
    y_mean, y_std = y[train].mean(), y[train].std()
    return ((x[train] - x_mean) / x_std, (y[train] - y_mean) / y_std,
            (x[test] - x_mean) / x_std, (y[test] - y_mean) / y_std, float(y_std))


def _fit_exact_gp(cfg, seed, x, y, x_test):
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.gaussian_process import GaussianProcess
    from bayes_planet.layers.kernels import ExponentiatedQuadratic

    kernel = ExponentiatedQuadratic(1.0, [1.0] * x.shape[1], dtype="float64")
    gp = GaussianProcess(1, covariance_fn=kernel, conditional_inputs=x, conditional_outputs=y,
                         observation_noise_variance=cfg["noise_init"], dtype="float64",
                         seed=seed)
    optimizer = keras.optimizers.Adam(cfg["exact_learning_rate"])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = -gp.log_marginal_likelihood() / len(x)
        optimizer.apply_gradients(zip(tape.gradient(loss, gp.trainable_variables),
                                      gp.trainable_variables, strict=True))
        return loss

    for _ in range(cfg["exact_steps"]):
        step()
    mean, var = gp.predict(x_test)
    noise = float(gp.observation_noise_variance)
    return mean.numpy()[None, :, 0], var.numpy()[None, :, 0] + noise, {
        "log_marginal_likelihood": float(gp.log_marginal_likelihood()),
        "noise_variance": noise,
    }


def _build_deep_gp(cfg, seed, input_dim, num_layers, dataset_size):
    from bayes_planet.layers import keras
    from bayes_planet.layers.gaussian_process import (
        SparseGaussianProcess,
        TrainableMultivariateNormal,
    )
    from bayes_planet.layers.kernels import ExponentiatedQuadratic, LinearMean

    width = cfg["hidden_units"] or input_dim
    layers, in_dim = [], input_dim
    for i in range(num_layers):
        last = i == num_layers - 1
        units = 1 if last else width
        layers.append(SparseGaussianProcess(
            units, cfg["num_inducing"],
            # Hidden layers: fixed identity(-like) mean, near-deterministic start.
            mean_fn=None if last else LinearMean(units, trainable=False, dtype="float64"),
            covariance_fn=ExponentiatedQuadratic(1.0, [1.0] * in_dim, dtype="float64"),
            inducing_outputs_initializer=TrainableMultivariateNormal(
                1.0 if last else cfg["inner_init_stddev"]),
            dataset_size=dataset_size, dtype="float64", seed=seed + i))
        in_dim = units
    return keras.Sequential(layers)  # Fig. 5: a Sequential stack of GP layers.


def _fit_deep_gp(cfg, seed, x, y, x_test, num_layers):
    import tensorflow as tf
    from sklearn.cluster import KMeans

    from bayes_planet.layers import keras
    from bayes_planet.layers.kernels import LinearMean, inverse_softplus

    model = _build_deep_gp(cfg, seed, x.shape[1], num_layers, len(x))
    model(x[:2])  # Build; then place the inducing inputs at k-means centres,
    z = KMeans(cfg["num_inducing"], n_init=3, random_state=seed).fit(x).cluster_centers_
    for layer in model.layers:  # propagated through the hidden mean functions.
        layer.inducing_inputs.assign(z)
        z = layer.mean_fn(z).numpy() if isinstance(layer.mean_fn, LinearMean) else z
    raw_noise = tf.Variable(inverse_softplus(cfg["noise_init"]), dtype=tf.float64)
    variables = model.trainable_variables + [raw_noise]
    optimizer = keras.optimizers.Adam(cfg["learning_rate"])

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            out = model(xb)  # Doubly stochastic: sampled hidden layers, exact last layer.
            mean, var = out.distribution.mean()[:, 0], out.distribution.variance()[:, 0]
            noise = tf.nn.softplus(raw_noise)
            ell = tf.reduce_mean(-0.5 * tf.math.log(2 * math.pi * noise)
                                 - (tf.square(yb - mean) + var) / (2 * noise))
            loss = -ell + tf.add_n(model.losses)  # Negative ELBO per example.
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    rng = np.random.default_rng(seed)
    batch = min(cfg["batch_size"], len(x))
    losses, order = [], np.array([], dtype=int)
    for _ in range(cfg["steps"]):
        if len(order) < batch:
            order = np.concatenate([order, rng.permutation(len(x))])
        idx, order = order[:batch], order[batch:]
        losses.append(float(step(x[idx], y[idx])))
    samples = cfg["num_predictive_samples"] if num_layers > 1 else 1
    noise = float(tf.nn.softplus(raw_noise))
    outs = [model(x_test) for _ in range(samples)]
    means = np.stack([o.distribution.mean().numpy()[:, 0] for o in outs])
    variances = np.stack([o.distribution.variance().numpy()[:, 0] for o in outs]) + noise
    tail = losses[-max(1, len(losses) // 10):]
    return means, variances, {"elbo_per_example": -float(np.mean(tail)),
                              "noise_variance": noise, "predictive_samples": samples}


def run_deep_gp(cfg, seed, out_dir):
    """Paper Fig. 5: exact GP vs single sparse GP vs deep GP on diabetes."""
    del out_dir
    x, y, x_test, y_test, y_scale = _load_diabetes(cfg["test_fraction"], seed)
    results = {
        "dataset": "sklearn.datasets.load_diabetes",
        "num_train": len(x), "num_test": len(x_test), "input_dim": x.shape[1],
        "target_std": y_scale,
        "mean_baseline": _gaussian_metrics(y_test, np.zeros((1, len(y_test))),
                                           np.ones((1, len(y_test))), y_scale),
    }
    fits = {
        "exact_gp": lambda: _fit_exact_gp(cfg, seed, x, y, x_test),
        "sparse_gp": lambda: _fit_deep_gp(cfg, seed, x, y, x_test, 1),
        "deep_gp": lambda: _fit_deep_gp(cfg, seed, x, y, x_test, cfg["num_layers"]),
    }
    for name, fit in fits.items():
        start = time.time()
        means, variances, extra = fit()
        results[name] = {**_gaussian_metrics(y_test, means, variances, y_scale), **extra,
                         "seconds": round(time.time() - start, 1)}
    results["deep_gp"]["num_layers"] = cfg["num_layers"]
    return results


# ---------------------------------------------------------------- Fig. 8: Cox process
def true_intensity(points, scale):
    """The known intensity on [0, 1]²: a floor plus two Gaussian bumps."""
    def bump(center, width):
        return np.exp(-np.sum((points - center) ** 2, -1) / (2 * width**2))

    return scale * (0.5 + 4.0 * bump((0.25, 0.7), 0.1) + 3.0 * bump((0.7, 0.3), 0.15))


def simulate_points(scale, rng):
    """A Poisson process on [0, 1]² with `true_intensity`, by thinning."""
    bound = 1.05 * true_intensity(rng.uniform(size=(20000, 2)), scale).max()
    candidates = rng.uniform(size=(rng.poisson(bound), 2))
    keep = rng.uniform(size=len(candidates)) * bound < true_intensity(candidates, scale)
    return candidates[keep]


def run_cox_process(cfg, seed, out_dir):
    """Paper Fig. 8: GP-prior model program + sparse-GP posterior program."""
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.gaussian_process import GaussianProcess, SparseGaussianProcess
    from bayes_planet.layers.kernels import ConstantMean, ExponentiatedQuadratic
    from bayes_planet.layers.point_process import PoissonProcess
    from bayes_planet.layers.tracing import condition, tape

    rng = np.random.default_rng(seed)
    points, test_points = (simulate_points(cfg["intensity_scale"], rng) for _ in range(2))
    region = dict(low=[0.0, 0.0], high=[1.0, 1.0], dtype="float64")
    events = PoissonProcess(grid_shape=[cfg["grid"]] * 2, name="events", seed=seed, **region)
    cells, counts = events.grid_points(), events.bin(points)

    kernel = ExponentiatedQuadratic(1.0, cfg["length_scale_init"], dtype="float64")
    mean_fn = ConstantMean(math.log(len(points) / events.volume), dtype="float64")
    prior = GaussianProcess(1, mean_fn, kernel, name="log_rate", dtype="float64", seed=seed)
    q_log_rate = SparseGaussianProcess(
        1, cfg["inducing_grid"] ** 2, mean_fn, kernel, name="q_log_rate", dtype="float64",
        seed=seed)

    def model():
        """Spatial point process: log rate ~ GP prior, points ~ Poisson process."""
        return events(tf.exp(prior(cells)))

    def posterior():
        """Approximate posterior of the log rate (shares the kernel and mean)."""
        return q_log_rate(cells)

    posterior()  # Build, then spread the inducing inputs on a regular sub-grid.
    q_log_rate.inducing_inputs.assign(
        PoissonProcess(grid_shape=[cfg["inducing_grid"]] * 2, **region).grid_points())
    optimizer = keras.optimizers.Adam(cfg["learning_rate"])
    variables = q_log_rate.trainable_variables

    @tf.function
    def step():
        with tf.GradientTape() as g:
            with tape() as q:
                posterior()
            with tape() as p, condition(log_rate=q["q_log_rate"], events=counts):
                model()
            # ELBO = E_q[log p(points | rate)] - KL(q(u) || p(u)) (the posterior's loss).
            elbo = p["events"].log_prob() - tf.add_n(q_log_rate.losses)
            loss = -elbo / len(points)
        optimizer.apply_gradients(zip(g.gradient(loss, variables), variables, strict=True))
        return elbo

    elbos = [float(step()) for _ in range(cfg["steps"])]

    evaluation = PoissonProcess(grid_shape=[cfg["eval_grid"]] * 2, **region)
    grid = evaluation.grid_points()
    mean, var = (t.numpy()[:, 0] for t in q_log_rate.predict(grid))
    learned = np.exp(mean + var / 2)  # Posterior mean of the log-normal rate.
    truth = true_intensity(grid, cfg["intensity_scale"])
    histogram = (counts[:, 0] / events.cell_volume).reshape([cfg["grid"]] * 2)
    ratio = cfg["eval_grid"] // cfg["grid"] if cfg["eval_grid"] % cfg["grid"] == 0 else None
    baselines = {"constant": np.full_like(truth, len(points) / events.volume)}
    if ratio:  # The training histogram, upsampled to the evaluation grid.
        baselines["histogram"] = np.kron(histogram, np.ones((ratio, ratio))).ravel()

    def rel_error(estimate):
        return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth))

    test_counts = evaluation.bin(test_points)

    def test_log_lik(rate):  # Held-out point-process log-likelihood per point.
        rv = evaluation(tf.constant(rate[:, None]))
        return float(rv.log_prob(test_counts)) / len(test_points)

    results = {
        "num_points": len(points), "num_test_points": len(test_points),
        "expected_points": float(truth.mean() * evaluation.volume),
        "grid": cfg["grid"], "num_inducing": cfg["inducing_grid"] ** 2,
        "final_elbo": float(np.mean(elbos[-max(1, len(elbos) // 10):])),
        "learned_length_scale": float(kernel.length_scale),
        "learned_amplitude": float(kernel.amplitude),
        "learned_integrated_intensity": float(learned.mean() * evaluation.volume),
        "relative_l2_error": {"sparse_gp": rel_error(learned),
                              **{k: rel_error(v) for k, v in baselines.items()}},
        "correlation_with_truth": float(np.corrcoef(learned, truth)[0, 1]),
        "test_log_likelihood_per_point": {
            "true_intensity": test_log_lik(truth), "sparse_gp": test_log_lik(learned),
            **{k: test_log_lik(np.maximum(v, 1e-3)) for k, v in baselines.items()}},
    }
    _plot_intensity(out_dir / "cox_intensity.png", truth, learned, points, cfg["eval_grid"])
    return results


def _plot_intensity(path, truth, learned, points, size):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    vmax = max(truth.max(), learned.max())
    panels = [("true intensity + points", truth), ("posterior mean intensity", learned),
              ("|learned - true|", np.abs(learned - truth))]
    for ax, (title, values) in zip(axes, panels, strict=True):
        image = ax.imshow(values.reshape(size, size).T, origin="lower", extent=(0, 1, 0, 1),
                          vmin=0, vmax=vmax, cmap="viridis")
        if ax is not axes[2]:
            ax.scatter(points[:, 0], points[:, 1], s=2, c="white", alpha=0.6)
        ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


EXAMPLES = {"deep_gp": run_deep_gp, "cox_process": run_cox_process}


def main(argv=None):
    return example_main(argv, __doc__, CONFIG_PATH, EXAMPLES, "deep_gp")


if __name__ == "__main__":
    yaml_config.run_script(main)
