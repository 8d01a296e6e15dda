"""Where Keras 2 and Keras 3 differ, for the layers: the one module that branches on ``KERAS3``.

`bayes_planet._keras` chooses the Keras of the process; the layer code is written once against
the helpers here. How the KL reaches ``layer.losses`` differs most:

* Keras 2: the layer adds a *callable* loss (``add_loss(fn)``), recomputed each time
  ``layer.losses`` is read.
* Keras 3 has no callable losses (``add_loss`` keeps tensors of one call). It recomputes
  ``variable.regularizer(variable)`` for every *trainable* variable each time ``layer.losses`` is
  read (``Layer._get_regularization_losses``; ``fit`` adds ``model.losses``). So the KL of a
  whole posterior becomes the regularizer of its first variable (`PosteriorLoss`): one term per
  regularized weight, recomputed on every read, inside every ``GradientTape`` and train step, as
  on Keras 2. As for any Keras 3 weight regularizer, a posterior with no trainable variable
  (frozen, or a fixed one such as ``FixedNormal``, whose KL is a constant) adds no term.
"""

import contextlib
import functools
import inspect
import threading
import weakref

from bayes_planet._keras import KERAS3, keras, tf
from bayes_planet.layers._registry import register
from bayes_planet.layers.noise import multi_replica_context
from bayes_planet.layers.random_variable import RandomVariable

__all__ = [
    "ATTENTION_NEWER_PARAMETERS",
    "KERAS3",
    "KERNEL_REWRITE_PARAMETERS",
    "NO_AUTOCAST",
    "ONLY_FIRST_REPLICA",
    "SEED_COUNTER_KWARGS",
    "LayerState",
    "PosteriorLoss",
    "RandomVariableInputs",
    "RandomVariableOutputs",
    "RecurrentCell",
    "ReplicaLocalLosses",
    "add_seed_counter",
    "add_weight_arguments",
    "add_weight_loss",
    "build",
    "build_attention",
    "build_in_train_step",
    "build_sublayer",
    "channels_first",
    "conv_input_and_op",
    "increment",
    "is_variable",
    "kernel_replaced",
    "minimize",
    "name_scope",
    "random_variable_loss",
    "set_untracked",
    "shape_list",
    "submodules",
    "tf_variable",
    "tracked_loss",
    "twin_arguments",
    "twin_signature",
    "variable_name",
    "variables_writable",
    "weight_losses",
]

#: ``add_weight`` keyword arguments of a variable that is never autocast (mixed precision).
NO_AUTOCAST = {"autocast": False} if KERAS3 else {"experimental_autocast": False}

