"""`PosteriorNetwork` and its flow densities.

The contract harness for every flow kind; each `FlowDensity` integrates to 1 over the
plane (a grid sum, tolerance stated below); the concentrations against the closed form
``1 + N_c exp(log p(z | c))`` and the Dirichlet mean; `uce_loss` against the digamma
formula and tfp's Dirichlet entropy; same seed, same layer; bad arguments.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet.layers.posterior_network import (
    ElementwiseAffineTransform,
    MaskedAffineTransform,
    RadialTransform,
)
from bayes_planet.layers.testing import global_policy, normal_array, run_layer_test

FLOWS = ("radial", "affine", "maf")


@pytest.mark.parametrize("flow", FLOWS)
def test_contract(flow):
    # BatchNormalization: gamma, beta trainable; moving mean and variance not.
    run_layer_test(bl.PosteriorNetwork, {"num_classes": 3, "flow": flow, "flow_depth": 2,
                                         "flow_width": 8},
                   input_shape=(6, 4), expected_output_shape=(6, 3),
                   expected_num_non_trainable_weights=2, expected_num_losses=0)


@pytest.mark.parametrize("cls, kwargs", [(RadialTransform, {}),
                                         (ElementwiseAffineTransform, {}),
                                         (MaskedAffineTransform, {"hidden_dims": [6]})])
def test_transform_contract(cls, kwargs):
    run_layer_test(cls, kwargs, input_shape=(5, 3), expected_output_shape=(5, 3))


def _perturbed(density, seed):
    """The density with every weight moved off its initial value (a radial centre at 0, an
    affine transform at the identity would make the check easy)."""
    rng = np.random.default_rng(seed)
    for w in density.weights:
        w.assign(np.asarray(w) + 0.3 * rng.standard_normal(w.shape).astype(np.float32))
    return density


@pytest.mark.parametrize("flow, half_width", [("radial", 12.0), ("affine", 12.0),
                                              ("maf", 40.0)])
def test_density_integrates_to_one(flow, half_width):
    # A 2-D density summed over a grid (step 0.04 or 0.1); the flows' tails decay as a
    # Gaussian's, so the mass outside the box is negligible: |sum - 1| < 0.01.
    density = bl.FlowDensity(flow, depth=3, width=8, seed=5)
    density.build((None, 2))
    _perturbed(density, 0)
    step = 0.04 if flow != "maf" else 0.1
    axis = np.arange(-half_width, half_width, step, dtype=np.float32) + step / 2
    grid = np.stack(np.meshgrid(axis, axis), -1).reshape(-1, 2)
    mass = float(tf.reduce_sum(tf.exp(tf.cast(density(grid), tf.float64)))) * step ** 2
    assert abs(mass - 1.0) < 0.01, mass


def test_radial_log_det_matches_autodiff_jacobian():
    transform = RadialTransform(seed=3)
    z = tf.constant(normal_array(4, 3, seed=1))
    transform.build(z.shape)
    transform.beta_raw.assign(1.5)
    with tf.GradientTape() as tape:
        tape.watch(z)
        u, log_det = transform.normalize(z)
    jacobian = tape.batch_jacobian(u, z)
    expected = np.linalg.slogdet(jacobian.numpy())[1]
    np.testing.assert_allclose(log_det.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_maf_log_det_matches_autodiff_jacobian():
    transform = MaskedAffineTransform([8], order="right-to-left", seed=3)
    z = tf.constant(normal_array(4, 3, seed=1))
    transform.build(z.shape)
    with tf.GradientTape() as tape:
        tape.watch(z)
        u, log_det = transform.normalize(z)
    jacobian = tape.batch_jacobian(u, z).numpy()
    # Autoregressive: u_i depends on z_i and on the z_j of smaller degree only.
    degrees = np.asarray(transform.made.input_degrees)
    allowed = (degrees[None, :] < degrees[:, None]) | np.eye(3, dtype=bool)
    np.testing.assert_array_equal(jacobian[:, ~allowed], 0.0)
    np.testing.assert_allclose(log_det.numpy(), np.linalg.slogdet(jacobian)[1],
                               rtol=1e-5, atol=1e-5)


def test_concentrations_closed_form():
    counts = [10.0, 3.0, 50.0]
    layer = bl.PosteriorNetwork(3, flow="radial", flow_depth=2, class_counts=counts, seed=2)
    x = normal_array(8, 4, seed=3)
    alphas = layer(x).numpy()
    log_p = layer.log_densities(layer.latents(x)).numpy()
    np.testing.assert_allclose(alphas, 1.0 + np.asarray(counts) * np.exp(log_p), rtol=1e-5)
    assert np.all(alphas > 1.0)
    probs = layer(x, probabilities=True).numpy()
    np.testing.assert_allclose(probs, alphas / alphas.sum(-1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
    # The evidence scales with the class counts.
    doubled = bl.PosteriorNetwork.from_config({**layer.get_config(),
                                               "class_counts": [2 * c for c in counts]})
    doubled.build(x.shape)
    doubled.set_weights(layer.get_weights())
    np.testing.assert_allclose(doubled(x).numpy() - 1.0, 2.0 * (alphas - 1.0), rtol=1e-5,
                               atol=1e-6)  # (alphas are stored as 1 + evidence)


def test_far_latents_fall_back_to_the_flat_dirichlet():
    layer = bl.PosteriorNetwork(4, flow="affine", flow_depth=1, batch_norm=False, seed=0)
    far = np.full((2, 3), 50.0, np.float32)
    np.testing.assert_allclose(layer(far).numpy(), 1.0, atol=1e-6)


def test_training_separates_the_classes():
    # Two Gaussian blobs; 200 Adam steps on the UCE loss: the classes' Dirichlet means
    # point to the right class on > 95 % of the training points.
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-2, 0.5, (64, 2)), rng.normal(2, 0.5, (64, 2))])
    x = x.astype(np.float32)
    y = np.repeat([0, 1], 64)
    layer = bl.PosteriorNetwork(2, flow="radial", flow_depth=4, class_counts=[64, 64], seed=1)
    optimizer = bl.keras.optimizers.Adam(0.05)
    layer(x)
    for _ in range(200):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(bl.uce_loss(y, layer(x, training=True)))
        grads = tape.gradient(loss, layer.trainable_variables)
        optimizer.apply_gradients(zip(grads, layer.trainable_variables, strict=True))
    accuracy = np.mean(np.argmax(layer(x, probabilities=True).numpy(), -1) == y)
    assert accuracy > 0.95, accuracy


def test_uce_loss_closed_form():
    alphas = np.array([[2.0, 5.0, 1.5], [1.0, 1.0, 30.0]], np.float32)
    labels = np.array([1, 0])
    digamma = tf.math.digamma
    expected = (digamma(alphas.sum(-1)) - digamma(alphas[np.arange(2), labels])).numpy()
    np.testing.assert_allclose(bl.uce_loss(labels, alphas, entropy_weight=0).numpy(),
                               expected, rtol=1e-6)
    entropy = tfp.distributions.Dirichlet(alphas).entropy().numpy()
    np.testing.assert_allclose(bl.uce_loss(labels[:, None], alphas, entropy_weight=0.1).numpy(),
                               expected - 0.1 * entropy, rtol=1e-5)


def test_mixed_float16_gives_float32_concentrations():
    # exp(log N + log p) can exceed float16's 65504: α is computed in float32, the flows in
    # float16; the same layer in float32 agrees to float16's precision (rtol 1e-2).
    x = normal_array(6, 4, seed=0)
    with global_policy("mixed_float16"):
        mixed = bl.PosteriorNetwork(2, flow="radial", flow_depth=2, class_counts=[1e4, 1e4],
                                    seed=4)
        alphas = mixed(x)
    assert alphas.dtype == tf.float32 and np.isfinite(alphas.numpy()).all()
    plain = bl.PosteriorNetwork(2, flow="radial", flow_depth=2, class_counts=[1e4, 1e4], seed=4)
    np.testing.assert_allclose(alphas.numpy(), plain(x).numpy(), rtol=1e-2)


def test_same_seed_same_layer():
    x = normal_array(5, 4, seed=0)
    outs = []
    for _ in range(2):
        layer = bl.PosteriorNetwork(2, flow="maf", flow_depth=2, seed=7)
        outs.append(layer(x).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    other = bl.PosteriorNetwork(2, flow="maf", flow_depth=2, seed=8)
    assert not np.allclose(other(x).numpy(), outs[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"num_classes": 0}, "Expected a positive integer. Received: num_classes=0"),
    ({"num_classes": 2, "flow": "planar"}, "Expected flow in"),
    ({"num_classes": 2, "flow_depth": 0}, "Received: flow_depth=0"),
    ({"num_classes": 2, "flow_width": -1}, "Received: flow_width=-1"),
    ({"num_classes": 2, "class_counts": [1, 2, 3]}, "Expected 2 positive class counts"),
    ({"num_classes": 2, "class_counts": [1, 0]}, "Expected 2 positive class counts"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bl.PosteriorNetwork(**kwargs)
