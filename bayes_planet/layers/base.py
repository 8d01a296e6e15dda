"""Shared machinery of Bayesian layers: distribution weights and seeded noise.

`BayesianLayer` is a mixin placed before a Keras layer class. It changes one thing
in the Keras layer: when ``add_weight`` receives a `DistributionInitializer`, the
"weight" becomes that initializer (a distribution over the weight, a sublayer that
holds the variational parameters) and the regularizer becomes a loss on it, recomputed
each time ``layer.losses`` is read (safe across any number of ``GradientTape``s, and
added by ``model.fit``): a callable loss on Keras 2, the regularizer of the posterior's
variables on Keras 3 (`_compat` says how).

Noise is stateless and seeded: each call draws from ``[seed, counter]`` and bumps
a per-layer int64 counter variable, so runs are reproducible with ``seed=``, the
noise state is checkpointed with the model, and everything compiles under XLA.
"""

import contextlib
import random
import warnings

import tensorflow as tf

from bayes_planet._deprecation import moved_attributes
from bayes_planet._keras import keras
from bayes_planet.layers import _compat
from bayes_planet.layers.checks import check_positive_int
from bayes_planet.layers.initializers import DistributionInitializer

__all__ = [
    "BayesianLayer",
    "bayesian_layers",
    "check_dense_extras",
    "check_positive_int",
    "fixed_noise",
    "moments",
    "posterior_mean",
    "sample_weight",
]

#: Moved to `bayes_planet.layers.noise`: the old names warn (for one release).
__getattr__ = moved_attributes(__name__, "bayes_planet.layers.noise", (
    "multi_replica_context", "per_example", "per_example_sample", "split_seed", "standard_normal"))




def check_dense_extras(lora_rank=None, lora_alpha=None, quantization_config=None):
    """Checks the arguments that Keras 3's ``Dense`` takes after ``bias_constraint``.

    A Bayesian dense layer takes them in the same positions (so every positional call of
    the twin binds the same names, on either Keras) and supports only their default, None:
    Keras' LoRA and quantization rewrite a point-estimate kernel, which these layers do not
    compute with. Raises ValueError naming the first one set.
    """
    for name, value in (("lora_rank", lora_rank), ("lora_alpha", lora_alpha),
                        ("quantization_config", quantization_config)):
        if value is not None:
            raise ValueError(f"Expected {name}=None (Keras' LoRA and quantization do not apply "
                             f"to this layer's kernel). Received: {name}={value!r}")


def _posterior(weight):
    """The posterior behind a layer weight, or None for a plain tensor or a posterior
    acting as its mean (inside `posterior_mean`)."""
    if isinstance(weight, DistributionInitializer) and not getattr(
            weight, "_use_posterior_mean", False):
        return weight
    return None


def moments(weight, dtype):
    """(loc, scale) of a layer weight cast to ``dtype``; scale is None if deterministic.

    A plain tensor, or a posterior inside `posterior_mean`, is its own mean (scale
    None); otherwise the posterior's ``moments`` (`initializers.DistributionInitializer`;
    raises `initializers.MomentsUnavailableError` for a posterior without them).
    """
    posterior = _posterior(weight)
    if posterior is not None:
        return posterior.moments(dtype)
    return tf.cast(weight.loc() if isinstance(weight, DistributionInitializer) else weight,
                   dtype), None


def sample_weight(weight, seed, dtype, num_samples=1):
    """One draw of a layer weight in ``dtype`` (its mean if deterministic): the posterior's
    ``sample``, one draw of the weight's shape or ``num_samples`` on a leading axis.
    """
    posterior = _posterior(weight)
    if posterior is not None:
        return posterior.sample(seed, dtype, num_samples)
    return moments(weight, dtype)[0]


class BayesianLayer(_compat.LayerState):
    """Mixin giving a Keras layer distribution-valued weights and seeded noise.

    Subclasses call ``self._init_seed(seed)`` in ``__init__`` and ``self._next_seed()``
    once per ``call`` to get a fresh stateless ``[2]`` seed.
    """

    def _init_seed(self, seed):
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"Expected a non-negative integer or None. Received: seed={seed!r}")
        self.seed = seed
        self._base_seed = seed if seed is not None else random.SystemRandom().randint(0, 2**31 - 1)
        self._seed_counter = None

    def add_weight(self, *args, **kwargs):
        arguments = _compat.add_weight_arguments(args, kwargs)
        initializer = arguments.get("initializer")
        if not isinstance(initializer, DistributionInitializer):
            weight = super().add_weight(*args, **kwargs)
            build_from = getattr(arguments.get("regularizer"), "build_from", None)
            if build_from is not None:  # A regularizer's own variables, made with the weight.
                build_from(weight)
            return weight
        name = arguments.get("name")
        if initializer.built:
            raise ValueError(
                f"The distribution initializer for `{name}` is already built (shared between "
                "weights?). Pass a fresh instance or a string alias to each layer."
            )
        var_dtype = tf.as_dtype(arguments.get("dtype") or self.dtype)
        with _compat.name_scope(name):
            initializer.build(arguments.get("shape"),
                              var_dtype if var_dtype.is_floating else tf.float32)
        if arguments.get("trainable") is False:
            initializer.trainable = False
        regularizer = arguments.get("regularizer")
        if regularizer is not None:
            _compat.add_weight_loss(self, name, regularizer, initializer)
        return initializer

    def _ensure_seed_counter(self):
        if self._seed_counter is None:
            with tf.init_scope():
                self._seed_counter = _compat.add_seed_counter(self, super().add_weight)

    def build(self, input_shape):
        super().build(input_shape)
        self._ensure_seed_counter()

    def _next_seed(self):
        """A fresh stateless seed ``[base_seed, counter]``; bumps the counter.

        Inside `fixed_noise`, returns the block's seed instead (same noise each call).
        """
        fixed = getattr(self, "_fixed_seed", None)
        if fixed is not None:
            return fixed
        self._ensure_seed_counter()
        count = _compat.increment(self._seed_counter)
        count = tf.cast(count % (2**31 - 1), tf.int32)  # int32 seeds, as tfp expects.
        return tf.stack([tf.constant(self._base_seed, tf.int32), count])

    def get_config(self):
        with warnings.catch_warnings():
            # Keras warns when serializing initializers that are not `Initializer`s;
            # ours are serializable layers, re-serialized below.
            warnings.simplefilter("ignore", UserWarning)
            config = super().get_config()
        for key, value in vars(self).items():
            if isinstance(value, DistributionInitializer) and key in config:
                config[key] = keras.saving.serialize_keras_object(value)
        config["seed"] = self.seed
        return config


