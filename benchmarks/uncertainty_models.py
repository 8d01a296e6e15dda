"""The models of the uncertainty benchmark (`benchmarks.uncertainty`): build, fit, sample.

Every model of a family is the family's network (``mlp``, ``cnn``, ``lstm``/``gru``,
``transformer``) with only its layers swapped or the network wrapped:

- ``deterministic``: the Keras twin, the reference of every ratio column;
  ``deterministic_dropout`` (transformer): the twin with its dropout.
- an estimator of `bayes_planet.layer_registry` (``reparameterization``, ``flipout``, ...)
  for every layer; ``tfp_flipout``/``tfp_reparameterization``: tfp.layers (mlp, cnn).
- ``rank1``, ``batch_ensemble``: ``ensemble_size`` members on the tiled batch
  (`bl.EnsembleModel`): every layer from the registry's ``<family>_ensemble`` family with
  that estimator (``dense_ensemble``, ``conv2d_ensemble``, ``lstm_cell_ensemble``, ...).
  A network applies only when all its families have it registered, so new ensemble
  layers add rows without changes here.
- ``deep_ensemble``: ``ensemble_size`` independently seeded twins (`bl.deep_ensemble`).
- ``mc_dropout``: the twin with a ``Dropout`` (the family's ``dropout`` rate) after each
  hidden block, evaluated with ``mc_samples`` passes (`bl.mc_dropout`; not the
  transformer, whose dropout layers sit inside its blocks).
- ``sngp`` (mlp, cnn; classification): spectral-normalized hidden layers and a
  `bl.RandomFeatureGaussianProcess` output returning mean-field logits, its covariance
  reset each epoch (`bl.GPCovarianceReset`).

`sample_outputs` returns ``[S, N, ...]`` outputs whose uniform mixture is the model's
predictive: an ensemble's members (times ``mc_samples / E`` passes for rank-1), the
stochastic passes of a sampling model, or one pass of a deterministic one.
"""

import copy
import inspect
import math
import time

import numpy as np

from bayes_planet import layer_registry
from bayes_planet.uncertainty import metrics

TWIN = layer_registry.DETERMINISTIC
#: Models trained as the twin is (no Bayesian layer), the transformer's dropout twin too.
BASELINES = (TWIN, "deterministic_dropout")
#: tfp.layers model -> its estimator's name in the tfp.layers class names.
TFP_MODELS = {"tfp_flipout": "Flipout", "tfp_reparameterization": "Reparameterization"}
#: Estimators of the registry's ``<family>_ensemble`` families (`bl.EnsembleModel` rows).
ENSEMBLE_LAYERS = ("rank1", "batch_ensemble")
#: Benchmark family -> the registry families of its layers (head included).
ARCHITECTURES = {"mlp": ("dense",), "cnn": ("conv2d", "dense"), "lstm": ("lstm_cell", "dense"),
                 "gru": ("gru_cell", "dense"), "transformer": ("multi_head_attention", "dense")}
#: Models that wrap or rebuild the twin -> the families they apply to (`bl.mc_dropout`
#: swaps a network's own Dropout layers: the transformer's sit inside its blocks).
WRAPPED = {"deep_ensemble": tuple(ARCHITECTURES), "mc_dropout": ("mlp", "cnn", "lstm", "gru"),
           "sngp": ("mlp", "cnn")}
#: Models whose predictive is one forward pass (mc_dropout: its ``T`` draws are in it).
SINGLE_PASS = BASELINES + ("batch_ensemble", "deep_ensemble", "mc_dropout", "sngp")
#: Models with a classification output only (regression tasks skip them).
CLASSIFICATION_ONLY = ("sngp",)


def keras_for(model):
    """The Keras module ``model``'s network is built and fit with: tfp.layers are Keras 2
    layers, so beside Keras 3 (TF >= 2.16) the ``tfp_*`` rows use tf-keras (a dependency of
    the layers there), as a Keras 3 user of tfp.layers must; every other row, the process's
    Keras (`bayes_planet.layers.keras`)."""
    from bayes_planet.layers import KERAS3, keras

    if model in TFP_MODELS and KERAS3:
        import tf_keras

        return tf_keras
    return keras


def _registered(family, estimator):
    return (family in layer_registry.families()
            and estimator in layer_registry.estimators(family))


