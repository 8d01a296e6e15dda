"""Ensembles as Keras models: tiled members, deep ensembles and MC dropout.

Three baselines, each one Keras model that compiles, fits, evaluates, predicts and
saves (``.keras`` + ``keras.models.load_model``) like the model it wraps:

- `EnsembleModel`: a model whose layers hold ``E`` members on the ensemble
  batch convention of `bayes_planet.layers.ensemble` (`DenseRank1`,
  `DenseBatchEnsemble`: ``E`` contiguous blocks of the batch, block ``e`` through member
  ``e``). The wrapper tiles the input ``E`` times, so every member sees the same
  examples, and returns the members' averaged predictive.
- `DeepEnsemble` (`deep_ensemble`): ``N`` independently initialized models (Lakshminarayanan
  et al., 2017), each built under its own named seed, with the same averaged predictive.
- `MonteCarloModel` (`mc_dropout`): ``T`` stochastic forward passes of one model averaged
  (Gal & Ghahramani, 2016). `MCDropout` is `keras.layers.Dropout` that stays on at
  inference, with seeded stateless masks; `mc_dropout` swaps it in for a model's Dropout
  layers (sharing every other layer, so its weights are the model's).

The predictive (``model(x)``, ``predict``, ``evaluate``): ``output`` says what the
members return and the average keeps that kind, so the loss the member was compiled
with scores the ensemble's predictive:

- ``'logits'`` (default): class logits on the last axis. The ensemble returns
  ``log mean_e softmax(logits_e)``, the log of the averaged probabilities (computed as a
  log-mean-exp of log-softmaxes, stable for any logits). These are normalized
  log-probabilities, hence valid logits: ``softmax`` of them is the mean probability, and
  ``SparseCategoricalCrossentropy(from_logits=True)`` of them is the ensemble's NLL.
- ``'binary_logits'``: sigmoid logits; the ensemble returns ``log p̄ - log(1 - p̄)`` with
  ``p̄ = mean_e sigmoid(logits_e)``, both logs as log-mean-exps of log-sigmoids.
- ``'probabilities'``: probabilities (softmax/sigmoid outputs), averaged.
- ``'mean'``: any other tensor (a regression's prediction), averaged.
- A member returning a `RandomVariable` (the output layers of `bayes_planet.layers.outputs`)
  gives a `RandomVariable` of the uniform mixture ``tfd.Mixture`` of the members'
  distributions whatever ``output`` says: ``bl.negative_log_likelihood`` is then the
  mixture's NLL (a log-sum-exp inside tfp), and its value is a seeded mixture sample.

A model whose last layer ends in a softmax or sigmoid returns probabilities, so wrapping
it with ``'logits'``/``'binary_logits'`` is refused (pass ``output='probabilities'``).
Averages of 16-bit outputs are computed and returned in float32. One output per model
(no nests).

Training (``fit``): the loss of every member on the same examples. `EnsembleModel` tiles
inputs, labels and sample weights ``E`` times and applies the compiled loss to the
members' outputs, exactly what a hand-tiled ``inner.fit`` computes (same loss values and
updates; training metrics also see the members' outputs and tiled labels). `DeepEnsemble`
applies the compiled loss to each member's output, adds that member's own regularization
losses and minimizes the sum over members, so each member gets the gradient of its own
loss: one ``fit`` is ``N`` independent trainings (the same updates with any per-parameter
optimizer; a global-norm ``clipnorm`` would couple them); the reported loss and training
metrics are means over the members. `MonteCarloModel` trains like the wrapped model (one
dropout sample per example: ``fit`` computes what ``inner.fit`` computes) and averages
``T`` samples only at inference. ``evaluate`` scores the averaged predictive, plus the
model's regularization losses (``model.losses``, as for any Keras model).

Example::

    import bayes_planet.layers as bl

    def build():
        return keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, "relu"),
                                 keras.layers.Dense(10)])                  # logits

    model = bl.deep_ensemble(build, num_models=5, seed=0)                  # or:
    batch_ensemble = keras.Sequential([keras.Input((8,)),
                                       bl.DenseBatchEnsemble(32, "relu", ensemble_size=4),
                                       bl.DenseBatchEnsemble(10, ensemble_size=4)])
    model = bl.EnsembleModel(batch_ensemble, ensemble_size=4)              # or:
    model = bl.mc_dropout(dropout_model, num_samples=30, seed=0)           # (has Dropout)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64)           # plain batches: no hand tiling
    nll, accuracy = model.evaluate(x_test, y_test)   # of the averaged predictive
    probs = tf.nn.softmax(model.predict(x_test))     # mean of the members' probabilities
    model.save("ensemble.keras"); keras.models.load_model("ensemble.keras")

Seeds: `deep_ensemble` builds member ``i`` right after
``keras.utils.set_random_seed(seeds.int_seed(seed, "deep_ensemble", i))`` (Keras 2
initializers without a seed draw from the global seed; the global seed is left at the last
member's) and passes that seed to ``build_fn(seed=...)`` when it takes one, for layers with
seeds of their own (Bayesian layers, `MCDropout`). `mc_dropout` seeds the ``k``-th swapped
Dropout layer with ``seeds.int_seed(seed, "mc_dropout", k)``. ``seed=None`` draws fresh
seeds (not reproducible), as for every layer here.
"""

