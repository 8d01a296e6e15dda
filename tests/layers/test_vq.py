"""The vector quantizer (`bayes_planet.layers.vq`): contract, losses, straight-through
gradients, codebook usage and the EMA update."""

import numpy as np
import pytest
import tensorflow as tf

from bayes_planet.layers.testing import normal_array, run_layer_test
from bayes_planet.layers.vq import VectorQuantizer, codebook_usage


@pytest.mark.parametrize("ema, trainable, non_trainable", [(False, 1, 0), (True, 0, 3)])
def test_vector_quantizer_contract(ema, trainable, non_trainable):
    run_layer_test(VectorQuantizer, {"num_codes": 5, "ema": ema}, (4, 3, 6),
                   expected_output_shape=(4, 3, 6), expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=non_trainable, expected_num_losses=1,
                   equal_initial_weights=[("codebook", "ema_sum")])  # The EMA starts there.


def test_vector_quantizer_losses_straight_through_and_usage():
    vq = VectorQuantizer(4, commitment_cost=0.25)
    x = tf.constant(normal_array(6, 3))
    w = tf.constant(normal_array(6, 3, seed=2))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        out = tf.convert_to_tensor(vq(x))
        loss = tf.reduce_sum(out * w)
        penalty = tf.add_n(vq.losses)
    codes = vq.encode(x).numpy()
    book = vq.codebook.numpy()
    dists = ((x.numpy()[:, None, :] - book[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(codes, dists.argmin(-1))
    np.testing.assert_allclose(out, book[codes], rtol=1e-6)
    # Straight-through: the encoder receives the decoder's gradient unchanged.
    np.testing.assert_allclose(tape.gradient(loss, x), w, rtol=1e-6)
    mse = np.mean((x.numpy() - book[codes]) ** 2)
    np.testing.assert_allclose(penalty, 1.25 * mse, rtol=1e-5)
    grad_book = tf.convert_to_tensor(tape.gradient(penalty, vq.codebook)).numpy()
    assert np.abs(grad_book[np.unique(codes)]).sum() > 0
    unused = np.setdiff1d(np.arange(4), codes)
    np.testing.assert_array_equal(grad_book[unused], 0.0)
    used, perplexity = codebook_usage(np.array([0, 0, 1, 1]), 4)
    np.testing.assert_allclose([used, perplexity], [0.5, 2.0], rtol=1e-6)
    np.testing.assert_array_equal(vq(x).distribution.entropy(), 0.0)  # a point mass


def test_vector_quantizer_ema_moves_codes_to_assigned_means():
    vq = VectorQuantizer(3, ema=True, decay=0.0, epsilon=1e-9)
    x = tf.constant(normal_array(20, 2))
    vq(x)  # builds; no update outside training
    codes = vq.encode(x).numpy()
    vq(x, training=True)
    for k in np.unique(codes):
        np.testing.assert_allclose(vq.codebook.numpy()[k], x.numpy()[codes == k].mean(0),
                                   rtol=1e-4, atol=1e-6)
    assert len(vq.trainable_weights) == 0 and len(vq.losses) == 1
