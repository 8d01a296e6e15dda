"""Generative examples of Bayesian Layers' stochastic output and reversible layers.

One script; the example and its sizes come from presets in ``generative.yaml``::

    python experiments/generative.py --preset vae --out runs/vae
    python experiments/generative.py --preset realnvp --out runs/realnvp
    python experiments/generative.py --preset vqvae --out runs/vqvae
    python experiments/generative.py --preset pixelcnn_mixture --out runs/pixelcnn_mixture
    python experiments/generative.py --preset image_transformer --out runs/image_transformer
    python experiments/generative.py --preset vae debug --out /tmp/vae      # seconds
    python experiments/generative.py --preset vqvae --set vqvae.ema=true --out runs/x

``vae`` (paper Fig. 6): a variational auto-encoder on scikit-learn's offline 8x8
digits, binarized; a `Normal` latent code and a `Bernoulli` (or, with
``likelihood: categorical``, a 17-level `Categorical`) decoder. Reports the test
ELBO in nats per image beside an independent-pixel baseline.

``realnvp`` (paper Fig. 7): a ``keras.Sequential`` of `ActNorm` and `RealNVP`
coupling layers applied to a `RandomVariable` base N(0, I), fitted to
``make_moons`` by maximum likelihood. Reports test NLL (nats per point) against
a full-covariance Gaussian fitted by maximum likelihood, the learned density's
mass on the plot grid, and saves ``density.png``.

``vqvae`` (paper Fig. 17): encoder -> `VectorQuantizer` -> decoder -> `Bernoulli`
on digits scaled to [0, 1]. Reports test reconstruction MSE (decoder mean) beside
the mean-image baseline, and codebook usage (fraction of codes used, perplexity).

``pixelcnn_mixture`` (paper Fig. 16 in miniature): an autoregressive model of the
digits' 17 intensity levels — a `MADE` (masked autoregressive MLP over the 64
pixels) -> `MixtureLogistic` -> `Discretize`. Reports test bits per dimension
beside the uniform and independent-pixel baselines.

``image_transformer`` (paper Figs. 6/16): the same likelihood with a causally masked
Transformer over the 64 pixels (intensities as tokens, shifted right) instead of the
MADE -> `MixtureLogistic` -> `Discretize`; test bits per dimension next to
``pixelcnn_mixture``'s. Attention/feed-forward estimators are configurable
(deterministic by default: the paper's example is about the stochastic output).

Writes ``config.yaml`` and ``results.json`` (and ``density.png``) into ``--out``.
"""

import math
import pathlib

import numpy as np

from bayes_planet import yaml_config
from bayes_planet.experiment import example_main

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")


# ---------------------------------------------------------------- configuration
def load_config(presets=(), overrides=(), path=CONFIG_PATH):
    """``defaults`` merged with each preset in order, then ``key.sub=value`` overrides."""
    return yaml_config.load(presets, overrides, path=path).to_dict()


# ---------------------------------------------------------------- shared helpers
def _digits(test_fraction, seed):
    """scikit-learn's offline 8x8 digits: integer levels 0..16, shape [n, 64]."""
    from sklearn.datasets import load_digits

    x = load_digits().data.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(x))
    num_test = int(round(test_fraction * len(x)))
    return x[perm[num_test:]], x[perm[:num_test]]