def _ensemble_applies(family, estimator):
    if not all(_registered(f + "_ensemble", estimator) for f in ARCHITECTURES[family]):
        return False
    if family == "transformer":  # Its blocks pick their layers: do they take ensembles?
        from bayes_planet.layers import build_transformer

        return "ensemble_size" in inspect.signature(build_transformer).parameters
    return True


def family_models(family, regression=False):
    """The models ``family`` can build (in the registry's current state)."""
    if family == "transformer":
        own = BASELINES + ("reparameterization", "flipout", "local_reparameterization")
    else:
        own = layer_registry.estimators(ARCHITECTURES[family][0],
                                        sampling_only=family == "cnn")
        own += tuple(TFP_MODELS) if family in ("mlp", "cnn") else ()
    models = (own + tuple(m for m in ENSEMBLE_LAYERS if _ensemble_applies(family, m))
              + tuple(m for m, families in WRAPPED.items() if family in families))
    return tuple(m for m in models if not (regression and m in CLASSIFICATION_ONLY))


def known_models():
    """Every model name some family builds."""
    return sorted({m for family in ARCHITECTURES for m in family_models(family)})


class Layers:
    """Layer constructors of one model: the same calls build every model's network.

    ``config``: the benchmark's (``kernel_regularizer``, ``kernel_initializer``,
    ``ensemble_size``, ``factor_initializers``, ``factor_regularizers``, ``sngp``).
    """

    def __init__(self, model, seed, dataset_size, config):
        self.model, self.dataset_size, self.config = model, dataset_size, config
        self._seeds = iter(range(seed * 1000, seed * 1000 + 1000))

    @property
    def deterministic(self):
        return self.model in BASELINES or self.model in WRAPPED

    def _ours(self, family, *args, priors=("kernel_regularizer",), **kwargs):
        """``family``'s layer of this model (an ensemble family's for rank1/batch_ensemble)."""
        if self.model in ENSEMBLE_LAYERS:  # Point-estimate kernels: their factors' priors.
            cls = layer_registry.get(family + "_ensemble", self.model)
            kwargs["ensemble_size"] = self.config["ensemble_size"]
            kwargs.update(self.factors(inspect.signature(cls).parameters))
        else:
            cls = layer_registry.get(family, self.model)
            kwargs.update(self._prior(*priors))
        if "seed" in inspect.signature(cls).parameters:
            kwargs["seed"] = next(self._seeds)
        return cls(*args, **kwargs)

    def factor_initializer(self):
        """The configured initializer (alias or config) of this ensemble model's factors
        α and γ, or None for the layers' default."""
        return self.config["factor_initializers"].get(self.model)

    def factor_regularizer(self):
        """The configured prior (regularizer alias or config) of this ensemble model's
        factors α and γ, or None for the layers' default."""
        return self.config["factor_regularizers"].get(self.model)

    def factors(self, parameters):
        """Fresh instances of the configured factor initializer and prior for every factor
        argument among ``parameters`` (a layer's: ``alpha_initializer``, ...,
        ``recurrent_gamma_regularizer``); none for a factor setting left at null."""
        from bayes_planet.layers import ensemble

        stems = [s for s in ensemble.FACTOR_NAMES if f"{s}_initializer" in parameters]
        return ensemble.factor_arguments(self.factor_initializer(), self.factor_regularizer(),
                                         stems)

    def _prior(self, *names):
        from bayes_planet.layers import initializers, regularizers

        if self.model == "variational_dropout":
            return {}
        kwargs = {}
        regularizer, initializer = (self.config["kernel_regularizer"],
                                    self.config["kernel_initializer"])
        if regularizer is not None:
            kwargs.update({name: regularizers.get(copy.deepcopy(regularizer)) for name in names})
        if initializer is not None:
            kwargs.update({name.replace("regularizer", "initializer"):
                           initializers.get(copy.deepcopy(initializer)) for name in names})
        return kwargs

    def _tfp(self, name, *args, **kwargs):
        import tensorflow_probability as tfp

        n = float(self.dataset_size)
        cls = getattr(tfp.layers, name + TFP_MODELS[self.model])
        return cls(*args, kernel_divergence_fn=lambda q, p, _: tfp.distributions.kl_divergence(
            q, p) / n, **kwargs)

    def _spectral(self, wrapper, layer):
        import bayes_planet.layers as bl

        return getattr(bl, wrapper)(layer, norm_multiplier=self.config["sngp"]["norm_multiplier"],
                                    seed=next(self._seeds))

    def dense(self, units, activation=None):
        keras = keras_for(self.model)
        if self.model == "sngp":
            return self._spectral("SpectralNormalization", keras.layers.Dense(units, activation))
        if self.deterministic:
            return keras.layers.Dense(units, activation)
        if self.model in TFP_MODELS:
            return self._tfp("Dense", units, activation=activation)
        return self._ours("dense", units, activation=activation)

    def conv(self, filters, activation="relu"):
        keras = keras_for(self.model)
        if self.model == "sngp":
            return self._spectral("SpectralNormalizationConv2D", keras.layers.Conv2D(
                filters, 3, padding="same", activation=activation))
        if self.deterministic:
            return keras.layers.Conv2D(filters, 3, padding="same", activation=activation)
        if self.model in TFP_MODELS:
            return self._tfp("Convolution2D", filters, 3, padding="same", activation=activation)
        return self._ours("conv2d", filters, 3, padding="same", activation=activation)

    def cell(self, kind, units):
        family = f"{kind}_cell"
        if self.deterministic:
            return layer_registry.get(family, TWIN)(units)
        return self._ours(family, units, priors=("kernel_regularizer", "recurrent_regularizer"))

    def output(self, units):
        """The output layer: SNGP's GP (mean-field logits at inference) or `dense`."""
        if self.model != "sngp":
            return self.dense(units)
        from bayes_planet.layers.sngp import MEAN_FIELD_FACTOR, RandomFeatureGaussianProcess

        return RandomFeatureGaussianProcess(units, self.config["sngp"]["num_inducing"],
                                            mean_field_factor=MEAN_FIELD_FACTOR,
                                            seed=next(self._seeds))


