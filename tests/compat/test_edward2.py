"""bayes_planet.compat.edward2: edward2's names, arguments and defaults over the library."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
import tensorflow as tf

import bayes_planet.compat.edward2 as ed
import bayes_planet.layers as bl
from bayes_planet._keras import keras
from bayes_planet.layers import initializers as lib_initializers


def test_trainable_normal_has_edward2_defaults_and_views():
    init = ed.initializers.get("trainable_normal")
    assert isinstance(init, ed.initializers.TrainableNormal)
    assert isinstance(init, lib_initializers.TrainableNormal)
    rv = init((200,))
    np.testing.assert_allclose(rv.distribution.distribution.loc.numpy(), 0.0, atol=1e-4)
    scale = rv.distribution.distribution.scale.numpy()
    # softplus(TruncatedNormal(-3, 0.1)): within two stddevs of softplus(-3) = 0.0486.
    assert np.all(np.abs(scale - np.log1p(np.exp(-3.0))) < 0.011)
    assert init.stddev is init.raw_stddev
    # `distribution` is both the library's method and edward2's attribute.
    np.testing.assert_allclose(init.distribution.stddev().numpy(), init.distribution().stddev())


def test_get_resolves_edward2_then_library_then_keras_names():
    assert type(ed.initializers.get("TrainableHeNormal")) is ed.initializers.TrainableHeNormal
    assert isinstance(ed.initializers.get("trainable_random_sign_normal"),
                      lib_initializers.TrainableRandomSignNormal)
    assert isinstance(ed.initializers.get("zeros"), keras.initializers.Zeros)
    assert ed.regularizers.get("") is None and ed.regularizers.get(None) is None
    assert isinstance(ed.regularizers.get("l2"), keras.regularizers.L2)
    assert isinstance(ed.constraints.get("softplus"), ed.constraints.Softplus)
    with pytest.raises(ValueError, match="Unknown initializer"):
        ed.initializers.get("no_such_initializer")


def test_random_sign_default_is_all_plus_one():
    values = ed.initializers.RandomSign()((50,))
    np.testing.assert_array_equal(values.numpy(), np.ones(50))
    assert ed.initializers.RandomSign.from_config(ed.initializers.RandomSign(0.3).get_config()
                                                  ).probs == pytest.approx(0.3)


def test_random_variable_constructors_and_trace():
    rv = ed.Normal(loc=1.0, scale=2.0, name="z")
    assert isinstance(rv, ed.RandomVariable)
    assert rv.distribution.mean().numpy() == pytest.approx(1.0)

    def set_value(f, *args, **kwargs):
        kwargs["value"] = 5.0
        return f(*args, **kwargs)

    with ed.trace(set_value):
        traced = ed.Normal(loc=0.0, scale=1.0, name="z")
    assert traced.value.numpy() == pytest.approx(5.0)
    with ed.tape() as recorded:
        ed.Poisson(3.0, name="n")
    assert list(recorded) == ["n"]


def test_trace_of_weights_takes_the_posterior_mean():
    layer = ed.layers.DenseReparameterization(4, kernel_initializer=ed.initializers.
                                              TrainableNormal(stddev_initializer="ones"),
                                              use_bias=False)
    x = tf.ones([3, 5])
    noisy = layer(x)

    def take_mean(f, *args, **kwargs):
        rv = f(*args, **kwargs)
        rv._value = rv.distribution.mean()
        return rv

    with ed.trace(take_mean):
        traced = layer(x)
    with bl.posterior_mean(layer):
        mean = layer(x)
    np.testing.assert_allclose(traced.numpy(), mean.numpy(), atol=1e-6)
    assert not np.allclose(noisy.numpy(), mean.numpy())
    # Outside the block the weight is stochastic again.
    assert not np.allclose(layer(x).numpy(), mean.numpy())


def test_layer_signatures_follow_edward2():
    dense = ed.layers.DenseVariationalDropout(3)
    assert isinstance(dense.kernel_regularizer, bl.regularizers.LogUniformKLDivergence)
    rank1 = ed.layers.DenseRank1(3)
    assert rank1.ensemble_size == 1 and bl.DenseRank1(3).ensemble_size == 4
    assert isinstance(rank1.alpha_initializer, ed.initializers.TrainableNormal)
    be = ed.layers.DenseBatchEnsemble(3, 1, 2)  # units, rank, ensemble_size: edward2's order
    assert be.ensemble_size == 2
    with pytest.raises(ValueError, match="rank=1 only"):
        ed.layers.DenseBatchEnsemble(3, rank=2)
    with pytest.raises(ValueError, match="min_perturbation_value=-10 only"):
        ed.layers.DenseRank1(3, min_perturbation_value=-5)
    missing = ed.layers.NOT_IMPLEMENTED[0]
    with pytest.raises(NotImplementedError, match=missing):
        getattr(ed.layers, missing)(3)


def test_ensemble_super_call_is_the_shared_op():
    layer = ed.layers.DenseBatchEnsemble(4, ensemble_size=2, alpha_initializer="he_normal",
                                         gamma_initializer="he_normal")
    x = tf.random.stateless_normal([3, 5], [1, 2])
    out = layer(tf.tile(x, [2, 1]))
    manual = tf.concat([super(ed.layers.DenseBatchEnsemble, layer).call(x * layer.alpha[i])
                        * layer.gamma[i] + layer.ensemble_bias[i] for i in range(2)], 0)
    np.testing.assert_allclose(out.numpy(), manual.numpy(), atol=1e-5)


def test_rank1_config_round_trip_with_deterministic_factors():
    layer = ed.layers.DenseRank1(3, alpha_initializer="trainable_deterministic",
                                 gamma_initializer="trainable_deterministic",
                                 bias_initializer="trainable_deterministic",
                                 alpha_regularizer=None, gamma_regularizer=None, ensemble_size=2)
    x = tf.random.stateless_normal([4, 5], [3, 4])
    out = layer(x)
    clone = ed.layers.DenseRank1.from_config(layer.get_config())
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(clone(x).numpy(), out.numpy(), atol=1e-6)
    assert isinstance(clone.alpha_initializer, ed.initializers.TrainableDeterministic)


def test_lstm_cell_call_weights_redraws_the_sample():
    cell = ed.layers.LSTMCellReparameterization(4, implementation=1)
    x = tf.random.stateless_normal([2, 3], [5, 6])
    state = cell.get_initial_state(x)
    first, _ = cell(x, state)
    again, _ = cell(x, state)
    cell.call_weights()
    redrawn, _ = cell(x, state)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.allclose(first.numpy(), redrawn.numpy())
    with pytest.raises(ValueError, match="implementation"):
        ed.layers.LSTMCellFlipout(4, implementation=3)


def test_rank1_lstm_broadcasts_a_batch_one_state():
    cell = ed.layers.LSTMCellRank1(3, ensemble_size=2)
    x = tf.random.stateless_normal([4, 2], [7, 8])
    zeros = tf.zeros([1, 3])
    out, (h, c) = cell(x, (zeros, zeros))
    expected, _ = cell(x, (tf.zeros([4, 3]), tf.zeros([4, 3])))
    assert out.shape == (4, 3) and h.shape == (4, 3) and c.shape == (4, 3)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), atol=1e-6)


def test_spectral_normalization_update_weights():
    dense = keras.layers.Dense(6)
    dense.build((None, 5))
    sn = ed.layers.SpectralNormalization(dense, iteration=200, norm_multiplier=0.5)
    assert sn.power_iterations == 200
    sn.build((None, 5))
    sn.update_weights()
    norm = np.linalg.svd(dense.kernel.numpy(), compute_uv=False).max()
    assert norm == pytest.approx(0.5, abs=1e-3)


def test_mean_field_logits_covmat_and_likelihoods():
    logits = np.arange(6, dtype=np.float32).reshape(3, 2)
    covmat = tf.linalg.diag(tf.constant([0.5, 1.0, 2.0]))
    variance = np.array([0.5, 1.0, 2.0], np.float32)[:, None]
    np.testing.assert_allclose(ed.layers.utils.mean_field_logits(logits, covmat, 2.0),
                               logits / np.sqrt(1 + 2.0 * variance), rtol=1e-6)
    np.testing.assert_allclose(
        ed.layers.utils.mean_field_logits(logits, covmat, 2.0, likelihood="poisson"),
        logits * np.exp(variance), rtol=1e-6)
    np.testing.assert_array_equal(ed.layers.utils.mean_field_logits(logits, None, -1), logits)
    with pytest.raises(ValueError, match="likelihood"):
        bl.mean_field_logits(logits, 1.0, likelihood="gamma")


def test_exponentiated_quadratic_variance_lengthscale():
    kernel = ed.layers.gaussian_process.ExponentiatedQuadratic(variance=4.0, lengthscale=2.0)
    x = np.array([[0.0], [2.0]], np.float32)
    expected = 4.0 * np.exp(-np.array([[0.0, 1.0], [1.0, 0.0]]) / 2)
    np.testing.assert_allclose(kernel(x, x).numpy(), expected, rtol=1e-5)
    assert float(kernel.variance) == pytest.approx(4.0)


def test_empirical_bayes_has_edward2_hyperprior():
    reg = ed.regularizers.NormalEmpiricalBayesKLDivergence()
    assert (reg.variance_concentration, reg.variance_scale) == (2.01, 0.101)
    assert bl.NormalEmpiricalBayesKLDivergence().variance_concentration is None


def test_runner_aliases_edward2(tmp_path):
    """The runner's import hook makes `import edward2` this module, and counts outcomes."""
    path = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "edward2_tests.py"
    spec = importlib.util.spec_from_file_location("edward2_tests_runner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    package = tmp_path / "edward2" / "tensorflow"
    (package / "layers").mkdir(parents=True)
    (package / "constraints_test.py").write_text(
        "import edward2 as ed\n"
        "import edward2.tensorflow\n"
        "def test_alias():\n"
        "    import bayes_planet.compat.edward2 as compat\n"
        "    assert ed is compat and edward2.tensorflow is compat\n"
        "def test_fails():\n"
        "    assert ed.layers.DenseRank1(2).ensemble_size == 4\n")
    records, _, output = module.run(module.test_files(module.edward2_package(tmp_path)),
                                    sys.executable)
    outcomes = {r["test"]: r["outcome"] for r in records}
    assert outcomes == {"test_alias": "passed", "test_fails": "failed"}, output
    counts = module.summarize(records)
    assert counts[None]["passed"] == 1 and counts["constraints_test.py"]["failed"] == 1