import inspect
import math
import random

import tensorflow as tf
import tensorflow_probability as tfp

from bayes_planet import seeds
from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers._registry import register as _register
from bayes_planet.layers.base import BayesianLayer, check_positive_int
from bayes_planet.layers.ensemble.dense import member_rows
from bayes_planet.layers.noise import per_example
from bayes_planet.layers.random_variable import RandomVariable

tfd = tfp.distributions

__all__ = [
    "DeepEnsemble",
    "EnsembleModel",
    "MCDropout",
    "MonteCarloModel",
    "deep_ensemble",
    "mc_dropout",
    "mean_predictive",
    "tile_batch",
]


#: The kinds of member outputs the average understands (see the module docstring).
OUTPUTS = ("logits", "binary_logits", "probabilities", "mean")
DEFAULT_OUTPUT = OUTPUTS[0]


def _check_output(output):
    if output not in OUTPUTS:
        raise ValueError(f"Expected one of {', '.join(map(repr, OUTPUTS))}. "
                         f"Received: output={output!r}")
    return output


def tile_batch(x, ensemble_size):
    """``x`` (a tensor, array or nest of them; None stays None) tiled ``ensemble_size``
    times along axis 0: ``E`` contiguous copies of the batch, the ensemble convention."""
    ensemble_size = check_positive_int("ensemble_size", ensemble_size)

    def tile(t):
        if t is None:
            return None
        t = tf.convert_to_tensor(t)
        if t.shape.rank == 0:
            raise ValueError("Expected inputs with a batch axis. Received: a scalar of shape ()")
        multiples = tf.concat([[ensemble_size], tf.ones([tf.rank(t) - 1], tf.int32)], 0)
        return tf.tile(t, multiples)

    return None if x is None else tf.nest.map_structure(tile, x)


def _log_mean_exp(t):
    """``log mean_e exp(t_e)`` over axis 0, stably."""
    return tf.reduce_logsumexp(t, axis=0) - math.log(t.shape[0])


def _average(members, output):
    """The averaged predictive of ``members``, a list of ``E`` same-shape tensors."""
    stacked = tf.stack([tf.convert_to_tensor(m) for m in members])
    if stacked.dtype in (tf.float16, tf.bfloat16):
        stacked = tf.cast(stacked, tf.float32)
    if output == "logits":
        return _log_mean_exp(tf.nn.log_softmax(stacked, axis=-1))
    if output == "binary_logits":
        return _log_mean_exp(tf.math.log_sigmoid(stacked)) - _log_mean_exp(
            tf.math.log_sigmoid(-stacked))
    return tf.reduce_mean(stacked, axis=0)


def _mixture(members, seed):
    """A `RandomVariable` of the uniform mixture of the members' distributions."""
    components = [m.distribution for m in members]
    batch = components[0].batch_shape_tensor()
    dtype = components[0].dtype if components[0].dtype.is_floating else tf.float32
    cat = tfd.Categorical(logits=tf.zeros(tf.concat([batch, [len(members)]], 0), dtype))
    mixture = tfd.Mixture(cat, components)
    return RandomVariable(mixture, value=lambda: mixture.sample(seed=seed))


def _combine(members, output, seed):
    """``members`` (``E`` per-member outputs of ``b`` rows) -> the averaged predictive."""
    if isinstance(members[0], RandomVariable):
        return _mixture(members, seed)
    if any(isinstance(m, list | tuple | dict) for m in members):
        raise TypeError("Expected one output tensor or RandomVariable per model. Received: "
                        f"{type(members[0]).__name__}")
    return _average(members, output)