#: Transformer model -> (attention, feed_forward) choices of `bl.build_transformer` (the
#: others use the model's name for both).
TRANSFORMER_LAYERS = {"deterministic_dropout": (TWIN, TWIN),
                      "local_reparameterization": ("flipout", "local_reparameterization")}


def _network(family, model, data, fcfg, seed, layers, outputs):
    """The family's network with ``layers``' layer classes (no wrapper)."""
    keras = keras_for(model)
    shape = data["x_train"].shape[1:]
    if family == "transformer":
        from bayes_planet.layers import build_transformer

        attention, feed_forward = TRANSFORMER_LAYERS.get(model, (model, model))
        ensemble = ({"ensemble_size": layers.config["ensemble_size"],
                     "factor_initializer": layers.factor_initializer(),
                     "factor_regularizer": layers.factor_regularizer()}
                    if model in ENSEMBLE_LAYERS else {})
        return build_transformer(
            int(data["x_train"].max()) + 1, shape[0], outputs, d_model=fcfg["d_model"],
            num_heads=fcfg["num_heads"], ff_dim=fcfg["ff_dim"], num_layers=fcfg["num_layers"],
            attention=attention, feed_forward=feed_forward, seed=seed,
            kernel_regularizer=None if model in BASELINES else layers.config["kernel_regularizer"],
            dropout=fcfg["dropout"] if model == "deterministic_dropout" else 0.0, **ensemble)
    def drop():  # a fresh Dropout per block: Keras 2's clone_model keeps a reused one once
        return [keras.layers.Dropout(fcfg["dropout"])] if model == "mc_dropout" else []

    stack = [keras.Input(shape)]
    if family == "mlp":
        for units in fcfg["hidden"]:
            stack += [layers.dense(units, "relu")] + drop()
    elif family == "cnn":
        for filters in fcfg["filters"]:
            stack += [layers.conv(filters), keras.layers.MaxPooling2D(2, padding="same")] + drop()
        stack.append(keras.layers.Flatten())
    else:
        stack += [keras.layers.RNN(layers.cell(family, fcfg["units"]))] + drop()
    stack.append(layers.output(outputs))
    return keras.Sequential(stack)


