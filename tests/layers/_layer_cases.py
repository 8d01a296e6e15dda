"""The layer cases of the distribution, mixed-precision and initial-value tests (not collected
by pytest): a small Keras model around one member of each layer family, its data and loss.

`case_table` maps a case name to a `Case` (layers made by lambdas, so a missing class fails
only its own case); `model` wraps a case's layers, `data` draws its seeded inputs and targets,
`loss_fn` names its per-example loss. ``tests/layers/_distribute_scripts.py`` runs them under
tf.distribute strategies in fresh processes.
"""

import numpy as np


def _rng(seed=0):
    return np.random.default_rng(seed)


def mse(y, out):
    import tensorflow as tf
    out = tf.convert_to_tensor(out)
    axes = list(range(1, out.shape.rank))
    return tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - y), axes)


def _nll(y, rv):
    """Per-example negative log-likelihood of a RandomVariable output."""
    import tensorflow as tf
    lp = tf.cast(rv.distribution.log_prob(y), tf.float32)
    return -tf.reduce_sum(tf.reshape(lp, [tf.shape(lp)[0], -1]), -1)


def data(x_shape, y_shape, y_kind="normal"):
    rng = _rng(0)
    x = rng.standard_normal(x_shape).astype("float32")
    if y_kind == "normal":
        y = rng.standard_normal(y_shape).astype("float32")
    elif y_kind == "binary":
        y = (rng.uniform(size=y_shape) > 0.5).astype("float32")
    else:  # integer levels in [0, y_kind)
        y = rng.integers(0, y_kind, y_shape).astype("float32")
    return x, y


class Case:
    def __init__(self, family, make_layers, x_shape, y_shape, mode, loss="mse",
                 y_kind="normal", fit=False):
        self.family, self.make_layers, self.mode = family, make_layers, mode
        self.x_shape, self.y_shape, self.loss, self.y_kind = x_shape, y_shape, loss, y_kind
        self.fit = fit

    def on_samples(self):
        """The same layers and data with a loss on their samples: per-example noise sliced
        from the global batch's draw (`per_example_sample`), so equal to one device."""
        return Case(self.family, self.make_layers, self.x_shape, self.y_shape,
                    "per_example", loss="sample_mse", y_kind=self.y_kind)


def bl():
    import bayes_planet.layers as bl
    return bl