#: Keyword arguments of a layer's noise counter (`add_seed_counter`): an int64 scalar, not
#: trained, one copy per replica, each advanced by its own replica (synchronization ON_READ), the
#: first replica's value the one read and saved (aggregation ONLY_FIRST_REPLICA).
SEED_COUNTER_KWARGS = dict(
    name="seed_counter", shape=(), dtype="int64", initializer="zeros", trainable=False,
    **({"synchronization": "on_read", "aggregation": "only_first_replica"} if KERAS3 else {
        "synchronization": tf.VariableSynchronization.ON_READ,
        "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA}))

#: A name scope for the variables created inside it (Keras 3 names variables by its own scopes).
name_scope = keras.name_scope if KERAS3 else tf.name_scope


def add_weight_arguments(args, kwargs):
    """The arguments of a call ``Layer.add_weight(*args, **kwargs)``, all by keyword.

    Keras 2 takes ``(name, shape, dtype, initializer, ...)`` positionally, Keras 3
    ``(shape, initializer, dtype)``.
    """
    if KERAS3:
        names = ("shape", "initializer", "dtype")
    else:
        names = tuple(inspect.signature(keras.layers.Layer.add_weight).parameters)[1:]
    if len(args) > len(names):
        raise TypeError(f"add_weight() takes at most {len(names)} positional arguments. "
                        f"Received: {len(args)}")
    merged = dict(kwargs)
    for name, value in zip(names, args, strict=False):
        if name in merged:
            raise TypeError(f"add_weight() got multiple values for argument {name!r}")
        merged[name] = value
    return merged


class PosteriorLoss(keras.regularizers.Regularizer):
    """Keras 3: ``regularizer(posterior)`` as the regularizer of one of the posterior's
    variables, so that Keras adds the posterior's KL to ``layer.losses`` (module docstring).

    Not serialized: the layer's config carries its regularizer, which rebuilds this on load.
    """

    def __init__(self, name, regularizer, posterior):
        self.name, self.regularizer, self.posterior = name, regularizer, posterior

    def __call__(self, variable):
        del variable  # The KL is a function of the whole posterior.
        return _weight_loss(self.name, self.regularizer, self.posterior)

    def get_config(self):
        raise NotImplementedError(
            "PosteriorLoss is not serializable: the layer's config carries its regularizer.")


def _weight_loss(name, regularizer, posterior):
    with tf.name_scope(f"{name}_regularizer"):
        return regularizer(posterior)


def add_weight_loss(layer, name, regularizer, posterior):
    """Makes ``regularizer(posterior)`` (the weight ``name``'s KL) a loss of ``layer``.

    A regularizer with variables of its own (a ``build_from(posterior)`` method, e.g.
    `regularizers.TrainableNormalKLDivergenceStdDev`) creates them now, with the layer's
    weights, not at the first loss computation inside a traced step.
    """
    build_from = getattr(regularizer, "build_from", None)
    if build_from is not None:
        build_from(posterior)
    if not KERAS3:
        layer.add_loss(functools.partial(_weight_loss, name, regularizer, posterior))
        return
    variables = posterior.weights
    if variables:  # else a constant KL: no term (module docstring).
        variables[0].regularizer = PosteriorLoss(name, regularizer, posterior)


def weight_losses(module):
    """The losses of the distribution weights in ``module`` (the KL terms), computed now."""
    layers = [module] + submodules(module)
    if not KERAS3:
        return [fn() for layer in layers for fn in getattr(layer, "_callable_losses", ())]
    variables = {id(v): v for layer in layers for v in getattr(layer, "weights", ())}
    return [v.regularizer(v) for v in variables.values() if isinstance(v.regularizer, PosteriorLoss)]


def increment(variable):
    """``variable += 1`` as one read-modify-write; returns the new value."""
    if KERAS3:
        value = variable.value  # the backing tf.Variable (a tensor in a Keras stateless scope)
        if not isinstance(value, tf.Variable):
            return variable.assign_add(1)
        variable = value
    return variable.assign_add(1, read_value=True)


def submodules(module):
    """The layers (or `tf.Module`s) inside ``module``, itself excluded."""
    if KERAS3 and isinstance(module, keras.layers.Layer):
        return module._flatten_layers(include_self=False)  # noqa: SLF001 - Keras 3's only walk
    return list(getattr(module, "submodules", ()))


def tf_variable(variable):
    """The `tf.Variable` of a layer variable (under a strategy, its distributed variable, whose
    per-replica values ``strategy.experimental_local_results`` reads): Keras 3 wraps one in
    its ``value``; a Keras 2 layer variable is one."""
    return variable.value if KERAS3 else variable


def variable_name(variable):
    """A variable's name inside its model: Keras 3's ``path``, Keras 2's ``name`` (no ``:0``)."""
    return variable.path if KERAS3 else variable.name.split(":")[0]


def conv_input_and_op(layer, x):
    """``(x, op)`` for a Keras convolution ``layer``: ``x`` causally padded if the layer is
    causal, and ``op(x, kernel)`` the layer's convolution of the (padded) input."""
    if not KERAS3:
        if layer._is_causal:  # noqa: SLF001 - Keras 2's convolution attributes
            x = tf.pad(x, layer._compute_causal_padding(x))  # noqa: SLF001
        return x, layer.convolution_op
    if layer.padding != "causal":
        return x, layer.convolution_op
    x = tf.pad(x, layer._compute_causal_padding())  # noqa: SLF001 - Keras 3's Conv1D

    def op(inputs, kernel):
        return keras.ops.conv(inputs, kernel, strides=list(layer.strides), padding="valid",
                              dilation_rate=layer.dilation_rate, data_format=layer.data_format)

    return x, op


def channels_first(layer):
    """Whether a Keras convolution ``layer`` takes channels on axis 1."""
    return layer.data_format == "channels_first"


class LayerState:
    """Base of `base.BayesianLayer`: how a layer with posterior weights saves its variables.

    Keras 3's ``Dense``/``Conv`` save their ``kernel`` and ``bias`` by name; a posterior weight
    is a sublayer that saves its own variables (the object walk of ``.keras``/``.weights.h5``),
    so the layer saves only its own variables, as every Keras 3 layer does by default. Keras 2
    saves by its own walk: nothing to change.

    A posterior is reachable by two names (``kernel`` and ``kernel_initializer``: it is both),
    and the walk saves it under the first name it visits: Keras 2 visits ``dir(layer)`` in
    reverse order, Keras 3 in order. So that a ``.weights.h5`` file has the same layout on both
    (weights move between the stacks, ``tests/install/test_packaging.py``), on Keras 3 ``dir``
    leaves out every public name of such a sublayer but the one Keras 2 visits first (the
    largest); the attributes themselves are unchanged.
    """

    if KERAS3:
        def save_own_variables(self, store):
            keras.layers.Layer.save_own_variables(self, store)

        def load_own_variables(self, store):
            keras.layers.Layer.load_own_variables(self, store)

        def __dir__(self):
            names = super().__dir__()
            attributes = vars(self)
            by_object = {}  # id(sublayer) -> its public names
            for name in names:
                if name.startswith("_"):
                    continue
                # An instance attribute, or a property over one (Keras 3's Dense.kernel: _kernel).
                value = attributes.get(name, attributes.get(f"_{name}"))
                if isinstance(value, keras.layers.Layer):
                    by_object.setdefault(id(value), []).append(name)
            hidden = {name for aliases in by_object.values() if len(aliases) > 1
                      for name in aliases if name != max(aliases)}
            return [name for name in names if name not in hidden]


def build(layer, input_shape):
    """Builds ``layer`` for ``input_shape`` now, as its first call would."""
    if KERAS3:
        layer.build(input_shape)  # Keras 3 builds sublayers so (e.g. `keras.layers.RNN`)
    else:
        layer._maybe_build(input_shape)  # noqa: SLF001 - Keras 2's build of a first call


class RecurrentCell:
    """Base of a Keras recurrent cell that holds something per sequence (placed before the
    Keras cell class, a ``DropoutRNNCell``): `keras.layers.RNN` calls its ``_begin_sequence``
    before every sequence, and its steps read their dropout masks from `step_dropout_masks`.

    Keras 2's ``RNN.call`` calls ``cell.reset_dropout_mask()`` before each sequence (after
    ``get_initial_state``); Keras 3's calls ``cell.get_dropout_mask(first step's input)``
    there instead (and resets the masks after the sequence), with or without an
    ``initial_state``. `zero_state` is the Keras cell's ``get_initial_state`` with Keras 2's
    arguments on either Keras.
    """

    def _begin_sequence(self):
        """Called when `keras.layers.RNN` starts a sequence (subclasses' hook)."""

    if KERAS3:
        def get_dropout_mask(self, step_input):
            self._begin_sequence()
            return super().get_dropout_mask(step_input)
    else:
        def reset_dropout_mask(self):
            super().reset_dropout_mask()
            self._begin_sequence()

    def step_dropout_masks(self, inputs, state, training):
        """``(input mask, recurrent mask)`` of one step of the fused (``implementation=2``)
        computation; None where there is no dropout (or not ``training``). Starts nothing."""
        if not KERAS3:
            return (self.get_dropout_mask_for_cell(inputs, training, count=1),
                    self.get_recurrent_dropout_mask_for_cell(state, training, count=1))
        if not training:
            return None, None
        masks = (super().get_dropout_mask(inputs) if self.dropout > 0 else None,
                 super().get_recurrent_dropout_mask(state) if self.recurrent_dropout > 0
                 else None)
        # With recurrent dropout Keras 3's cells make one mask per gate (their unfused step).
        return tuple(m[0] if isinstance(m, list | tuple) else m for m in masks)

    def zero_state(self, inputs=None, batch_size=None, dtype=None):
        """The Keras cell's zero state for ``inputs`` ``[batch, ...]`` or ``batch_size``, in
        ``dtype`` (default: the inputs' dtype, else the cell's compute dtype), with the state
        structure of the Keras cell."""
        if not KERAS3:
            return super().get_initial_state(inputs=inputs, batch_size=batch_size, dtype=dtype)
        if batch_size is None:
            batch_size = tf.shape(inputs)[0]
        if dtype is None and inputs is not None:
            dtype = inputs.dtype
        state = super().get_initial_state(batch_size=batch_size)
        return state if dtype is None else tf.nest.map_structure(
            lambda s: tf.cast(s, dtype), state)


def _symbolic_value(output):
    """A `RandomVariable` output's symbolic stand-in: the KerasTensor of its value."""
    if isinstance(output, RandomVariable):
        return keras.KerasTensor(tuple(output.shape.as_list()), dtype=output.dtype.name)
    return output


class RandomVariableOutputs:
    """Base of a layer whose ``call`` returns `RandomVariable`s (placed before the Keras class).

    Keras 3 traces ``call`` on symbolic inputs (a functional model's construction) and needs
    tensors back; the symbolic output is then the KerasTensor of the random variable's value
    (Keras 2 converts it itself, through the registered tensor conversion). Run on data, the
    layer (and a model ending in it) returns the `RandomVariable`.
    """

    if KERAS3:
        def compute_output_spec(self, *args, **kwargs):
            return tf.nest.map_structure(_symbolic_value,
                                         super().compute_output_spec(*args, **kwargs))


class RandomVariableInputs:
    """Base of a layer that reads its input's distribution when the input is a `RandomVariable`
    (`DenseDVI`, `Discretize`; placed before the Keras class).

    Keras 2 passes a random variable to ``call`` as it is. Keras 3 converts a layer's array-like
    inputs to tensors (a random variable to its value), refuses other positional inputs, and
    builds a layer from its tensor inputs' shapes only; here a `RandomVariable` input reaches
    ``call`` unconverted and builds the layer from its shape, and any other input is converted
    to a tensor as Keras would.
    """

    if KERAS3:
        def __call__(self, inputs, *args, **kwargs):
            self._convert_input_args = False  # noqa: SLF001 - Keras 3's switches for this
            self._allow_non_tensor_positional_args = True  # noqa: SLF001
            if isinstance(inputs, RandomVariable):
                if not self.built:
                    self.build(tuple(inputs.shape.as_list()))
            elif not (tf.is_tensor(inputs) or isinstance(inputs, keras.KerasTensor)):
                inputs = tf.convert_to_tensor(inputs)
            return super().__call__(inputs, *args, **kwargs)


_RANDOM_VARIABLE_LOSSES = {}


def random_variable_loss(fn):
    """``fn(y_true, y_pred)``, a loss of a model that returns a `RandomVariable`, for ``compile``.

    Keras 2 hands a loss function the model's output as it is: ``fn`` itself. Keras 3 converts
    predictions to tensors before a loss sees them, so there ``fn`` is wrapped in a
    `RandomVariableLoss` that hands it the random variable (one instance per ``fn``: a compiled
    model saved and loaded gets the same object back). ``fn`` must be registered
    (``keras.saving.register_keras_serializable``) for the compiled model to load.
    """
    if not KERAS3:
        return fn
    if fn not in _RANDOM_VARIABLE_LOSSES:
        _RANDOM_VARIABLE_LOSSES[fn] = RandomVariableLoss(fn)
    return _RANDOM_VARIABLE_LOSSES[fn]


if KERAS3:
    def _match_target_rank(y_true, y_pred):
        """``y_true`` given the rank of the prediction's value ``y_pred`` as Keras matches a
        target with a prediction for its own losses: a last axis of size 1 added to a target one
        rank short, or removed from one a rank too long (the prediction, a distribution, keeps
        its shape). Without it ``log_prob`` of ``(B,)`` targets under a ``(B, 1)`` prediction
        broadcasts to ``[B, B]``."""
        true_rank, pred_rank = len(y_true.shape), len(y_pred.shape)
        if true_rank == pred_rank - 1 and y_pred.shape[-1] == 1:
            return keras.ops.expand_dims(y_true, -1)
        if true_rank == pred_rank + 1 and y_true.shape[-1] == 1:
            return keras.ops.squeeze(y_true, -1)
        return y_true

    @register
    class RandomVariableLoss(keras.losses.Loss):
        """Keras 3: the loss ``fn(y_true, y_pred)`` with ``y_pred`` the model's `RandomVariable`
        (see `random_variable_loss`); reduction and sample weights as any Keras loss."""

        def __init__(self, fn, **kwargs):
            if isinstance(fn, dict | str):
                fn = keras.saving.deserialize_keras_object(fn)
            kwargs.setdefault("name", fn.__name__)
            super().__init__(**kwargs)
            self.fn = fn
            self._prediction = None

        def __call__(self, y_true, y_pred, sample_weight=None):
            # Keras converts y_pred to a tensor (the value) and calls `call`; `call` reads the
            # random variable kept here.
            self._prediction = y_pred
            try:
                return super().__call__(y_true, y_pred, sample_weight)
            finally:
                self._prediction = None

        def call(self, y_true, y_pred):
            y_true = _match_target_rank(y_true, y_pred)
            return self.fn(y_true, y_pred if self._prediction is None else self._prediction)

        def get_config(self):
            return {**super().get_config(), "fn": keras.saving.serialize_keras_object(self.fn)}

        @classmethod
        def from_config(cls, config):
            config = dict(config)
            fn = keras.saving.deserialize_keras_object(config.pop("fn"))
            shared = _RANDOM_VARIABLE_LOSSES.get(fn)
            if shared is not None and shared.get_config() == {
                    **config, "fn": keras.saving.serialize_keras_object(fn)}:
                return shared
            return cls(fn, **config)


# GP / SNGP (k3-gp) ---------------------------------------------------------------------------

#: ``add_weight`` keyword arguments of a state variable that the replicas keep equal (their
#: updates are all-reduced): the first replica's value is the one read and saved.
ONLY_FIRST_REPLICA = {"aggregation": "only_first_replica" if KERAS3
                      else tf.VariableAggregation.ONLY_FIRST_REPLICA}


def is_variable(value):
    """Whether ``value`` is a layer variable: a ``keras.Variable`` on Keras 3 (which wraps a
    `tf.Variable`), a `tf.Variable` on Keras 2."""
    return isinstance(value, keras.Variable if KERAS3 else tf.Variable)


@contextlib.contextmanager
def kernel_replaced(layer, kernel):
    """Within the block, the Keras layer ``layer`` computes with the tensor ``kernel`` in place
    of its kernel variable, which stays as it is (and tracked by the layer).

    Keras 3's ``Dense``/``EinsumDense``/convolutions read the variable ``_kernel`` through a
    ``kernel`` property; Keras 2's layers read the attribute ``kernel``. The attribute is set
    without Keras' attribute tracking (a temporary tensor, never a weight).
    """
    name = "_kernel" if isinstance(getattr(type(layer), "kernel", None), property) else "kernel"
    variable = getattr(layer, name)
    object.__setattr__(layer, name, kernel)
    try:
        yield
    finally:
        object.__setattr__(layer, name, variable)


def shape_list(shape):
    """A layer's ``compute_output_shape`` result (a `tf.TensorShape` on Keras 2, a tuple on
    Keras 3) as a list."""
    return tf.TensorShape(shape).as_list()


# attention (k3-attn) ------------------------------------------------------------------------
# Keras 2's and Keras 3's ``EinsumDense`` and ``MultiHeadAttention`` take different parameter
# lists (Keras 3's EinsumDense: no activity_regularizer before kernel_constraint, then LoRA and
# quantization arguments; its MultiHeadAttention: sliding_window and flash_attention before
# kernel_initializer, use_gate and seed after bias_constraint), and build differently (Keras
# 2's attention in ``_build_from_signature``, Keras 3's in ``build(query_shape, value_shape,
# key_shape)``). A Bayesian attention layer takes its twin's parameters on each stack
# (`twin_arguments`) and is built by `build_attention`.

#: ``(name, default)`` of parameters that a newer release of this Keras generation appends to
#: ``MultiHeadAttention``'s: tf-keras >= 2.16's softmax_robust_masking (after bias_constraint).
#: Keras 3 has no such parameter: there a Bayesian attention layer takes it by keyword only.
ATTENTION_NEWER_PARAMETERS = () if KERAS3 else (("softmax_robust_masking", False),)

#: Parameters of Keras 3's ``EinsumDense`` that rewrite its point-estimate kernel (LoRA,
#: quantization): a Bayesian projection takes them in their place and only at their default.
KERNEL_REWRITE_PARAMETERS = ("lora_rank", "lora_alpha", "gptq_unpacked_column_size",
                             "quantization_config")


def twin_signature(twin, defaults=None, newer=(), keyword_only=()):
    """The signature of the ``__init__`` of a layer extending the Keras layer ``twin``: the
    twin's own parameters on this Keras (same names, order and kinds; ``defaults`` replaces
    some defaults), then the ``(name, default)`` pairs of ``newer`` the twin lacks here (by
    position, where a newer Keras puts them), then those of ``keyword_only`` that neither
    holds (keyword-only), then ``**kwargs``."""
    defaults = dict(defaults or {})
    params = list(inspect.signature(twin.__init__).parameters.values())
    *own, var_keyword = params
    if var_keyword.kind is not inspect.Parameter.VAR_KEYWORD:
        raise TypeError(f"Expected a Keras layer whose __init__ ends in **kwargs. "
                        f"Received: twin={twin.__name__}")
    unknown = set(defaults) - {p.name for p in own}
    if unknown:
        raise TypeError(f"{twin.__name__} takes no parameter {sorted(unknown)}")
    own = [p.replace(default=defaults[p.name]) if p.name in defaults else p for p in own]
    names = {p.name for p in own}
    for name, default in newer:
        if name not in names:
            names.add(name)
            own.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                         default=default))
    for name, default in keyword_only:
        if name not in names:
            names.add(name)
            own.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    return inspect.Signature([*own, var_keyword])


def twin_arguments(twin, defaults=None, newer=(), keyword_only=(), only_default=()):
    """Decorator of an ``__init__(self, **arguments)`` that takes the parameters of
    `twin_signature` (its signature, as ``inspect`` and Keras read it): a call binds them
    as the twin's own ``__init__`` would on this Keras and passes all of them by name (the
    entries of ``**kwargs`` among them). A parameter named in ``only_default`` (the twin's
    LoRA and quantization arguments, which rewrite a point-estimate kernel) that the twin
    takes here must keep the twin's default: else a one-line ValueError naming it."""
    signature = twin_signature(twin, defaults, newer, keyword_only)
    twin_defaults = {p.name: p.default
                     for p in inspect.signature(twin.__init__).parameters.values()}

    def decorate(init):
        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            del arguments[next(iter(signature.parameters))]  # self
            arguments.update(arguments.pop(var_keyword))
            for name in only_default:
                if name in twin_defaults and arguments.get(name) != twin_defaults[name]:
                    raise ValueError(
                        f"Expected {name}={twin_defaults[name]!r} (Keras' LoRA and quantization "
                        f"do not apply to this layer's kernel). Received: "
                        f"{name}={arguments[name]!r}")
            init(self, **arguments)

        var_keyword = list(signature.parameters)[-1]
        __init__.__signature__ = signature
        return __init__

    return decorate


@tf.__internal__.tracking.no_automatic_dependency_tracking
def _set_untracked_keras2(layer, name, value):
    setattr(layer, name, value)


def set_untracked(layer, name, value):
    """``layer.<name> = value`` for plain Python data (e.g. a config dict) that Keras must not
    track: Keras 2 would wrap it for checkpointing, Keras 3 wraps a dict in a ``TrackedDict``
    that refers back to the layer's tracker (so a deep copy of it copies the layer)."""
    if KERAS3:
        object.__setattr__(layer, name, value)
    else:
        _set_untracked_keras2(layer, name, value)


def build_attention(layer, query_shape, value_shape, key_shape=None):
    """Builds the ``keras.layers.MultiHeadAttention`` ``layer`` (its projections included)
    for inputs of these shapes now, as its first call would; nothing if it is built (e.g. by
    its ``from_config``, which Keras 2 builds from the shapes in its config)."""
    if KERAS3:
        if not layer.built:
            layer.build(tuple(query_shape), tuple(value_shape),
                        None if key_shape is None else tuple(key_shape))
    elif not getattr(layer, "_built_from_signature", False):
        layer._build_from_signature(query_shape, value_shape, key_shape)  # noqa: SLF001


def build_sublayer(layer, input_shape):
    """Builds ``layer``, a sublayer created in its parent's ``build``, for ``input_shape``
    with variables named under its own name (unique names, as HDF5 saving needs): Keras 3's
    ``build`` opens the layer's name scope itself, Keras 2's does not. Nothing if it is built."""
    if layer.built:
        return
    if KERAS3:
        layer.build(input_shape)
    else:
        with tf.name_scope(layer.name):
            layer.build(input_shape)


# flows / ensembles (k3-flows)

def is_graph_model(model):
    """Whether ``model`` is a Sequential or functional model (a layer graph
    ``keras.models.clone_model`` can rebuild), not a subclassed one."""
    if isinstance(model, keras.Sequential):
        return True
    if not KERAS3:
        return bool(getattr(model, "_is_graph_network", False))
    from keras.src.models.functional import Functional  # no public API

    return isinstance(model, Functional)


def variables_writable():
    """Whether an assignment to a layer variable takes effect now: False while Keras 3 traces a
    call symbolically (``compute_output_spec`` of a functional model's construction) or runs it
    statelessly, where assignments are only recorded (a data-dependent initialization waits
    for a real batch). Always True on Keras 2."""
    if not KERAS3:
        return True
    from keras.src.backend.common.stateless_scope import in_stateless_scope  # no public API

    return not in_stateless_scope()


def tracked_loss(model, y, y_pred, sample_weight, regularization_losses=()):
    """The loss ``model`` was compiled with, of ``y_pred`` against ``y``, plus the sum of
    ``regularization_losses``, for a custom ``train_step``; also counted in the model's ``loss``
    metric (weighted by the batch size), so that a step summing several such losses reports
    their mean. Keras 2's ``compiled_loss`` does exactly this; Keras 3's ``compute_loss`` always
    adds all of ``model.losses`` and counts nothing (its ``train_step`` counts the loss)."""
    if not KERAS3:
        return model.compiled_loss(y, y_pred, sample_weight,
                                   regularization_losses=list(regularization_losses))
    loss = model._compile_loss(y, y_pred, sample_weight)  # noqa: SLF001 - Keras 3's compiled loss
    loss = tf.add_n([loss] + [tf.cast(r, loss.dtype) for r in regularization_losses])
    rows = tf.nest.flatten(y if y is not None else y_pred)[0]
    model._loss_tracker.update_state(  # noqa: SLF001 - Keras 3's `loss` metric
        loss, sample_weight=tf.shape(tf.convert_to_tensor(rows))[0])
    return loss


def minimize(model, loss, tape):
    """One step of ``model.optimizer`` on ``loss``, recorded by ``tape`` (still open to
    recording), over ``model.trainable_variables``; with a loss-scale optimizer (mixed
    precision) the loss is scaled and the gradients unscaled, as each Keras does in ``fit``."""
    if not KERAS3:
        model.optimizer.minimize(loss, model.trainable_variables, tape=tape)
        return
    with tape:
        loss = model.optimizer.scale_loss(loss)
    variables = model.trainable_variables
    model.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))


