"""Mixed precision (``mixed_float16``, ``mixed_bfloat16``) for every layer family.

Per family member and policy: the variational parameters (every trainable variable)
stay float32, the layer computes and returns the policy's compute dtype, the KL terms
are float32 (computed from the float32 parameters), and the loss and every gradient
are finite. One member per family also runs a Keras ``fit`` step (a loss-scale
optimizer under ``mixed_float16``). The models are the small ones of the strategy
tests (``tests/_distribute_scripts.py``). The global policy is always restored.
"""


import _distribute_scripts as cases_lib  # noqa: E402
import numpy as np
import pytest
import tensorflow as tf

from bayes_planet._keras import keras

POLICIES = ["mixed_float16", "mixed_bfloat16"]
CASES = cases_lib.case_names()

_CHOLESKY = ("gaussian_process.py computes in the compute dtype and Cholesky has no "
             "float16/bfloat16 CPU kernel (and is ill-conditioned in 16 bits): GP layers "
             "should compute in float32 whatever the policy. Workaround: dtype='float32'.")
_RANGE = ("outputs.Categorical's straight-through surrogate calls tf.range(..., "
          "dtype=logits.dtype): no float16/bfloat16 Range kernel on CPU.")
_VQ = ("vq.VectorQuantizer.encode casts the inputs to codebook.dtype (float32) but reads "
       "the autocast codebook as the compute dtype: a float32/16-bit matmul.")
_VQ_EMA = ("vq.VectorQuantizer(ema=True) builds ema_sum from the autocast codebook "
           "(16-bit) as the initial value of a float32 variable.")
_LOGISTIC = ("Sampling outputs.MixtureLogistic in bfloat16 fails in tfp 0.23: "
             "tfd.Logistic._sample_n calls np.finfo(bfloat16). Suggested fix: build the "
             "logistic components in float32 when the compute dtype is bfloat16.")
_ANY = (tf.errors.NotFoundError, tf.errors.InvalidArgumentError)
# (case, policy or None for both) -> (reason, expected exception).
KNOWN_FAILURES = {
    ("GaussianProcess", None): (_CHOLESKY, _ANY),
    ("SparseGaussianProcess", None): (_CHOLESKY, _ANY),
    ("Categorical", None): (_RANGE, tf.errors.NotFoundError),
    ("VectorQuantizer", None): (_VQ, tf.errors.InvalidArgumentError),
    ("VectorQuantizer(ema)", None): (_VQ_EMA, ValueError),
    ("MixtureLogistic+Discretize", "mixed_bfloat16"): (_LOGISTIC, ValueError),
}
# Keras fit under a mixed policy (a LossScaleOptimizer for float16): the dense, conv and
# recurrent estimators; the Transformer's mixed-precision fit is in test_attention.py.
FIT_CASES = ["DenseReparameterization", "Conv2DFlipout", "LSTMCellFlipout"]


@pytest.fixture
def policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    try:
        yield keras.mixed_precision.global_policy()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _params():
    for name in CASES:
        for policy in POLICIES:
            known = KNOWN_FAILURES.get((name, None)) or KNOWN_FAILURES.get((name, policy))
            marks = [] if known is None else [
                pytest.mark.xfail(strict=True, reason=known[0], raises=known[1])]
            yield pytest.param(name, policy, marks=marks, id=f"{name}-{policy}")


def _kl_losses(model):
    """The KL regularizers' terms (callable losses of Bayesian layers' weights)."""
    return [loss for layer in model.submodules for loss in getattr(layer, "_callable_losses", ())]