def case_table():
    """name -> Case. Layers are made by lambdas so that missing classes only fail
    their own case (`unavailable`)."""
    from bayes_planet._keras import keras

    def flow_nll(*flows):
        return lambda: [_FlowNLL([f() for f in flows])]

    cases = {
        # dense
        "DenseReparameterization": Case(
            "dense", lambda: [bl().DenseReparameterization(4, activation="tanh", seed=1)],
            (8, 3), (8, 4), "exact", fit=True),
        "DenseFlipout": Case("dense", lambda: [bl().DenseFlipout(4, seed=1)],
                              (8, 3), (8, 4), "per_example", fit=True),
        "DenseLocalReparameterization": Case(
            "dense", lambda: [bl().DenseLocalReparameterization(4, seed=1)], (8, 3), (8, 4),
            "per_example"),
        "DenseVariationalDropout": Case(
            "dense", lambda: [bl().DenseVariationalDropout(4, seed=1)], (8, 3), (8, 4),
            "per_example"),
        "DenseDVI": Case("dense", lambda: [bl().DenseDVI(4, activation="relu", seed=1)],
                          (8, 3), (8, 4), "exact", loss="mean_mse"),
        # conv
        "Conv1DReparameterization": Case(
            "conv", lambda: [bl().Conv1DReparameterization(2, 3, padding="causal", seed=1)],
            (8, 6, 2), (8, 6, 2), "exact"),
        "Conv1DFlipout": Case("conv", lambda: [bl().Conv1DFlipout(2, 3, seed=1)],
                               (8, 6, 2), (8, 4, 2), "per_example"),
        "Conv2DReparameterization": Case(
            "conv", lambda: [bl().Conv2DReparameterization(3, 3, padding="same", seed=1)],
            (8, 5, 5, 2), (8, 5, 5, 3), "exact", fit=True),
        "Conv2DFlipout": Case("conv", lambda: [bl().Conv2DFlipout(3, 3, seed=1)],
                               (8, 5, 5, 2), (8, 3, 3, 3), "per_example"),
        "Conv2DLocalReparameterization": Case(
            "conv", lambda: [bl().Conv2DLocalReparameterization(3, 3, seed=1)],
            (8, 5, 5, 2), (8, 3, 3, 3), "per_example"),
        # Gaussian processes
        "GaussianProcess": Case("gaussian_process", _gp_layers, (8, 2), (8, 2), "exact",
                                 loss="mean_mse"),
        "SparseGaussianProcess": Case(
            "gaussian_process",
            lambda: [bl().SparseGaussianProcess(2, num_inducing=4, seed=1)],
            (8, 2), (8, 2), "exact", loss="marginal_nll"),
        "RandomFourierFeatures": Case(
            "gaussian_process", lambda: [bl().RandomFourierFeatures(2, 16, seed=1)],
            (8, 2), (8, 2), "per_example", fit=True),
        # SNGP: the precision matrix sums the global batch (all-reduced), u updates agree.
        "SNGP": Case(
            "sngp", lambda: [bl().SpectralNormalization(
                keras.layers.Dense(4, activation="tanh"), norm_multiplier=0.5, seed=1),
                bl().RandomFeatureGaussianProcess(2, 16, seed=1)],
            (8, 3), (8, 2), "exact"),
        # stochastic outputs
        "Normal": Case("outputs", lambda: [_outputs().Normal(2, seed=1)], (8, 3), (8, 2),
                        "exact", loss="nll"),
        "Bernoulli": Case("outputs", lambda: [_outputs().Bernoulli(3, seed=1)], (8, 3),
                           (8, 3), "exact", loss="nll", y_kind="binary"),
        "Categorical": Case("outputs", lambda: [_outputs().Categorical(4, seed=1)], (8, 3),
                             (8,), "exact", loss="nll", y_kind=4),
        "MixtureNormal": Case(
            "outputs", lambda: [_outputs().MixtureNormal(2, num_components=3, seed=1)],
            (8, 3), (8, 2), "exact", loss="nll"),
        "MixtureLogistic+Discretize": Case(
            "outputs", lambda: [_outputs().MixtureLogistic(2, num_components=3, seed=1),
                                _outputs().Discretize(num_bins=8, seed=2)],
            (8, 3), (8, 2), "exact", loss="nll", y_kind=8),
        # two GP layers with a loss on their samples (`Case.on_samples`)
        "SparseGaussianProcess(2 layers, sample)": Case(
            "gaussian_process",
            lambda: [bl().SparseGaussianProcess(3, num_inducing=4, seed=1),
                     bl().SparseGaussianProcess(2, num_inducing=4, seed=2)],
            (8, 2), (8, 2), "per_example", loss="sample_mse"),
        # flows
        "RealNVP+Permutation+ActNorm": Case(
            "flows", flow_nll(lambda: _flows().RealNVP([8]), lambda: _flows().Permutation(),
                              lambda: _flows().ActNorm(data_init=False),
                              lambda: _flows().RealNVP([8], reverse_mask=True)),
            (8, 4), (8,), "exact", loss="identity"),
        "MADE": Case("flows", lambda: [_flows().MADE([8], units=2)], (8, 4), (8, 4, 2),
                      "exact"),
        "ActNorm(data_init)": Case(
            "flows", flow_nll(lambda: _flows().ActNorm(data_init=True)), (8, 4), (8,),
            "exact", loss="identity"),
        "RevNetBlock": Case("revnet", lambda: [_revnet().RevNetBlock(hidden_units=8)],
                             (8, 4), (8, 4), "exact", fit=True),
        "RevNetSequence": Case(
            "revnet", lambda: [_revnet().RevNetSequence(num_blocks=2, hidden_units=8)],
            (8, 4), (8, 4), "exact"),
        "VectorQuantizer": Case(
            "vq", lambda: [keras.layers.Dense(4), _vq().VectorQuantizer(8), _ToTensor(),
                           keras.layers.Dense(3)], (8, 3), (8, 3), "exact", fit=True),
        "VectorQuantizer(ema)": Case(
            "vq", lambda: [keras.layers.Dense(4), _vq().VectorQuantizer(8, ema=True),
                           _ToTensor(), keras.layers.Dense(3)], (8, 3), (8, 3), "exact",
            fit=True),
        # recurrent
        "LSTMCellReparameterization": Case(
            "recurrent", lambda: [keras.layers.RNN(_recurrent().LSTMCellReparameterization(
                4, seed=1))], (8, 5, 3), (8, 4), "exact", fit=True),
        "GRUCellReparameterization": Case(
            "recurrent", lambda: [keras.layers.RNN(_recurrent().GRUCellReparameterization(
                4, seed=1))], (8, 5, 3), (8, 4), "exact"),
        "LSTMCellFlipout": Case(
            "recurrent", lambda: [keras.layers.RNN(_recurrent().LSTMCellFlipout(4, seed=1))],
            (8, 5, 3), (8, 4), "per_example"),
        "GRUCellFlipout": Case(
            "recurrent", lambda: [keras.layers.RNN(_recurrent().GRUCellFlipout(4, seed=1))],
            (8, 5, 3), (8, 4), "per_example"),
        # attention / transformer
        "EinsumDenseReparameterization": Case(
            "attention", lambda: [_attention().EinsumDenseReparameterization(
                "abc,cd->abd", output_shape=(None, 4), bias_axes="d", seed=1)],
            (8, 5, 6), (8, 5, 4), "exact"),
        "MultiHeadAttentionReparameterization": Case(
            "attention", lambda: [_SelfAttention(
                _attention().MultiHeadAttentionReparameterization(2, 4, seed=1))],
            (8, 5, 6), (8, 5, 6), "exact", fit=True),
        "MultiHeadAttentionFlipout": Case(
            "attention", lambda: [_SelfAttention(
                _attention().MultiHeadAttentionFlipout(2, 4, seed=1))],
            (8, 5, 6), (8, 5, 6), "per_example"),
        "TransformerBlock(reparameterization)": Case(
            "transformer", lambda: [_transformer().TransformerBlock(
                2, 4, 16, attention="reparameterization", feed_forward="reparameterization",
                seed=1)], (8, 5, 6), (8, 5, 6), "exact"),
        "TransformerBlock(flipout+local)": Case(
            "transformer", lambda: [_transformer().TransformerBlock(2, 4, 16, seed=1)],
            (8, 5, 6), (8, 5, 6), "per_example", fit=True),
    }
    # the families with a loss on their samples: the exact cases above, each again with
    # ``sample_mse`` on its drawn value (straight-through where discrete)
    for name in SAMPLE_CASES:
        cases[f"{name}(sample)"] = cases[name].on_samples()
    return cases