def build_in_train_step(model, x):
    """Builds ``model`` for the inputs ``x`` of a custom ``train_step`` that does not call the
    model itself. Keras 3 saves a model's build shape only once it is built, and a loaded
    model that is not built gets back neither its build nor its optimizer's variables;
    Keras 2 saves the model's variables in either case: nothing to do."""
    if KERAS3 and not model.built:
        model.build(tf.nest.map_structure(lambda t: tuple(t.shape), x))


# distribute (k3-dist) -------------------------------------------------------------------------

def add_seed_counter(layer, add_weight):
    """``layer``'s noise counter, a variable with `SEED_COUNTER_KWARGS`; ``add_weight`` is the
    layer's Keras ``add_weight``. Assign it to an attribute of ``layer``.

    ON_READ is what keeps a replica step free of cross-replica traffic: every replica advances
    its own copy, in lockstep. A counter that synchronized on write (Keras 3's default for
    ``aggregation="only_first_replica"``, a ``MirroredVariable``) would make each draw a
    ``merge_call``: a barrier per layer call, and an error inside a ``tf.while_loop`` or
    ``tf.cond`` branch. Keras 2's ``add_weight`` takes ``synchronization``; Keras 3's does not,
    so there the ``keras.Variable`` is made here, in the layer's name scope, and Keras tracks it
    through the attribute that holds it.
    """
    if not KERAS3:
        return add_weight(**SEED_COUNTER_KWARGS)
    with keras.name_scope(layer.name, caller=layer):
        return keras.Variable(**SEED_COUNTER_KWARGS)