@pytest.mark.parametrize(("name", "policy"), list(_params()), indirect=["policy"])
def test_layer_family_under_mixed_precision(name, policy):
    case = cases_lib.case(name)
    x, y = cases_lib._data(case.x_shape, case.y_shape, case.y_kind)
    model = cases_lib._model(case)
    loss_fn = cases_lib._loss_fn(case.loss)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        data = tf.reduce_mean(loss_fn(y, out))
        losses = [tf.cast(loss, tf.float32) for loss in model.losses]
        loss = data + tf.add_n(losses) if losses else data
    grads = tape.gradient(loss, model.trainable_variables)
    compute = tf.as_dtype(policy.compute_dtype)
    value = tf.convert_to_tensor(out)
    assert value.dtype == compute, (value.dtype, compute)
    assert model.trainable_variables
    assert all(v.dtype == tf.float32 for v in model.trainable_variables), [
        (v.name, v.dtype) for v in model.trainable_variables if v.dtype != tf.float32]
    for kl in [fn() for fn in _kl_losses(model)]:
        assert kl.dtype == tf.float32 and np.isfinite(float(kl)), kl
    assert data.dtype == tf.float32 and np.isfinite(float(loss)), float(loss)
    for v, g in zip(model.trainable_variables, grads, strict=True):
        assert g is not None, v.name
        g = tf.cast(tf.convert_to_tensor(g), tf.float32)
        assert np.all(np.isfinite(g.numpy())), v.name


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("name", FIT_CASES)
def test_fit_step_under_mixed_precision(policy, name):
    case = cases_lib.case(name)
    x, y = cases_lib._data(case.x_shape, case.y_shape, case.y_kind)
    model = cases_lib._model(case)
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    if policy.name == "mixed_float16":  # Keras wraps it for dynamic loss scaling.
        assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    before = [v.numpy() for v in model.trainable_variables] if model.built else None
    history = model.fit(x, y, batch_size=len(x), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"])), history.history
    assert all(v.dtype == tf.float32 and np.all(np.isfinite(v.numpy()))
               for v in model.trainable_variables)
    if before is not None:
        assert any(not np.array_equal(a, v.numpy())
                   for a, v in zip(before, model.trainable_variables, strict=True))


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
def test_gaussian_process_layers_in_float32_under_a_mixed_policy(policy):
    """The documented workaround for GP layers: ``dtype='float32'`` on the layer."""
    import bayes_planet.layers as bl
    x, y = cases_lib._data((8, 2), (8, 2))
    hidden = keras.layers.Dense(2)  # computes in the policy dtype
    gp = bl.SparseGaussianProcess(2, num_inducing=4, seed=1, dtype="float32")
    with tf.GradientTape() as tape:
        h = hidden(x)
        rv = gp(h)
        loss = -tf.reduce_mean(rv.distribution.log_prob(y)) + tf.add_n(gp.losses)
    grads = tape.gradient(loss, hidden.trainable_variables + gp.trainable_variables)
    assert h.dtype == tf.as_dtype(policy.compute_dtype)
    assert tf.convert_to_tensor(rv).dtype == tf.float32 and np.isfinite(float(loss))
    assert all(g is not None and np.all(np.isfinite(tf.cast(g, tf.float32))) for g in grads)


_POISSON_BF16 = ("point_process.PoissonProcess samples with tf.random.poisson, which has no "
                 "bfloat16 kernel: sample in float32 and cast (log_prob works in bfloat16).")


@pytest.mark.parametrize("policy", [
    "mixed_float16",
    pytest.param("mixed_bfloat16", marks=pytest.mark.xfail(strict=True, reason=_POISSON_BF16,
                                                           raises=TypeError))],
    indirect=True)
def test_poisson_process_under_mixed_precision(policy):
    """The point-process output layer (its "batch" is the grid, so it is not a case of the
    batch-split strategy tests)."""
    import bayes_planet.layers as bl
    layer = bl.PoissonProcess([0.0, 0.0], [1.0, 1.0], [4, 4], seed=0)
    rate_net = keras.layers.Dense(1, activation="softplus")
    points = layer.grid_points().astype("float32")
    counts = np.random.default_rng(0).poisson(3.0, (16, 1)).astype("float32")
    with tf.GradientTape() as tape:
        rv = layer(rate_net(points))
        loss = -tf.cast(rv.distribution.log_prob(counts), tf.float32)
    grads = tape.gradient(loss, rate_net.trainable_variables)
    assert np.isfinite(float(loss)) and all(np.all(np.isfinite(g)) for g in grads)
    assert tf.convert_to_tensor(rv).dtype == tf.as_dtype(policy.compute_dtype)  # a sample
    assert all(v.dtype == tf.float32 for v in rate_net.trainable_variables)


def test_policy_is_restored():
    assert keras.mixed_precision.global_policy().name == "float32"