def build_model(family, model, data, fcfg, seed, config):
    """The model: the family's network with ``model``'s layers, wrapped for the ensembles
    and MC dropout; outputs logits or (mean, raw scale)."""
    import bayes_planet.layers as bl

    regression = "y_scale" in data
    outputs = 2 if regression else int(max(data["y_train"].max(), data["y_test"].max()) + 1)
    output = "mean" if regression else "logits"  # Only for model(x); see sample_outputs.
    size = config["ensemble_size"]

    def network(name, seed):
        layers = Layers(name, seed, data["y_train"].size, config)  # examples (tokens)
        return _network(family, name, data, fcfg, seed, layers, outputs)

    if model == "deep_ensemble":
        return bl.deep_ensemble(lambda seed: network(TWIN, seed), size, output=output,
                                seed=seed)
    if model in ENSEMBLE_LAYERS:
        return bl.EnsembleModel(network(model, seed), size, output=output, seed=seed)
    if model == "mc_dropout":
        return bl.mc_dropout(network(model, seed), config["mc_samples"], output=output,
                             seed=seed)
    return network(model, seed)


def trainable_params(model):
    """The number of trainable parameters (scalars) of ``model``."""
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def fit(model, data, fcfg, regression, *, name, seed):
    """The plain Keras workflow: compile + fit for about ``steps`` Adam steps (``name``:
    the benchmark model, whose Keras `keras_for` gives); seconds.

    The batches come from a ``tf.data`` pipeline reshuffled every epoch from ``seed``: Keras 3's
    ``fit(x, y, shuffle=True)`` on arrays repeats one permutation in every epoch once
    ``keras.utils.set_random_seed`` has run (``experiments/results/8d-every-family-nine-tasks.md``), Keras 2 does
    not; this pipeline gives both stacks the same per-epoch reshuffling."""
    import tensorflow as tf

    from bayes_planet.layers.sngp import GPCovarianceReset, gp_layers

    keras = keras_for(name)

    loss = metrics.gaussian_nll if regression else keras.losses.SparseCategoricalCrossentropy(
        from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(fcfg["learning_rate"]), loss=loss)
    per_epoch = math.ceil(len(data["x_train"]) / fcfg["batch_size"])
    callbacks = [GPCovarianceReset()] if gp_layers(model) else []
    start = time.perf_counter()
    batches = tf.data.Dataset.from_tensor_slices((data["x_train"], data["y_train"])).shuffle(
        len(data["x_train"]), seed=seed, reshuffle_each_iteration=True).batch(fcfg["batch_size"])
    model.fit(batches, epochs=max(1, round(fcfg["steps"] / per_epoch)), verbose=0,
              shuffle=False, callbacks=callbacks)  # (the pipeline shuffles)
    return time.perf_counter() - start


def warm_up():
    """One tiny fit, so that the process's first-fit costs land on no timed model."""
    from bayes_planet.layers import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    model.fit(np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32), verbose=0)


def _members_fn(model):
    """``x -> [K, b, ...]``: the ``K`` members (or MC draws) of one forward pass."""
    import tensorflow as tf

    import bayes_planet.layers as bl

    if isinstance(model, bl.DeepEnsemble):
        return lambda x: tf.stack([m(x, training=False) for m in model.members])
    if isinstance(model, bl.EnsembleModel | bl.MonteCarloModel):  # E blocks of the tiled batch
        def blocks(x):
            out = model.member_outputs(x, training=False)
            return tf.reshape(out, tf.concat([[model.ensemble_size, -1], tf.shape(out)[1:]], 0))
        return blocks
    return None


def sample_outputs(model, name, inputs, samples):
    """``{set: [S, N, ...]}`` outputs on ``inputs`` (``{set: [N, ...]}``) whose uniform
    mixture is the predictive (module docstring): ``samples`` stochastic passes, one pass
    of a deterministic model, an ensemble's members (rank-1: ``round(samples / E)``
    passes of its ``E`` members)."""
    import tensorflow as tf

    training = name == "variational_dropout"  # at inference it uses its pruned means
    call = _members_fn(model) or (lambda x: model(x, training=training)[None])
    call = tf.function(call, reduce_retracing=True)  # One function for every set.
    passes = 1 if name in SINGLE_PASS else max(1, round(samples / getattr(
        model, "ensemble_size", 1)))

    def one_pass(x):
        return np.concatenate([call(x[i:i + 1000]).numpy() for i in range(0, len(x), 1000)],
                              axis=1)

    return {k: np.concatenate([one_pass(x) for _ in range(passes)]) for k, x in inputs.items()}