#: Cases repeated with a loss on their samples (`Case.on_samples`).
SAMPLE_CASES = ("Normal", "Bernoulli", "Categorical", "MixtureNormal",
                "MixtureLogistic+Discretize", "DenseDVI")


def case_names():
    return list(case_table())


def case(name):
    return case_table()[name]


def _outputs():
    from bayes_planet.layers import outputs
    return outputs


def _flows():
    from bayes_planet.layers import flows
    return flows


def _revnet():
    from bayes_planet.layers import revnet
    return revnet


def _vq():
    from bayes_planet.layers import vq
    return vq


def _recurrent():
    from bayes_planet.layers import recurrent
    return recurrent


def _attention():
    from bayes_planet.layers import attention
    return attention


def _transformer():
    from bayes_planet.layers import transformer
    return transformer


def _gp_layers():
    z, y = data((6, 2), (6, 2))
    return [bl().GaussianProcess(2, conditional_inputs=z, conditional_outputs=y,
                                  observation_noise_variance=0.1, seed=1)]


def _wrappers():
    from bayes_planet._keras import keras

    class ToTensor(keras.layers.Layer):
        def call(self, x):
            import tensorflow as tf
            return tf.convert_to_tensor(x)

    class SelfAttention(keras.layers.Layer):
        def __init__(self, attention, **kwargs):
            super().__init__(**kwargs)
            self.attention = attention

        def call(self, x):
            return self.attention(x, x)

    class FlowNLL(keras.layers.Layer):
        """Per-example ``-log p(x)`` of data under ``N(0, I)`` through the generative
        ``flows`` in turn (not a Keras model of them: a Keras 3 model would convert a
        RandomVariable input to its value, flows.py)."""

        def __init__(self, flows, **kwargs):
            super().__init__(**kwargs)
            self.flows = list(flows)

        def call(self, x):
            import tensorflow as tf
            import tensorflow_probability as tfp

            from bayes_planet.layers import RandomVariable
            out = RandomVariable(tfp.distributions.Normal(tf.zeros_like(x), 1.0))
            for layer in self.flows:
                out = layer(out)
            return -out.distribution.log_prob(x)

    return ToTensor, SelfAttention, FlowNLL


def _ToTensor():  # noqa: N802
    return _wrappers()[0]()


def _SelfAttention(attention):  # noqa: N802
    return _wrappers()[1](attention)


def _FlowNLL(flows):  # noqa: N802
    return _wrappers()[2](flows)


def loss_fn(kind):
    import tensorflow as tf
    if kind == "mse":
        return mse
    if kind == "nll":
        return _nll
    if kind == "identity":
        return lambda y, out: tf.cast(out, tf.float32)
    if kind == "sample_mse":  # on the drawn value (straight-through where discrete)
        return mse
    if kind == "mean_mse":
        return lambda y, rv: mse(y, rv.distribution.mean())
    if kind == "marginal_nll":  # per-example marginal of an Independent(Normal, 2)
        return lambda y, rv: -tf.reduce_sum(rv.distribution.distribution.log_prob(y), -1)
    raise ValueError(kind)


def model(case):
    from bayes_planet._keras import keras

    class Net(keras.Model):
        def __init__(self, layers):
            super().__init__()
            self.parts = layers

        def call(self, x, training=None):
            for layer in self.parts:
                x = layer(x, training=training) if _takes_training(layer) else layer(x)
            return x

    return Net(case.make_layers())


def _takes_training(layer):
    import inspect
    return "training" in inspect.signature(layer.call).parameters


def keras_add_loss_cases():
    """A plain Keras layer's ``add_loss`` (`ActivityRegularization`) before a layer whose
    call runs a collective (`VectorQuantizer(ema=True)` all-reduces its EMA statistics), and
    the same without the collective."""
    from bayes_planet._keras import keras

    def layers(ema):
        return lambda: [keras.layers.Dense(4), keras.layers.ActivityRegularization(l2=0.1),
                        _vq().VectorQuantizer(8, ema=ema), _ToTensor(), keras.layers.Dense(3)]

    return {f"ActivityRegularization+VectorQuantizer{'(ema)' if ema else ''}":
            Case("vq", layers(ema), (8, 3), (8, 3), "exact") for ema in (True, False)}