def _split(outputs, ensemble_size):
    """The ``E`` blocks of an ensemble batch: a list of per-member outputs."""
    if isinstance(outputs, RandomVariable):
        dist = outputs.distribution
        probe = tf.zeros(dist.batch_shape_tensor()[:1])  # a batch of the distribution's rows
        probe.set_shape(dist.batch_shape[:1])
        rows = member_rows(probe, ensemble_size)
        return [RandomVariable(dist[e * rows:(e + 1) * rows])
                for e in range(ensemble_size)]
    outputs = tf.convert_to_tensor(outputs)
    rows = member_rows(outputs, ensemble_size)
    blocks = tf.reshape(outputs, tf.concat([[ensemble_size, rows], tf.shape(outputs)[1:]], 0))
    if outputs.shape.rank is not None:
        static = outputs.shape[0]
        blocks.set_shape([ensemble_size, None if static is None else static // ensemble_size]
                         + outputs.shape[1:].as_list())
    return tf.unstack(blocks, num=ensemble_size)


def mean_predictive(outputs, ensemble_size, output=DEFAULT_OUTPUT, seed=None):
    """The averaged predictive of an ensemble batch (``E`` contiguous blocks of ``b`` rows).

    Args:
      outputs: the members' outputs, ``(E·b, ...)``: a tensor or a `RandomVariable`.
      ensemble_size: ``E``.
      output: what the members return (module docstring): ``'logits'``,
        ``'binary_logits'``, ``'probabilities'`` or ``'mean'``.
      seed: stateless ``[2]`` seed of the mixture's sample (RandomVariable outputs only).
    Returns:
      ``(b, ...)``: a tensor of the same kind, or a `RandomVariable` of the mixture.
    Raises:
      ValueError: a batch not divisible by ``ensemble_size``, a bad ``output``.
    """
    ensemble_size = check_positive_int("ensemble_size", ensemble_size)
    output = _check_output(output)
    return _combine(_split(outputs, ensemble_size), output, seed)


def _final_activation(model):
    """'softmax'/'sigmoid' when the model's last layer ends with one, else None."""
    layers = getattr(model, "layers", None)
    if not layers:
        return None
    last = layers[-1]
    if isinstance(last, keras.layers.Softmax):
        return "softmax"
    name = getattr(getattr(last, "activation", None), "__name__", None)
    return name if name in ("softmax", "sigmoid") else None


def _ensemble_layers(model):
    """The layers of ``model`` (itself included) that hold members on the ensemble batch
    convention: those with an integer ``ensemble_size`` (the dense, convolutional,
    recurrent-cell and attention ensemble layers; a `TransformerBlock` given one)."""
    return [layer for layer in [model] + _compat.submodules(model)
            if isinstance(getattr(layer, "ensemble_size", None), int)]


def _check_model(name, model, output):
    if not isinstance(model, keras.layers.Layer):
        raise TypeError(f"Expected a Keras model. Received: {name}={model!r}")
    activation = _final_activation(model)
    if activation is not None and output in ("logits", "binary_logits"):
        raise ValueError(f"{name} {model.name!r} ends with a {activation}, so it returns "
                         f"probabilities: pass output='probabilities'. Received: "
                         f"output={output!r}")
    return model


class _Ensemble(BayesianLayer, keras.Model):
    """Base: ``_members(x, training)`` (a list of per-member outputs) -> their predictive."""

    def __init__(self, output, seed, **kwargs):
        super().__init__(**kwargs)
        self.output_type = _check_output(output)
        self._init_seed(seed)

    @property
    def ensemble_size(self):
        raise NotImplementedError

    def call(self, inputs, training=None):
        members = self._members(inputs, training)
        seed = self._next_seed() if isinstance(members[0], RandomVariable) else None
        return _combine(members, self.output_type, seed)

    def get_config(self):
        config = super().get_config()
        config.update(name=self.name, output=self.output_type)
        return config


class _Tiled(_Ensemble):
    """One model run on the batch tiled ``size`` times (`EnsembleModel`, `MonteCarloModel`)."""

    def __init__(self, model, size, output, seed, **kwargs):
        super().__init__(output=output, seed=seed, **kwargs)
        self.inner = _check_model("model", model, output)
        self._size = size

    @property
    def ensemble_size(self):
        return self._size

    def member_outputs(self, inputs, training=None):
        """The wrapped model on the tiled batch: ``(E·b, ...)``, block ``e`` member ``e``."""
        return self.inner(tile_batch(inputs, self._size), training=training)

    def _members(self, inputs, training):
        return _split(self.member_outputs(inputs, training), self._size)

    def _training_batch(self, x, y, sample_weight):
        """``(y_pred, y, sample_weight)`` for the training loss."""
        raise NotImplementedError

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        _compat.build_in_train_step(self, x)
        with tf.GradientTape() as tape:
            y_pred, y, sample_weight = self._training_batch(x, y, sample_weight)
            loss = _compat.tracked_loss(self, y, y_pred, sample_weight, self.losses)
        _compat.minimize(self, loss, tape)
        return self.compute_metrics(x, y, y_pred, sample_weight)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["model"] = keras.saving.deserialize_keras_object(config["model"])
        return cls(**config)


@_register
class EnsembleModel(_Tiled):
    """An ensemble-layer model (``E`` members on the tiled batch) as a plain Keras model.

    ``EnsembleModel(model, E)(x)`` runs ``model`` on ``x`` tiled ``E`` times (block ``e``
    goes through member ``e`` of its `DenseRank1`/`DenseBatchEnsemble` layers) and returns
    the members' averaged predictive (module docstring); ``fit`` applies the compiled loss
    to the members' outputs on tiled labels, as a hand-tiled ``model.fit`` does.

    Args:
      model: a Keras model whose ensemble layers have ``ensemble_size=E``.
      ensemble_size: ``E``.
      output: ``'logits'`` (default), ``'binary_logits'``, ``'probabilities'`` or ``'mean'``.
      seed: int or None, for the mixture's sample when ``model`` returns a RandomVariable.

    Input ``(b, ...)`` (anything ``model`` takes); output ``(b, ...)``.

    Raises:
      ValueError: ``model`` has ensemble layers of another ``ensemble_size``, or none
        (checked when it is wrapped, or loaded, if it has its layers; else at its first call).
    """

    def __init__(self, model, ensemble_size, *, output=DEFAULT_OUTPUT, seed=None, **kwargs):
        super().__init__(model, check_positive_int("ensemble_size", ensemble_size), output,
                         seed, **kwargs)
        self._layers_checked = False
        self._check_ensemble_layers()

    def _check_ensemble_layers(self):
        """Refuses ensemble layers of another ``ensemble_size`` in the wrapped model (their
        blocks would not be its members) and, once it is built, a model without any (its
        members would be identical): at construction for a model that has its layers (as a
        loaded one), else after its first call."""
        if self._layers_checked:
            return
        layers = _ensemble_layers(self.inner)
        for layer in layers:
            if layer.ensemble_size != self.ensemble_size:
                raise ValueError(
                    f"Expected the model's ensemble layers to have ensemble_size="
                    f"{self.ensemble_size} (EnsembleModel's). Received: layer={layer.name!r} "
                    f"with ensemble_size={layer.ensemble_size}")
        if self.inner.built:
            if not layers:
                raise ValueError(
                    "Expected a model with ensemble layers (an ensemble_size attribute: "
                    "DenseRank1, DenseBatchEnsemble, ...), else its members are identical. "
                    f"Received: model={self.inner.name!r} without any")
            self._layers_checked = True

    def member_outputs(self, inputs, training=None):
        outputs = super().member_outputs(inputs, training)
        self._check_ensemble_layers()  # A model that makes its layers when first called.
        return outputs

    def _training_batch(self, x, y, sample_weight):
        size = self.ensemble_size
        return (self.member_outputs(x, training=True), tile_batch(y, size),
                tile_batch(sample_weight, size))

    def get_config(self):
        config = super().get_config()
        config.update(model=keras.saving.serialize_keras_object(self.inner),
                      ensemble_size=self.ensemble_size)
        return config


@_register
class MonteCarloModel(_Tiled):
    """The average of ``num_samples`` stochastic forward passes of one model.

    ``model(x)`` runs ``model`` once on ``x`` tiled ``T`` times and averages the ``T``
    blocks (module docstring), so each example gets ``T`` independent draws of the noise
    of layers that draw it per example (`MCDropout`, Flipout and local-reparameterization
    layers, output-layer samples); a layer that draws one weight sample per call
    (Reparameterization) gives all ``T`` blocks the same sample. ``fit`` trains ``model``
    itself on the untiled batch (one draw per example), as ``model.fit`` does.

    Args:
      model: a Keras model with stochastic layers active at inference (see `mc_dropout`).
      num_samples: ``T``.
      output: ``'logits'`` (default), ``'binary_logits'``, ``'probabilities'`` or ``'mean'``.
      seed: int or None, for the mixture's sample when ``model`` returns a RandomVariable.
    """

    def __init__(self, model, num_samples, *, output=DEFAULT_OUTPUT, seed=None, **kwargs):
        super().__init__(model, check_positive_int("num_samples", num_samples), output, seed,
                         **kwargs)

    @property
    def num_samples(self):
        return self.ensemble_size

    def _training_batch(self, x, y, sample_weight):
        return self.inner(x, training=True), y, sample_weight

    def get_config(self):
        config = super().get_config()
        config.update(model=keras.saving.serialize_keras_object(self.inner),
                      num_samples=self.num_samples)
        return config


@_register
class MCDropout(BayesianLayer, keras.layers.Dropout):
    """Dropout that is on in training and at inference: Monte Carlo dropout's layer.

    Same arguments and computation as `keras.layers.Dropout` with ``training=True``
    (drops with probability ``rate``, scales the kept inputs by ``1 / (1 - rate)``, a
    mask of ``noise_shape`` broadcast over the input), whatever ``training`` says. The
    mask is a stateless draw from ``[seed, counter]`` (every Bayesian layer's noise:
    reproducible with ``seed``, new each call, checkpointed, fixed by `fixed_noise`),
    one per example (replica-aware under a distribution strategy).

    Args:
      rate: the drop probability, in ``[0, 1]``.
      noise_shape: as `keras.layers.Dropout` (None: one mask entry per input element).
      seed: int or None.
    """

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(rate, noise_shape, seed, **kwargs)
        self._init_seed(seed)

    def call(self, inputs, training=None):
        del training  # Always on.
        x = tf.convert_to_tensor(inputs)
        if self.rate == 0:
            return tf.identity(x)
        shape = tf.shape(x)
        if self.noise_shape is not None:  # None entries: the input's size (as Keras)
            shape = tf.stack([shape[i] if size is None else size
                              for i, size in enumerate(self.noise_shape)])
        uniform = per_example(lambda s, sd: tf.random.stateless_uniform(s, sd), shape,
                              self._next_seed())
        scale = 1.0 / (1.0 - self.rate) if self.rate < 1 else 0.0
        return tf.where(uniform >= self.rate, x * tf.cast(scale, x.dtype), tf.zeros_like(x))


def _is_plain_dropout(layer):
    return isinstance(layer, keras.layers.Dropout) and not isinstance(layer, MCDropout)


def _swap_dropout(model, seed):
    """A twin of ``model`` sharing its layers, with MCDropout for each plain Dropout."""
    count = iter(range(len(model.layers)))

    def clone(layer):
        if not _is_plain_dropout(layer):
            return layer  # shared: the twin's weights are the model's
        config = layer.get_config()
        config["seed"] = None if seed is None else seeds.int_seed(seed, "mc_dropout", next(count))
        return MCDropout.from_config(config)

    if not _compat.is_graph_model(model):
        raise ValueError("mc_dropout swaps the Dropout layers of a Sequential or functional "
                         f"model; build a subclassed model with bl.MCDropout and wrap it in "
                         f"bl.MonteCarloModel. Received: model={type(model).__name__}")
    twin = keras.models.clone_model(model, clone_function=clone)
    if any(_is_plain_dropout(layer) for layer in _compat.submodules(twin)):
        raise ValueError("mc_dropout swaps the Dropout layers of the model's own layers, not "
                         "those inside nested models: use bl.MCDropout there. Received: "
                         f"model={model.name!r}")
    return twin


def mc_dropout(model, num_samples, *, output=DEFAULT_OUTPUT, seed=None):
    """Monte Carlo dropout (Gal & Ghahramani, 2016): `MonteCarloModel` with dropout on.

    Each `keras.layers.Dropout` of ``model`` (a Sequential or functional model) becomes an
    `MCDropout` with its rate and noise shape in a twin that shares every other layer, so
    training either trains both. A model that already uses `MCDropout` is wrapped as it is.

    Args:
      model: the dropout model.
      num_samples: forward passes averaged at inference, ``T``.
      output: what ``model`` returns (module docstring).
      seed: int or None: the ``k``-th swapped layer's seed is
        ``seeds.int_seed(seed, "mc_dropout", k)``.
    Raises:
      ValueError: no dropout layer in ``model``; a bad ``num_samples`` or ``output``.
    """
    num_samples = check_positive_int("num_samples", num_samples)
    _check_model("model", model, _check_output(output))
    layers = [layer for layer in _compat.submodules(model) if isinstance(layer, keras.layers.Dropout)]
    if not layers:
        raise ValueError(f"Expected a model with Dropout layers. Received: model={model.name!r} "
                         "without any")
    if any(_is_plain_dropout(layer) for layer in layers):
        model = _swap_dropout(model, seed)
    return MonteCarloModel(model, num_samples, output=output, seed=seed)


@_register
class DeepEnsemble(_Ensemble):
    """``N`` separately initialized models, one Keras model with their averaged predictive.

    ``DeepEnsemble(members)(x)`` is the averaged predictive of ``members[i](x)`` (module
    docstring). ``fit`` trains every member on the same batches with its own loss: the
    reported loss is the mean of the members' losses (data loss plus the member's
    regularization losses), the gradient that of their sum. Build one with `deep_ensemble`.

    Args:
      members: a list of built Keras models with the same input and output shapes.
      output: ``'logits'`` (default), ``'binary_logits'``, ``'probabilities'`` or ``'mean'``.
      seed: int or None, for the mixture's sample when the members return RandomVariables.
    """

    def __init__(self, members, *, output=DEFAULT_OUTPUT, seed=None, **kwargs):
        super().__init__(output=output, seed=seed, **kwargs)
        if not isinstance(members, list | tuple) or not members:
            raise ValueError(f"Expected a non-empty list of models. Received: members={members!r}")
        self.members = [_check_model(f"members[{i}]", m, output) for i, m in enumerate(members)]

    @property
    def ensemble_size(self):
        return len(self.members)

    def _members(self, inputs, training):
        return [member(inputs, training=training) for member in self.members]

    def train_step(self, data):
        """Each member's own loss (its data loss plus its regularization losses) on the
        batch; the ``loss`` metric averages them, the gradient is of their sum."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        _compat.build_in_train_step(self, x)
        with tf.GradientTape() as tape:
            outputs = self._members(x, training=True)
            loss = tf.add_n([
                _compat.tracked_loss(self, y, out, sample_weight, member.losses)
                for member, out in zip(self.members, outputs, strict=True)])
        _compat.minimize(self, loss, tape)
        for out in outputs:
            metrics = self.compute_metrics(x, y, out, sample_weight)
        return metrics

    def get_config(self):
        config = super().get_config()
        config.update(members=[keras.saving.serialize_keras_object(m) for m in self.members])
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["members"] = [keras.saving.deserialize_keras_object(m)
                             for m in config["members"]]
        return cls(**config)


def _takes_seed(build_fn):
    try:
        return "seed" in inspect.signature(build_fn).parameters
    except (TypeError, ValueError):
        return False


def deep_ensemble(build_fn, num_models, *, output=DEFAULT_OUTPUT, seed=None):
    """A `DeepEnsemble` of ``num_models`` models from ``build_fn``, each seeded by name.

    Member ``i`` is ``build_fn()`` (or ``build_fn(seed=s_i)`` when it takes a ``seed``)
    built right after ``keras.utils.set_random_seed(s_i)``, ``s_i =
    seeds.int_seed(seed, "deep_ensemble", i)``: the same ``seed`` gives the same members,
    and different members get independent initial weights.

    Args:
      build_fn: a callable returning a new, built Keras model (give it an ``Input``).
      num_models: ``N``.
      seed: int or None (a fresh random base seed).
      output: what the members return (module docstring).
    Raises:
      ValueError: ``num_models < 1``; ``build_fn`` returning an unbuilt model.
    """
    num_models = check_positive_int("num_models", num_models)
    _check_output(output)
    if not callable(build_fn):
        raise TypeError(f"Expected a callable returning a model. Received: build_fn={build_fn!r}")
    if seed is None:
        seed = random.SystemRandom().randint(0, 2**31 - 1)
    members = []
    for i in range(num_models):
        member_seed = seeds.int_seed(seed, "deep_ensemble", i)
        keras.utils.set_random_seed(member_seed)
        member = build_fn(seed=member_seed) if _takes_seed(build_fn) else build_fn()
        if isinstance(member, keras.layers.Layer) and not member.built:
            raise ValueError("Expected build_fn to return a built model (start it with "
                             f"keras.Input). Received: an unbuilt {type(member).__name__}")
        members.append(member)
    return DeepEnsemble(members, output=output, seed=seeds.int_seed(seed, "deep_ensemble_mixture"))
