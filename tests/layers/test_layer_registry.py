"""The layer registry and the posterior contract (the library's extension points).

A new estimator is its own class, a registry entry and its tests: `DenseAntithetic`
below is one, registered here, and the Transformer builds with it unchanged. A new
posterior implements the contract of `initializers`: `TrainableLaplace` below has no
closed-form normal moments, so the reparameterization layers and the cells sample it
through its own ``sample``, and flipout, local reparameterization and the normal KL
refuse it in one line.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers import fixed_noise, initializers, noise
from bayes_planet.layers.base import moments, sample_weight
from bayes_planet.layers.noise import split_seed, standard_normal
from bayes_planet.layers.testing import run_layer_test

tfd = tfp.distributions


def _data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def _wide():
    return initializers.TrainableNormal(stddev_initializer=keras.initializers.Constant(-1.0))


# The registry ------------------------------------------------------------------------

def test_every_registered_class_is_exported():
    for family in layer_registry.families():
        names = layer_registry.estimators(family)
        assert names[0] == "deterministic" and len(set(names)) == len(names)
        twin = layer_registry.get(family, "deterministic")
        assert getattr(keras.layers, twin.__name__) is twin
        for name in names[1:]:
            cls = layer_registry.get(family, name)
            assert cls.__name__ in bl.__all__ and getattr(bl, cls.__name__) is cls
            assert issubclass(cls, twin)  # a drop-in twin of the Keras layer
            assert keras.saving.get_registered_object(f"bayes_planet>{cls.__name__}") is cls


def test_sampling_only_leaves_out_the_recipes():
    assert "variational_dropout" in layer_registry.estimators("dense")
    assert "variational_dropout" not in layer_registry.estimators("dense", sampling_only=True)
    assert (layer_registry.estimators("lstm_cell", sampling_only=True)
            == layer_registry.estimators("lstm_cell"))


def test_unknown_family_or_estimator_is_one_line():
    with pytest.raises(ValueError, match=r"family\. Expected one of \['dense', .*\]\. "
                                         r"Received: family='dense2'$"):
        layer_registry.get("dense2", "flipout")
    with pytest.raises(ValueError, match=r"'gru_cell' family\. Expected one of \['deterministic', "
                                         r"'reparameterization', 'flipout'\]\. "
                                         r"Received: estimator='local_reparameterization'$"):
        layer_registry.get("gru_cell", "local_reparameterization")
    with pytest.raises(ValueError, match="Received: family='conv3d'"):
        layer_registry.estimators("conv3d")


def test_readers_take_their_choices_from_the_registry():
    from bayes_planet.agent.rssm import ESTIMATORS

    assert ESTIMATORS == layer_registry.estimators("dense", sampling_only=True, ensembles=True)
    assert ESTIMATORS[-2:] == ("rank1", "batch_ensemble")  # the 'dense_ensemble' family's
    with pytest.raises(ValueError, match=r"Expected feed_forward in \[.*'flipout'.*\]\. "
                                         r"Received: feed_forward='nope'"):
        bl.TransformerBlock(2, 4, 8, feed_forward="nope")


def test_register_refuses_bad_entries():
    with pytest.raises(ValueError, match="already registered"):
        layer_registry.register("dense", "flipout", bl.DenseFlipout)
    with pytest.raises(ValueError, match="Received: estimator='deterministic'"):
        layer_registry.register("dense", "deterministic", bl.DenseFlipout)
    with pytest.raises(TypeError, match="Expected a layer class"):
        layer_registry.register("dense", "toy", "DenseFlipout")
    with pytest.raises(ValueError, match="added with register"):
        layer_registry.unregister("dense", "flipout")  # the table's own entries stay


# A new estimator: its class, one registry entry, its tests ---------------------------

def antithetic(op, x, weight, seed, channel_axis=-1):
    """Toy estimator: the first half of the batch uses one weight sample ``W``, the second
    half its mirror image ``2 loc - W`` (antithetic sampling)."""
    del channel_axis
    w = sample_weight(weight, seed, x.dtype)
    loc, _ = moments(weight, x.dtype)
    half = tf.shape(x)[0] // 2
    return tf.concat([op(x[:half], w), op(x[half:], 2.0 * loc - w)], 0)


@keras.saving.register_keras_serializable(package="bayes_planet_tests")
class DenseAntithetic(bl.DenseReparameterization):
    """Dense with the toy antithetic estimator (the family's extension point)."""

    _estimator = staticmethod(antithetic)


@pytest.fixture
def registered_antithetic():
    layer_registry.register("dense", "antithetic", DenseAntithetic)
    yield
    layer_registry.unregister("dense", "antithetic")


@pytest.mark.usefixtures("registered_antithetic")
def test_a_registered_estimator_passes_the_contract_and_reaches_the_transformer():
    cls = layer_registry.get("dense", "antithetic")
    assert cls is DenseAntithetic and "antithetic" in layer_registry.estimators("dense")
    run_layer_test(cls, {"units": 3, "activation": "relu"}, (4, 5), expected_output_shape=(4, 3),
                   expected_num_trainable_weights=3, expected_num_losses=1)
    # Same seed, same draws: the first half equals the reparameterization layer's output.
    x = _data(6, 5)
    toy, reparam = DenseAntithetic(3, seed=1), bl.DenseReparameterization(3, seed=1)
    toy.build(x.shape)
    reparam.build(x.shape)
    reparam.set_weights(toy.get_weights())
    np.testing.assert_array_equal(toy(x)[:3], reparam(x)[:3])
    # The Transformer reads the registry: the new estimator needs no edit there.
    block = bl.TransformerBlock(2, 4, 8, feed_forward="antithetic", seed=0)
    assert block(_data(2, 3, 8)).shape == (2, 3, 8)
    assert isinstance(block.ff_in, DenseAntithetic)
    assert layer_registry.estimators("dense")[-1] == "antithetic"


def test_unregister_restores_the_family():
    before = layer_registry.estimators("dense")
    layer_registry.register("dense", "antithetic", DenseAntithetic)
    layer_registry.unregister("dense", "antithetic")
    assert layer_registry.estimators("dense") == before


# A new posterior: the contract -------------------------------------------------------

class TrainableLaplace(initializers.DistributionInitializer):
    """Toy posterior: factorized Laplace(loc, b). No closed-form normal moments."""

    def build(self, shape, dtype=None):
        super().build(shape, dtype)
        self.mean = self._weight("loc", "glorot_uniform")
        self.log_b = self._weight("log_b", keras.initializers.Constant(-2.0))

    def loc(self):
        return tf.convert_to_tensor(self.mean)

    def sample(self, seed, dtype=None, num_samples=1):
        loc, b = self.loc(), tf.exp(tf.convert_to_tensor(self.log_b))
        shape = tf.shape(loc) if num_samples == 1 else [num_samples, *loc.shape]
        u = tf.random.stateless_uniform(shape, seed, -0.5 + 1e-6, 0.5, loc.dtype)
        w = loc - b * tf.sign(u) * tf.math.log1p(-2.0 * tf.abs(u))
        return w if dtype is None else tf.cast(w, dtype)

    def distribution(self):
        return tfd.Independent(tfd.Laplace(self.loc(), tf.exp(self.log_b)),
                               reinterpreted_batch_ndims=self.weight_shape.rank)


def test_reparameterization_samples_through_the_posterior():
    x = tf.constant(_data(4, 5))
    layer = bl.DenseReparameterization(3, kernel_initializer=TrainableLaplace(),
                                       kernel_regularizer=None, seed=2)
    layer.build(x.shape)
    seed = tf.constant([4, 5])
    with fixed_noise(layer, seed):
        out = layer(x)
    kernel_seed, _ = split_seed(tf.random.experimental.stateless_fold_in(seed, 0), 2)
    np.testing.assert_array_equal(out, tf.matmul(x, layer.kernel.sample(kernel_seed)) + layer.bias)
    assert not np.array_equal(out, tf.matmul(x, layer.kernel.loc()) + layer.bias)
    with bl.posterior_mean(layer):
        np.testing.assert_array_equal(layer(x), tf.matmul(x, layer.kernel.loc()) + layer.bias)


def test_cells_sample_through_the_posterior():
    cell = bl.LSTMCellReparameterization(
        3, kernel_initializer=TrainableLaplace(), recurrent_initializer=TrainableLaplace(),
        kernel_regularizer=None, recurrent_regularizer=None, seed=0)
    out = keras.layers.RNN(cell)(_data(2, 4, 5))
    assert out.shape == (2, 3) and np.all(np.isfinite(out))


@pytest.mark.parametrize("cls, estimator", [(bl.DenseFlipout, "flipout"),
                                            (bl.DenseLocalReparameterization,
                                             "local reparameterization")])
def test_estimators_that_need_moments_refuse_it_in_one_line(cls, estimator):
    layer = cls(3, kernel_initializer=TrainableLaplace(), kernel_regularizer=None)
    with pytest.raises(ValueError, match=rf"(?m)^The {estimator} estimator needs a posterior with "
                                         r"closed-form .* Received: weight=.*"
                                         r"\(TrainableLaplace\)$"):
        layer(_data(2, 5))


def test_a_normal_kl_refuses_it_in_one_line():
    with pytest.raises(TypeError, match=r"^Expected a posterior with closed-form factorized "
                                        r"moments.*Received: TrainableLaplace"):
        layer = bl.DenseReparameterization(3, kernel_initializer=TrainableLaplace())
        layer(_data(2, 5))  # the reparameterization estimator takes it
        layer.losses  # noqa: B018  (the KL is computed when the losses are read)


# Same seed, same numbers: the layers against the factorized-normal formulas ----------

def _reference(estimator, op, x, loc, scale, seed, channel_axis=-1):
    """The estimators written out on (loc, scale): the draws the layers made before the
    posterior owned sampling (``loc + scale * eps``, eps from `standard_normal`)."""
    if estimator == "reparameterization":
        return op(x, loc + scale * standard_normal(tf.shape(loc), seed))
    mean = op(x, loc)
    if estimator == "local_reparameterization":
        var = op(tf.square(x), tf.square(scale))
        return mean + tf.sqrt(var + 1e-16) * standard_normal(tf.shape(mean), seed)
    eps_seed, in_seed, out_seed = split_seed(seed, 3)
    delta = scale * standard_normal(tf.shape(loc), eps_seed)
    rank = x.shape.rank

    def signs(t, s):
        dims = [tf.shape(t)[0]] + [1] * (rank - 1)
        dims[channel_axis % rank] = tf.shape(t)[channel_axis % rank]
        return noise.random_signs(tf.stack(dims), s, t.dtype)

    return mean + op(x * signs(x, in_seed), delta) * signs(mean, out_seed)


@pytest.mark.parametrize("family, x_shape, kwargs", [
    ("dense", (6, 5), {"units": 4}),
    ("conv2d", (2, 5, 5, 3), {"filters": 4, "kernel_size": 3}),
    ("conv1d", (2, 7, 3), {"filters": 4, "kernel_size": 3}),
])
def test_layers_draw_what_the_factorized_formulas_draw(family, x_shape, kwargs):
    x = tf.constant(_data(*x_shape, seed=3))
    seed = tf.constant([11, 12])
    for name in ("reparameterization", "flipout", "local_reparameterization"):
        if name not in layer_registry.estimators(family):
            continue
        layer = layer_registry.get(family, name)(
            **kwargs, kernel_initializer=_wide(), bias_initializer="trainable_normal", seed=0)
        layer.build(x.shape)
        with fixed_noise(layer, seed):
            out = layer(x)
        kernel_seed, bias_seed = split_seed(tf.random.experimental.stateless_fold_in(seed, 0), 2)
        k, b = layer.kernel, layer.bias
        op = tf.matmul if family == "dense" else layer.convolution_op
        expected = _reference(name, op, x, k.mean, tf.exp(k.raw_stddev), kernel_seed)
        expected += b.mean + tf.exp(b.raw_stddev) * standard_normal(b.weight_shape, bias_seed)
        np.testing.assert_array_equal(out, expected, err_msg=f"{family}/{name}")


def test_ensemble_families_and_family_for():
    assert layer_registry.ensemble_family("dense") == "dense_ensemble"
    assert layer_registry.ensemble_family("gru_cell") == "gru_cell_ensemble"
    assert layer_registry.ensemble_family("dense_ensemble") is None
    assert layer_registry.ensemble_family("einsum_dense") == "einsum_dense_ensemble"
    assert (layer_registry.estimators("gru_cell", ensembles=True)
            == ("deterministic", "reparameterization", "flipout", "rank1"))
    assert layer_registry.family_for("dense", "flipout") == "dense"
    assert layer_registry.family_for("dense", "batch_ensemble") == "dense_ensemble"
    assert layer_registry.family_for("dense", "deterministic") == "dense"
    assert layer_registry.ensemble_members("dense", "rank1", 4) == 4
    assert layer_registry.ensemble_members("dense", "flipout", 4) == 1
    with pytest.raises(ValueError, match=r"^Unknown estimator for the 'gru_cell' family\. "
                                         r"Expected one of \['deterministic', "
                                         r"'reparameterization', 'flipout', 'rank1'\]\. "
                                         r"Received: estimator='batch_ensemble'$"):
        layer_registry.family_for("gru_cell", "batch_ensemble")