#: Keras 3: per thread (one per replica under ``MirroredStrategy``), layer -> the losses it added.
_REPLICA_LOSSES = threading.local()


def _replica_losses(layer):
    table = getattr(_REPLICA_LOSSES, "table", None)
    if table is None:
        table = _REPLICA_LOSSES.table = weakref.WeakKeyDictionary()
    return table.setdefault(layer, [])


class ReplicaLocalLosses:
    """Mixin for a layer that calls ``add_loss`` in its ``call``: under a multi-replica strategy
    each replica reads back its own losses.

    Keras 3 keeps a layer's ``add_loss`` tensors in one list, shared by the threads in which
    ``MirroredStrategy`` runs its replicas, and each replica's outer call clears it. The threads
    take turns at every collective (``all_reduce``, ``all_gather``: a ``merge_call``), so a
    collective between a replica's call and its read of ``model.losses`` lets the other replica
    clear the list or append its own loss: the replica then reads the other's loss, or both (seen
    with ``VectorQuantizer(ema=True)``, whose EMA statistics are all-reduced). In a replica context
    this mixin keeps the losses per thread instead; elsewhere (one device, a Keras stateless
    scope) it is Keras' own bookkeeping. Keras 2 keeps a replica's losses apart by itself.
    """

    if KERAS3:
        def add_loss(self, loss):
            # Not in a Keras stateless scope, whose losses are already kept per thread.
            if multi_replica_context() is not None and variables_writable():
                _replica_losses(self).extend(tf.nest.flatten(loss))
            else:
                super().add_loss(loss)

        def _get_own_losses(self):  # Keras 3's per-layer read, by `losses` of every outer layer
            losses = super()._get_own_losses()  # noqa: SLF001 - the method this mixin extends
            if variables_writable():
                losses += _replica_losses(self)
            return losses

        def _clear_losses(self):  # Keras 3: at the start of an outer call
            super()._clear_losses()  # noqa: SLF001 - the method this mixin extends
            _replica_losses(self).clear()