def bayesian_layers(module):
    """All `BayesianLayer`s in a layer/model/module (itself included), in a stable order."""
    candidates = [module] + _compat.submodules(module)
    seen, found = set(), []
    for layer in candidates:
        if isinstance(layer, BayesianLayer) and id(layer) not in seen:
            seen.add(id(layer))
            found.append(layer)
    return found


def _stateless_seed(seed):
    """``seed`` as an int32 ``[2]`` tensor; a one-line error for anything else."""
    try:
        tensor = tf.convert_to_tensor(seed)
    except (TypeError, ValueError):
        tensor = None
    if (tensor is None or not tensor.dtype.is_integer or tensor.shape.rank not in (None, 1)
            or tensor.shape.rank == 1 and tensor.shape[0] not in (None, 2)):
        raise ValueError("Expected a stateless seed: two integers, shape [2]. "
                         f"Received: seed={seed!r}")
    return tf.cast(tensor, tf.int32)


@contextlib.contextmanager
def fixed_noise(module, seed):
    """Makes every Bayesian layer in ``module`` reuse one noise draw within the block.

    Each layer gets its own seed (``seed`` folded with the layer's index) and
    returns it from every ``_next_seed()`` call in the block, so repeated calls
    reuse the same noise: for Reparameterization layers that is *one weight sample
    held fixed* (e.g. over all time steps of a sequence, or one model sample for
    a planner's rollout); for Flipout the same perturbation and, at equal batch
    shape, the same per-example signs; for local reparameterization the same
    standard-normal draws (not a fixed weight sample). Works under `tf.function`
    (the seed may be a tensor) and XLA.

    Blocks nest: on exit each layer gets back the seed of the enclosing block (or
    fresh noise outside any block).

    Args:
      module: a layer, model or `tf.Module` containing Bayesian layers.
      seed: a stateless seed, shape ``[2]`` int32 (tensor or list).
    Raises:
      ValueError: a seed that is not two integers.
    """
    seed = _stateless_seed(seed)
    layers = bayesian_layers(module)
    previous = [getattr(layer, "_fixed_seed", None) for layer in layers]
    for index, layer in enumerate(layers):
        object.__setattr__(layer, "_fixed_seed",
                           tf.random.experimental.stateless_fold_in(seed, index))
    try:
        yield layers
    finally:  # Restore the enclosing block's seeds (None outside any block).
        for layer, value in zip(layers, previous, strict=True):
            object.__setattr__(layer, "_fixed_seed", value)


@contextlib.contextmanager
def posterior_mean(module):
    """Makes every Bayesian layer in ``module`` use its weights' means within the block.

    Every distribution weight (``kernel``, ``bias``, recurrent kernels, ...) acts as a
    point mass at its mean, so each estimator computes ``op(x, loc)`` exactly: the
    network of posterior means, deterministic and noise-free. Variational dropout's
    inference-time pruning needs the variance and is off in the block; DenseDVI still
    propagates its inputs' variance. Losses (the KL terms) are unchanged. Like
    `fixed_noise`, it is read when a call is traced: a ``tf.function`` traced inside
    the block keeps the mean weights, so trace separate functions for both modes.

    Args:
      module: a layer, model or `tf.Module` containing Bayesian layers.

    Yields:
      The affected distribution weights (``DistributionInitializer`` layers).

    Warns (``UserWarning``) when ``module`` has no distribution weight — e.g. a
    SavedModel loaded without ``bayes_planet``, whose layers are plain Keras layers —
    since the block then changes nothing.
    """
    candidates = [module] + _compat.submodules(module)
    weights = list({id(w): w for w in candidates
                    if isinstance(w, DistributionInitializer)}.values())
    if not weights:
        warnings.warn(
            f"posterior_mean: {getattr(module, 'name', type(module).__name__)!r} has no "
            "Bayesian (distribution-valued) weights, so the block changes nothing. Was it "
            "loaded without bayes_planet (custom_objects), or is it deterministic?",
            UserWarning, stacklevel=3)
    previous = [getattr(w, "_use_posterior_mean", False) for w in weights]
    for weight in weights:
        object.__setattr__(weight, "_use_posterior_mean", True)
    try:
        yield weights
    finally:
        for weight, value in zip(weights, previous, strict=True):
            object.__setattr__(weight, "_use_posterior_mean", value)
