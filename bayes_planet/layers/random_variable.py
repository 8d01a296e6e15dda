"""`RandomVariable`: a distribution paired with a (lazily drawn) sample.

A random variable behaves like the Tensor of its value, so layers that return one
compose with every TensorFlow op and Keras layer (Tran et al., 2018, "Simple,
Distributed, and Accelerated Probabilistic Programming"; Bayesian Layers, Sec. 2).

Keras integration (why no Keras internals are needed here): a RandomVariable is
converted to its value by the registered tensor conversion function. When a layer
returning one is called on a symbolic ``keras.Input``, Keras infers the output
spec with ``tf.type_spec_from_value``, which falls back to that conversion, so the
symbolic output is a plain ``KerasTensor`` of the value's shape and dtype. When
the functional or Sequential model is then *run*, Keras passes each layer's
actual outputs to the next layer unchanged, so the model returns the
RandomVariable itself: ``model(x).distribution.log_prob(y)`` works, and so does
``model.compile(loss=bl.negative_log_likelihood)`` followed by ``model.fit`` on both
Keras stacks. (A lambda loss reading ``rv.distribution`` works on Keras 2 only, whose loss
container reads only ``.shape``/``.dtype`` of the prediction before handing it to the loss;
Keras 3 converts the prediction to a tensor first.) Layers that consume a RandomVariable
(flows, ``Discretize``) therefore also accept a plain Tensor: that is what they see
during symbolic shape inference. Crossing a ``tf.function`` boundary (a returned
value, a SavedModel signature) converts a RandomVariable to its value; return
``rv.distribution`` (a CompositeTensor for most tfp distributions) to keep it.
"""

import tensorflow as tf
import tensorflow_probability as tfp

tfd = tfp.distributions

__all__ = ["RandomVariable"]