def _train(loss_fn, variables_fn, data, cfg, seed):
    """Adam (cosine-decayed rate) on ``loss_fn(batch)`` over random minibatches; returns
    the loss history."""
    import tensorflow as tf

    from bayes_planet.layers import keras

    # Cosine decay to zero: the final parameters are not those of one noisy late step.
    rate = keras.optimizers.schedules.CosineDecay(cfg["learning_rate"], cfg["steps"])
    if cfg.get("weight_decay"):
        optimizer = keras.optimizers.AdamW(rate, weight_decay=cfg["weight_decay"])
    else:
        optimizer = keras.optimizers.Adam(rate)

    @tf.function
    def step(batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(batch)
        variables = variables_fn()
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    rng = np.random.default_rng(seed)
    history = []
    for i in range(cfg["steps"]):
        batch = data[rng.integers(0, len(data), cfg["batch_size"])]
        loss = float(step(tf.constant(batch)))
        if i % max(1, cfg["steps"] // 20) == 0 or i == cfg["steps"] - 1:
            history.append([i, round(loss, 4)])
    return history


def _bits_per_dim(log_prob, train, test, levels):
    """Train/test bits per dimension of 8x8 images under ``log_prob`` (+ two references)."""
    import tensorflow as tf

    log_prob = tf.function(log_prob)
    per_dim = 64 * math.log(2.0)

    def bits(x):
        return -float(_in_batches(log_prob, x).mean()) / per_dim

    return {
        "train_bits_per_dim": round(bits(train), 4),
        "test_bits_per_dim": round(bits(test), 4),
        "uniform_bits_per_dim": round(math.log2(levels), 4),
        "independent_pixel_test_bits_per_dim": round(
            -_independent_pixel_log_lik(train, test, levels) / per_dim, 4),
    }


def _independent_pixel_log_lik(train, test, levels, smoothing=1.0):
    """Test log-likelihood (nats per image) of per-pixel categorical histograms."""
    counts = np.stack([(train == k).sum(0) for k in range(levels)], -1) + smoothing
    log_p = np.log(counts / counts.sum(-1, keepdims=True))
    return float(np.take_along_axis(log_p[None], test[..., None], -1).sum((1, 2)).mean())


def _in_batches(fn, x, batch_size=1024):
    """``fn`` over fixed-size batches (the last one padded), so a ``tf.function``
    traces once."""
    out = []
    for i in range(0, len(x), batch_size):
        chunk = x[i:i + batch_size]
        padded = np.concatenate([chunk, np.repeat(chunk[-1:], batch_size - len(chunk), 0)])
        out.append(np.asarray(fn(padded))[:len(chunk)])
    return np.concatenate(out)


# ---------------------------------------------------------------- Fig. 6: VAE
def run_vae(cfg, seed, out_dir):
    """ELBO of a Normal-latent VAE with a Bernoulli or Categorical decoder."""
    del out_dir
    import tensorflow as tf
    import tensorflow_probability as tfp

    from bayes_planet.layers import keras
    from bayes_planet.layers.outputs import Bernoulli, Categorical, Normal

    train, test = _digits(cfg["test_fraction"], seed)
    categorical = cfg["likelihood"] == "categorical"
    if not categorical:  # binarized digits
        train, test = (train > 8).astype(np.int64), (test > 8).astype(np.int64)
    levels = 17 if categorical else 2
    hidden, latent = cfg["hidden_units"], cfg["latent_dim"]
    encoder = keras.Sequential([
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(hidden, activation="relu"),
        Normal(units=latent, seed=seed, name="latent_code"),  # loc and scale predicted
    ])
    head = ([keras.layers.Dense(64 * levels), keras.layers.Reshape([64, levels]),
             Categorical(event_ndims=1, seed=seed + 1, name="image")] if categorical
            else [Bernoulli(units=64, seed=seed + 1, name="image")])
    decoder = keras.Sequential([keras.layers.Dense(hidden, activation="relu"),
                                keras.layers.Dense(hidden, activation="relu"), *head])
    prior = tfp.distributions.Independent(
        tfp.distributions.Normal(tf.zeros(latent), 1.0), 1)

    def elbo(x):
        features = tf.cast(x, tf.float32) / (16.0 if categorical else 1.0)
        code = encoder(features)
        log_lik = decoder(code).distribution.log_prob(tf.cast(x, tf.float32))
        return log_lik - code.distribution.kl_divergence(prior)

    encoder.build((None, 64))
    decoder.build((None, latent))
    history = _train(lambda x: -tf.reduce_mean(elbo(x)),
                     lambda: encoder.trainable_variables + decoder.trainable_variables,
                     train, cfg, seed)
    eval_elbo = tf.function(elbo)

    def mean_elbo(x):
        return float(np.mean([_in_batches(eval_elbo, x).mean()
                              for _ in range(cfg["eval_samples"])]))

    baseline = _independent_pixel_log_lik(train, test, levels)
    return {
        "likelihood": cfg["likelihood"],
        "train_elbo_nats": round(mean_elbo(train), 3),
        "test_elbo_nats": round(mean_elbo(test), 3),
        "independent_pixel_test_log_lik_nats": round(baseline, 3),
        "history": history,
    }


# ---------------------------------------------------------------- Fig. 7: RealNVP
def run_realnvp(cfg, seed, out_dir):
    """Maximum-likelihood RealNVP on two moons vs a Gaussian baseline."""
    import tensorflow as tf
    import tensorflow_probability as tfp
    from sklearn.datasets import make_moons

    from bayes_planet.layers import keras
    from bayes_planet.layers.flows import ActNorm, RealNVP
    from bayes_planet.layers.random_variable import RandomVariable

    tfd = tfp.distributions
    x_train = make_moons(cfg["num_train"], noise=cfg["noise"], random_state=seed)[0]
    x_test = make_moons(cfg["num_test"], noise=cfg["noise"], random_state=seed + 1)[0]
    x_train, x_test = x_train.astype(np.float32), x_test.astype(np.float32)
    layers = []
    for i in range(cfg["num_couplings"]):
        layers += [ActNorm(), RealNVP([cfg["hidden_units"]] * 2, reverse_mask=i % 2 == 1)]
    flow = keras.Sequential(layers, name="realnvp")
    flow.build((None, 2))

    def log_prob(x):
        # Fig. 7: the flow applied to the base RandomVariable, layer by layer (a Keras 3
        # Sequential returns a plain tensor for a RandomVariable input; docs/install.md, Keras 3).
        rv = RandomVariable(tfd.Normal(tf.zeros_like(x), 1.0))
        for layer in flow.layers:
            rv = layer(rv)
        return rv.distribution.log_prob(x)

    log_prob(tf.constant(x_train[:1000]))  # ActNorm data-dependent init
    history = _train(lambda x: -tf.reduce_mean(log_prob(x)),
                     lambda: flow.trainable_variables, x_train, cfg, seed)
    log_prob = tf.function(log_prob)
    test_nll = -float(_in_batches(log_prob, x_test).mean())
    train_nll = -float(_in_batches(log_prob, x_train).mean())
    mean, cov = x_train.mean(0), np.cov(x_train.T, bias=True)
    gauss = tfd.MultivariateNormalTriL(mean, np.linalg.cholesky(cov).astype(np.float32))
    gauss_nll = -float(tf.reduce_mean(gauss.log_prob(x_test)))

    lo, hi, n = -2.0, 3.0, cfg["grid"]
    xs, ys = np.linspace(lo, hi, n, dtype=np.float32), np.linspace(-1.5, 2.0, n, dtype=np.float32)
    grid = np.stack(np.meshgrid(xs, ys, indexing="xy"), -1).reshape(-1, 2)
    density = np.exp(_in_batches(log_prob, grid)).reshape(n, n)
    mass = float(density.sum() * (xs[1] - xs[0]) * (ys[1] - ys[0]))
    _plot_density(out_dir / "density.png", xs, ys, density, x_test)
    return {
        "train_nll_nats": round(train_nll, 4),
        "test_nll_nats": round(test_nll, 4),
        "gaussian_test_nll_nats": round(gauss_nll, 4),
        "grid_mass": round(mass, 4),
        "num_parameters": int(sum(np.prod(v.shape) for v in flow.trainable_variables)),
        "history": history,
    }


def _plot_density(path, xs, ys, density, points):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5))
    mesh = ax.pcolormesh(xs, ys, density, shading="auto", cmap="viridis")
    ax.scatter(points[:300, 0], points[:300, 1], s=2, c="white", alpha=0.5)
    fig.colorbar(mesh, ax=ax, label="density")
    ax.set_title("RealNVP density on make_moons (white: test points)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------- Fig. 17: VQ-VAE
def run_vqvae(cfg, seed, out_dir):
    """VQ-VAE on digits: reconstruction error and codebook usage."""
    del out_dir
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.outputs import Bernoulli
    from bayes_planet.layers.vq import VectorQuantizer, codebook_usage

    train, test = _digits(cfg["test_fraction"], seed)
    train, test = (train / 16.0).astype(np.float32), (test / 16.0).astype(np.float32)
    hidden, latents, dim = cfg["hidden_units"], cfg["num_latents"], cfg["code_dim"]
    quantizer = VectorQuantizer(cfg["num_codes"], commitment_cost=cfg["commitment_cost"],
                                ema=cfg["ema"], name="latent_code")
    encoder = keras.Sequential([keras.layers.Dense(hidden, activation="relu"),
                                keras.layers.Dense(latents * dim),
                                keras.layers.Reshape([latents, dim]), quantizer])
    decoder = keras.Sequential([keras.layers.Flatten(),
                                keras.layers.Dense(hidden, activation="relu"),
                                Bernoulli(units=64, seed=seed, name="image")])
    encoder.build((None, 64))
    decoder.build((None, latents, dim))

    def loss_fn(x):
        code = encoder(x, training=True)
        nll = -decoder(code).distribution.log_prob(x)  # Bernoulli cross-entropy on [0, 1]
        return tf.reduce_mean(nll) + tf.add_n(encoder.losses)

    history = _train(loss_fn, lambda: encoder.trainable_variables + decoder.trainable_variables,
                     train, cfg, seed)

    @tf.function
    def reconstruct(x):
        return decoder(encoder(x)).distribution.mean()

    def mse(x):
        return float(np.mean((_in_batches(reconstruct, x) - x) ** 2))

    pre_quant = keras.Sequential(encoder.layers[:-1])
    codes = _in_batches(lambda x: quantizer.encode(pre_quant(x)), test)
    used, perplexity = codebook_usage(codes, cfg["num_codes"])
    return {
        "ema": cfg["ema"],
        "train_mse": round(mse(train), 5),
        "test_mse": round(mse(test), 5),
        "mean_image_test_mse": round(float(np.mean((train.mean(0) - test) ** 2)), 5),
        "codebook_used_fraction": round(float(used), 4),
        "codebook_perplexity": round(float(perplexity), 3),
        "num_codes": cfg["num_codes"],
        "bits_per_image_code": round(latents * math.log2(cfg["num_codes"]), 1),
        "history": history,
    }


# ---------------------------------------------------------------- Fig. 16 in miniature
def run_pixelcnn_mixture(cfg, seed, out_dir):
    """Autoregressive discretized logistic mixture on digits: bits per dimension."""
    del out_dir
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.flows import MADE
    from bayes_planet.layers.outputs import Discretize, MixtureLogistic

    train, test = _digits(cfg["test_fraction"], seed)
    levels, k = 17, cfg["num_components"]
    model = keras.Sequential([
        MADE([cfg["hidden_units"]] * cfg["num_hidden_layers"], units=3 * k, seed=seed),
        MixtureLogistic(k, seed=seed),  # one mixture per pixel
        Discretize(num_bins=levels, low=-1.0, high=1.0, seed=seed),
    ])
    model.build((None, 64))

    def log_prob(x):
        x = tf.cast(x, tf.float32)
        return model(x / 8.0 - 1.0).distribution.log_prob(x)  # levels 0..16 <-> [-1, 1]

    history = _train(lambda x: -tf.reduce_mean(log_prob(x)),
                     lambda: model.trainable_variables, train, cfg, seed)
    return {**_bits_per_dim(log_prob, train, test, levels), "history": history}


# ---------------------------------------------------------------- Figs. 6/16: Image Transformer
def build_image_transformer(cfg, seed, levels=17):
    """The causal Transformer body, the `MixtureLogistic` + `Discretize` head, and
    ``per_pixel(x)``: ``[batch, 64]`` log-probabilities of integer images ``x``
    (levels ``0..levels-1``; pixel ``i`` conditioned on pixels ``< i`` only)."""
    import tensorflow as tf

    from bayes_planet.layers import keras
    from bayes_planet.layers.outputs import Discretize, MixtureLogistic
    from bayes_planet.layers.transformer import build_transformer

    k = cfg["num_components"]
    body = build_transformer(
        vocab_size=levels + 1, length=64, num_classes=3 * k, d_model=cfg["d_model"],
        num_heads=cfg["num_heads"], ff_dim=cfg["ff_dim"], num_layers=cfg["num_layers"],
        attention=cfg["attention"], feed_forward=cfg["feed_forward"], causal=True,
        seed=seed, name="image_transformer")
    head = keras.Sequential([
        MixtureLogistic(k, seed=seed),  # one mixture per pixel
        Discretize(num_bins=levels, low=-1.0, high=1.0, seed=seed),
    ])

    def per_pixel(x):
        x = tf.cast(x, tf.int32)
        start = tf.fill([tf.shape(x)[0], 1], levels)  # token `levels`: "no previous pixel"
        shifted = tf.concat([start, x[:, :-1]], 1)
        rv = head(body(shifted))  # levels 0..16 <-> [-1, 1]
        return rv.distribution.distribution.log_prob(tf.cast(x, tf.float32))

    return body, head, per_pixel


def run_image_transformer(cfg, seed, out_dir):
    """Causally masked Transformer over the 64 pixels -> `MixtureLogistic` -> `Discretize`.

    The Image Transformer of Bayesian Layers' Figs. 6/16 (Parmar et al., 2018) in
    miniature: pixel ``i``'s distribution is a discretized logistic mixture whose
    parameters a causal Transformer computes from pixels ``0..i-1`` (the input is the
    image shifted right by one position, a start token first; intensities are tokens).
    Same data, split, output layers and metric as ``pixelcnn_mixture`` (the MADE).
    """
    del out_dir
    import tensorflow as tf

    train, test = _digits(cfg["test_fraction"], seed)
    levels = 17
    body, head, per_pixel = build_image_transformer(cfg, seed, levels)

    def log_prob(x):
        return tf.reduce_sum(per_pixel(x), -1)

    variables = lambda: body.trainable_variables + head.trainable_variables  # noqa: E731
    # Bayesian attention/feed-forward layers add their KL (per training image).
    kl = lambda: tf.add_n(body.losses) / len(train) if body.losses else 0.0  # noqa: E731
    history = _train(lambda x: -tf.reduce_mean(log_prob(x)) + kl(), variables, train, cfg,
                     seed)
    return {
        **_bits_per_dim(log_prob, train, test, levels),
        "num_parameters": int(sum(np.prod(v.shape) for v in variables())),
        "history": history,
    }


EXAMPLES = {"vae": run_vae, "realnvp": run_realnvp, "vqvae": run_vqvae,
            "pixelcnn_mixture": run_pixelcnn_mixture,
            "image_transformer": run_image_transformer}


def main(argv=None):
    return example_main(argv, __doc__, CONFIG_PATH, EXAMPLES, "vae", hide=("history",))


if __name__ == "__main__":
    yaml_config.run_script(main, deterministic=True)
