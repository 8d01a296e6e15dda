"""Mixed precision (``mixed_float16``, ``mixed_bfloat16``) for every layer family.

Per family member and policy: the variational parameters (every trainable variable)
stay float32, the layer computes and returns the policy's compute dtype, the KL terms
are float32 (computed from the float32 parameters), and the loss and every gradient
are finite (the GP layers compute and return float32 under any policy:
`FLOAT32_OUTPUTS`). One member per family also runs a Keras ``fit`` step (a loss-scale
optimizer under ``mixed_float16``). The models are the small ones of the strategy
tests (``tests/layers/_layer_cases.py``). The global policy is always restored.
"""


import numpy as np
import pytest
import tensorflow as tf

from bayes_planet._keras import keras
from bayes_planet.layers.testing import weight_losses
from tests.layers import _layer_cases as cases_lib  # noqa: E402

POLICIES = ["mixed_float16", "mixed_bfloat16"]
CASES = cases_lib.case_names()

# Layers computing and returning float32 under any policy (a 16-bit Cholesky factorization
# is ill-conditioned and has no CPU kernel; see gaussian_process.py).
FLOAT32_OUTPUTS = {"GaussianProcess", "SparseGaussianProcess",
                   "SparseGaussianProcess(2 layers, sample)", "SNGP"}
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
            yield pytest.param(name, policy, id=f"{name}-{policy}")


@pytest.mark.parametrize(("name", "policy"), list(_params()), indirect=["policy"])
def test_layer_family_under_mixed_precision(name, policy):
    case = cases_lib.case(name)
    x, y = cases_lib.data(case.x_shape, case.y_shape, case.y_kind)
    model = cases_lib.model(case)
    loss_fn = cases_lib.loss_fn(case.loss)
    with tf.GradientTape() as tape:
        out = model(x, training=True)
        data = tf.reduce_mean(loss_fn(y, out))
        losses = [tf.cast(loss, tf.float32) for loss in model.losses]
        loss = data + tf.add_n(losses) if losses else data
    grads = tape.gradient(loss, model.trainable_variables)
    compute = tf.as_dtype("float32" if name in FLOAT32_OUTPUTS else policy.compute_dtype)
    value = tf.convert_to_tensor(out)
    assert value.dtype == compute, (value.dtype, compute)
    assert model.trainable_variables
    assert all(v.dtype == tf.float32 for v in model.trainable_variables), [
        (v.name, v.dtype) for v in model.trainable_variables if v.dtype != tf.float32]
    for kl in weight_losses(model):
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
    x, y = cases_lib.data(case.x_shape, case.y_shape, case.y_kind)
    model = cases_lib.model(case)
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
@pytest.mark.parametrize("dtype", [None, "float32"])
def test_gaussian_process_layers_in_float32_under_a_mixed_policy(policy, dtype):
    """GP layers compute in float32 under a mixed policy (by default, or with
    ``dtype='float32'``), behind a layer computing in the policy dtype."""
    import bayes_planet.layers as bl
    x, y = cases_lib.data((8, 2), (8, 2))
    hidden = keras.layers.Dense(2)  # computes in the policy dtype
    gp = bl.SparseGaussianProcess(2, num_inducing=4, seed=1, dtype=dtype)
    with tf.GradientTape() as tape:
        h = hidden(x)
        rv = gp(h)
        loss = -tf.reduce_mean(rv.distribution.log_prob(y)) + tf.add_n(gp.losses)
    grads = tape.gradient(loss, hidden.trainable_variables + gp.trainable_variables)
    assert h.dtype == tf.as_dtype(policy.compute_dtype)
    assert gp.compute_dtype == gp.covariance_fn.compute_dtype == "float32"
    assert tf.convert_to_tensor(rv).dtype == tf.float32 and np.isfinite(float(loss))
    assert all(w.dtype == tf.float32 for w in gp.trainable_weights)
    assert all(g is not None and np.all(np.isfinite(tf.cast(g, tf.float32))) for g in grads)


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
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