class RandomVariable:
    """A `tfp.distributions.Distribution` with a value, usable as a Tensor.

    The value is drawn on first access (``distribution.sample(sample_shape, seed)``)
    unless given, so code that only needs moments (e.g. deterministic moment
    propagation) never pays for a sample.

    Args:
      distribution: a `tfp.distributions.Distribution`.
      sample_shape: shape of the sample drawn for ``value``.
      value: optional Tensor to use as the value instead of sampling, or a
        zero-argument callable computing it lazily on first access (used by
        straight-through estimators and by flows, whose value is the transformed
        value of their input).
      seed: optional seed for the lazy sample (int or stateless ``[2]`` tensor).
      sampler: optional callable ``seed -> sample`` drawing one sample of the
        distribution the way its layer draws its value (e.g. replica-aware, see
        `bayes_planet.layers.noise.per_example_sample`). Used for the lazy value when
        no ``value`` is given, and by layers that resample their input's distribution
        (`Discretize`). Default: ``distribution.sample(seed=seed)``.

    Shapes: ``value.shape == sample_shape + batch_shape + event_shape``.
    """

    def __init__(self, distribution, sample_shape=(), value=None, seed=None, sampler=None):
        if not isinstance(distribution, tfd.Distribution):
            raise TypeError(
                "Expected a tfp.distributions.Distribution. "
                f"Received: distribution={distribution!r}"
            )
        self._distribution = distribution
        self._sample_shape = tf.TensorShape(sample_shape)
        self._seed = seed
        self._sampler = sampler
        self._value_fn = None
        if callable(value) and not tf.is_tensor(value):
            self._value_fn, value = value, None
        self._value = None if value is None else tf.convert_to_tensor(
            value, dtype=distribution.dtype
        )

    @property
    def distribution(self):
        """The underlying `tfp.distributions.Distribution`."""
        return self._distribution

    @property
    def sampler(self):
        """The ``seed -> sample`` callable given at construction, or None."""
        return self._sampler

    @property
    def sample_shape(self):
        """`tf.TensorShape` of the drawn sample."""
        return self._sample_shape

    @property
    def value(self):
        """The sampled value (drawn once, on first access)."""
        if self._value is None:
            if self._value_fn is not None:
                self._value = tf.convert_to_tensor(self._value_fn(), self._distribution.dtype)
                self._value_fn = None
            elif self._sampler is not None and self._sample_shape.rank == 0:
                self._value = tf.convert_to_tensor(self._sampler(self._seed),
                                                   self._distribution.dtype)
            else:
                self._value = self._distribution.sample(self._sample_shape, seed=self._seed)
        return self._value

    @property
    def shape(self):
        if self._value is not None:
            return self._value.shape
        return (
            self._sample_shape
            .concatenate(self._distribution.batch_shape)
            .concatenate(self._distribution.event_shape)
        )

    @property
    def dtype(self):
        return self._distribution.dtype

    @property
    def batch_shape(self):
        return self._distribution.batch_shape

    @property
    def event_shape(self):
        return self._distribution.event_shape

    def log_prob(self, x=None):
        """Log density/mass of ``x`` (default: of the value)."""
        return self._distribution.log_prob(self.value if x is None else x)

    def prob(self, x=None):
        return self._distribution.prob(self.value if x is None else x)

    def cdf(self, x):
        return self._distribution.cdf(x)

    def log_cdf(self, x):
        return self._distribution.log_cdf(x)

    def kl_divergence(self, other):
        """KL(self || other) for a distribution or RandomVariable ``other``.

        As in the paper's Fig. 6 (``encoding.kl_divergence(Normal(0., 1.))``), a
        scalar-event ``other`` against an ``Independent`` self is applied
        elementwise and summed over self's event axes.
        """
        if isinstance(other, RandomVariable):
            other = other.distribution
        dist = self._distribution
        ndims = getattr(dist, "reinterpreted_batch_ndims", None)
        inner = getattr(dist, "distribution", None)
        if (ndims is not None and inner is not None and other.event_shape.rank == 0
                and inner.event_shape.rank == 0 and dist.event_shape.rank > 0):
            kl = inner.kl_divergence(other)
            return tf.reduce_sum(kl, axis=list(range(-int(tf.get_static_value(ndims)), 0)))
        return dist.kl_divergence(other)

    def mean(self):
        return self._distribution.mean()

    def stddev(self):
        return self._distribution.stddev()

    def variance(self):
        return self._distribution.variance()

    def mode(self):
        return self._distribution.mode()

    def entropy(self):
        return self._distribution.entropy()

    def sample(self, sample_shape=(), seed=None):
        return self._distribution.sample(sample_shape, seed=seed)

    def numpy(self):
        return self.value.numpy()

    def __array__(self, dtype=None):
        return self.value.numpy() if dtype is None else self.value.numpy().astype(dtype)

    def __getitem__(self, key):
        return self.value[key]

    def __iter__(self):
        return iter(self.value)

    def __len__(self):
        return len(self.value)

    def __bool__(self):
        raise TypeError(
            "The truth value of a RandomVariable is ambiguous; compare its value instead."
        )

    def __hash__(self):
        return id(self)

    def __repr__(self):
        name = type(self._distribution).__name__
        return f"<RandomVariable {name} shape={self.shape} dtype={self.dtype.name}>"


def _operator(name):
    tensor_op = getattr(tf.Tensor, name)

    def op(self, *args):
        args = [a.value if isinstance(a, RandomVariable) else a for a in args]
        return tensor_op(self.value, *args)

    op.__name__ = name
    return op


for _name in tf.Tensor.OVERLOADABLE_OPERATORS:
    if _name not in ("__getitem__", "__eq__", "__ne__"):
        setattr(RandomVariable, _name, _operator(_name))


def _to_tensor(value, dtype=None, name=None, as_ref=False):
    del as_ref
    return tf.convert_to_tensor(value.value, dtype=dtype, name=name)


tf.register_tensor_conversion_function(RandomVariable, _to_tensor)
