"""benchmarks/uncertainty.py: the quick preset end to end, config validation, goal checks,
the ensembles' predictive."""

import itertools
import json
import math
import re

import numpy as np
import pytest
import tensorflow_probability as tfp

import bayes_planet.layers as bl
from bayes_planet import layer_registry
from bayes_planet._keras import keras
from bayes_planet.layers import regularizers
from bayes_planet.uncertainty import metrics as uncertainty_metrics
from bayes_planet.yaml_config import ConfigError
from benchmarks import uncertainty, uncertainty_models

NEW_MODELS = ("rank1", "batch_ensemble", "deep_ensemble", "mc_dropout", "sngp")


def test_quick_preset_runs_every_family(tmp_path):
    results = uncertainty.main(["--quick", "--out", str(tmp_path),
                                "--set", "models=[deterministic,flipout,tfp_flipout]"])
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["tasks"].keys() == results["tasks"].keys()
    assert set(results["tasks"]) == {"mlp/digits", "mlp/diabetes", "cnn/digits",
                                     "lstm/sinusoids", "transformer/mod_sum"}
    digits = results["tasks"]["mlp/digits"]["models"]
    assert set(digits) == {"deterministic", "flipout", "tfp_flipout"}
    # tfp.layers have no recurrent/attention twin: those families skip it.
    assert "tfp_flipout" not in results["tasks"]["lstm/sinusoids"]["models"]
    for name, entry in digits.items():
        m = entry["mean"]
        assert 0.0 <= m["accuracy"] <= 1.0 and m["nll"] > 0 and 0.0 <= m["ece"] <= 1.0
        for ood in ("rotated_90", "noisy", "uniform"):
            assert 0.0 <= m[f"auroc_epistemic_{ood}"] <= 1.0
        if name == "deterministic":  # no weight samples: zero mutual information
            assert m["mutual_info"] == 0.0 and m["auroc_epistemic"] == 0.5
    diabetes = results["tasks"]["mlp/diabetes"]["models"]["flipout"]["mean"]
    assert diabetes["rmse"] > 0 and 0.0 <= diabetes["coverage_90"] <= 1.0
    assert set(results["goals"]["mlp/diabetes"]["flipout"]) == {
        "nll", "rmse", "coverage", "beats_tfp"}
    for task in ("mlp_digits", "cnn_digits", "lstm_sinusoids", "transformer_mod_sum"):
        assert (tmp_path / f"reliability_{task}.png").stat().st_size > 0
    assert "**Goals**" in (tmp_path / "summary.md").read_text()


def test_goal_check_compares_with_the_deterministic_twin_and_tfp():
    def entry(**m):
        return {"mean": m}

    results = {"tasks": {"mlp/x": {"models": {
        "deterministic": entry(accuracy=0.90, nll=0.30, ece=0.02),
        "tfp_flipout": entry(accuracy=0.90, nll=0.35, ece=0.05),
        "flipout": entry(accuracy=0.895, nll=0.29, ece=0.03),
        "reparameterization": entry(accuracy=0.88, nll=0.31, ece=0.04)}}}}
    goals = uncertainty.check_goals(results)["mlp/x"]
    assert goals["flipout"] == {"nll": True, "ece": True, "accuracy": True, "beats_tfp": True}
    assert goals["reparameterization"] == {"nll": False, "ece": False, "accuracy": False,
                                           "beats_tfp": True}


def test_config_refuses_unknown_tasks_models_and_empty_seeds():
    with pytest.raises(ConfigError, match="cnn/wine"):
        uncertainty.load_config([], ["tasks=[cnn/wine]"])
    with pytest.raises(ConfigError, match="dropout_everywhere"):
        uncertainty.load_config([], ["models=[dropout_everywhere]"])
    with pytest.raises(ConfigError, match="seeds"):
        uncertainty.load_config(["quick"], ["seeds=[]"])


def test_quick_preset_rows_of_the_ensembles_mc_dropout_and_sngp(tmp_path):
    results = uncertainty.main(["--quick", "--out", str(tmp_path),
                                "--set", "tasks=[mlp/digits,mlp/diabetes]",
                                "--set", f"models=[{','.join(NEW_MODELS)}]"])
    config = results["config"]
    size, hidden = config["ensemble_size"], config["families"]["mlp"]["hidden"]
    digits = results["tasks"]["mlp/digits"]["models"]
    diabetes = results["tasks"]["mlp/diabetes"]["models"]
    # The twin runs first, unasked: the ratios' reference. SNGP is classification only.
    assert list(digits) == ["deterministic", *NEW_MODELS]
    assert list(diabetes) == ["deterministic", *NEW_MODELS[:-1]]
    for task, models in (("digits", digits), ("diabetes", diabetes)):
        for name, entry in models.items():
            m = entry["mean"]
            assert all(math.isfinite(v) for v in m.values()), (task, name, m)
            assert m["train_time_ratio"] > 0 and m["param_ratio"] > 0
        assert models["deterministic"]["mean"]["train_time_ratio"] == 1.0
        assert models["deterministic"]["mean"]["param_ratio"] == 1.0
        # Parameter counts in closed form: 4 twins; the twin's weights; BatchEnsemble's
        # shared kernels plus E input factors, E output factors and E biases per layer.
        assert models["deep_ensemble"]["mean"]["param_ratio"] == size
        assert models["mc_dropout"]["mean"]["param_ratio"] == 1.0
        widths = [64 if task == "digits" else 10, *hidden, 10 if task == "digits" else 2]
        twin = sum(i * o + o for i, o in itertools.pairwise(widths))
        batch_ensemble = sum(i * o + size * (i + 2 * o) for i, o in itertools.pairwise(widths))
        assert models["batch_ensemble"]["mean"]["param_ratio"] == pytest.approx(
            batch_ensemble / twin, rel=1e-12)
    for name in ("rank1", "batch_ensemble", "deep_ensemble", "mc_dropout"):
        # Members (MC draws) disagree: epistemic uncertainty, unlike one deterministic pass.
        assert digits[name]["mean"]["mutual_info"] > 0
        assert diabetes[name]["mean"]["epistemic_std"] > 0
    assert digits["sngp"]["mean"]["mutual_info"] == 0.0  # one (mean-field) pass
    summary = (tmp_path / "summary.md").read_text()
    assert "time ÷ twin" in summary and "params ÷ twin" in summary


def _regression_data(num=32, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num, dim)).astype(np.float32)
    y = rng.standard_normal(num).astype(np.float32)
    return {"x_train": x, "y_train": y, "x_test": x, "y_test": y, "y_scale": 1.0}


@pytest.mark.parametrize("name", ["deep_ensemble", "batch_ensemble"])
def test_ensemble_regression_predictive_is_the_members_gaussian_mixture(name):
    """The benchmark's regression predictive of an ensemble = the uniform mixture of its
    members' Gaussians: moments vs tfd.Mixture, NLL vs its log_prob, mean vs bl's average."""
    config = uncertainty.load_config(["quick"])
    data = _regression_data()
    keras.utils.set_random_seed(0)
    model = uncertainty_models.build_model("mlp", name, data, config["families"]["mlp"], 0,
                                           config)
    outs = uncertainty_models.sample_outputs(model, name, {"test": data["x_test"]},
                                             config["mc_samples"])["test"]
    assert outs.shape == (config["ensemble_size"], len(data["x_test"]), 2)
    if isinstance(model, bl.DeepEnsemble):  # Member i's own output.
        for member, out in zip(model.members, outs, strict=True):
            np.testing.assert_allclose(out, member(data["x_test"]).numpy(), rtol=1e-6)
    means, scales = uncertainty.gaussian_head(outs)
    mean, std = uncertainty.mixture_moments(means, scales)
    tfd = tfp.distributions
    mixture = tfd.Mixture(
        tfd.Categorical(logits=np.zeros((len(mean), len(means)))),
        [tfd.Normal(m, s) for m, s in zip(means, scales, strict=True)])
    # float64 throughout: agreement to rounding.
    np.testing.assert_allclose(mean, mixture.mean().numpy(), rtol=1e-10)
    np.testing.assert_allclose(std, mixture.stddev().numpy(), rtol=1e-10)
    nll = -np.mean(mixture.log_prob(data["y_test"].astype(np.float64)).numpy())
    result = uncertainty_metrics.regression_metrics(means, scales, data["y_test"])
    assert result["nll"] == pytest.approx(nll, rel=1e-10)
    # bl's averaged output ('mean') averages the members' means: the mixture's mean.
    np.testing.assert_allclose(model(data["x_test"]).numpy()[:, 0], mean, rtol=1e-5,
                               atol=1e-6)


def _softmax(logits):
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def test_ensemble_classification_predictive_is_ensemble_models_average():
    """The members' mean probabilities are bl.EnsembleModel's own predictive (softmax of
    its log-mean-exp logits)."""
    config = uncertainty.load_config(["quick"])
    data = _regression_data()
    data.pop("y_scale")
    data["y_train"] = data["y_test"] = np.arange(len(data["x_train"])) % 3
    keras.utils.set_random_seed(0)
    model = uncertainty_models.build_model("mlp", "batch_ensemble", data,
                                           config["families"]["mlp"], 0, config)
    assert isinstance(model, bl.EnsembleModel)
    outs = uncertainty_models.sample_outputs(model, "batch_ensemble", {"x": data["x_test"]},
                                             config["mc_samples"])["x"]
    probs = _softmax(outs).mean(0)
    expected = _softmax(np.asarray(model(data["x_test"])))
    np.testing.assert_allclose(probs, expected, rtol=1e-5, atol=1e-7)
    assert np.abs(outs[0] - outs[1]).max() > 1e-3  # the members differ


class _EnsembleCell(keras.layers.LSTMCell):
    """A stand-in ensemble cell: the LSTM cell with an ``ensemble_size`` argument."""

    def __init__(self, units, *, ensemble_size, **kwargs):
        super().__init__(units, **kwargs)
        self.ensemble_size = ensemble_size


def test_ensemble_rows_follow_the_registry():
    """A network gets an ensemble row once all its families' ``*_ensemble`` layers are
    registered (here a stand-in batch_ensemble LSTM cell), built from the registry."""
    config = uncertainty.load_config(["quick"])
    assert "batch_ensemble" not in uncertainty_models.family_models("lstm")
    layer_registry.register("lstm_cell_ensemble", "batch_ensemble", _EnsembleCell)
    try:
        assert "batch_ensemble" in uncertainty_models.family_models("lstm")
        cell = uncertainty_models.Layers("batch_ensemble", 0, 10, config).cell("lstm", 3)
        assert isinstance(cell, _EnsembleCell) and cell.ensemble_size == config["ensemble_size"]
    finally:
        layer_registry.unregister("lstm_cell_ensemble", "batch_ensemble")
    assert "batch_ensemble" not in uncertainty_models.family_models("lstm")


@pytest.mark.parametrize("family", ["mlp", "lstm", "transformer"])
def test_factor_settings_reach_every_factor_of_the_ensemble_layers(family):
    """``factor_initializers.rank1`` and ``factor_regularizers.rank1`` (--set overrides) are
    every rank-1 factor's posterior and prior — the LSTM's recurrent factors and the
    transformer's blocks included: with the near-1 start every mean is ~ N(1, 0.5²) (moments,
    4 standard errors; the default's are ±1); ``batch_ensemble`` keeps its default (±1)."""
    config = uncertainty.load_config(["quick"], [
        "factor_initializers.rank1=trainable_rank1_normal",
        "factor_regularizers.rank1=rank1_normal_kl_divergence"])
    assert config["factor_initializers"]["batch_ensemble"] is None
    if family == "mlp":
        data = _regression_data()
    elif family == "lstm":
        data = {"x_train": np.zeros((8, 5, 2), np.float32), "y_train": np.arange(8) % 3,
                "x_test": np.zeros((8, 5, 2), np.float32), "y_test": np.arange(8) % 3}
    else:
        data = {"x_train": np.zeros((8, 4), np.int64), "y_train": np.arange(32) % 3,
                "x_test": np.zeros((8, 4), np.int64), "y_test": np.arange(32) % 3}
    keras.utils.set_random_seed(0)
    for model_name in ("rank1", "batch_ensemble"):
        if model_name not in uncertainty_models.family_models(family):
            continue
        model = uncertainty_models.build_model(family, model_name, data,
                                               config["families"][family], 0, config)
        model(data["x_train"])
        # rank-1: ".../[recurrent_]alpha[/<initializer name>]/mean"; BatchEnsemble: ".../alpha".
        pattern = re.compile(r"/(recurrent_)?(alpha|gamma)(/(.+/)?mean)?(:0)?$")
        factors = [w for w in model.weights if pattern.search(getattr(w, "path", w.name))]
        assert factors, model_name
        if family == "lstm":
            assert any("recurrent_" in getattr(w, "path", w.name) for w in factors)
        values = np.concatenate([w.numpy().ravel() for w in factors])
        if model_name == "batch_ensemble":
            np.testing.assert_allclose(np.abs(values), 1.0, atol=1e-6, err_msg=model_name)
            continue
        assert abs(values.mean() - 1.0) < 4 * 0.5 / np.sqrt(values.size), values.mean()
        assert abs(values.std() - 0.5) < 4 * 0.5 / np.sqrt(2 * values.size), values.std()
        priors = regularizers.kl_regularizers(model)  # rank-1 kernels have none
        assert priors and all(
            type(r) is bl.Rank1NormalKLDivergence for r in priors), priors


def test_recalibration_holds_out_data_and_fits_one_scalar_per_model(tmp_path, monkeypatch):
    """``recalibration=0.2``: every model trains on 80 % of the training set (the dataset
    size its KL sees) and reports the temperature / std scale fitted on the rest."""
    sizes = []
    fit = uncertainty_models.fit

    def recording_fit(model, data, *args, **kwargs):
        sizes.append((len(data["x_train"]), len(data.get("x_val", ()))))
        return fit(model, data, *args, **kwargs)

    monkeypatch.setattr(uncertainty_models, "fit", recording_fit)
    results = uncertainty.main(["--quick", "--out", str(tmp_path), "--set", "recalibration=0.2",
                                "--set", "tasks=[mlp/digits,mlp/diabetes]",
                                "--set", "models=[deterministic,flipout]"])
    full = len(uncertainty.load_data("mlp", "digits", 0, results["config"]["datasets"])["x_train"])
    assert sizes[0] == (full - round(0.2 * full), round(0.2 * full))
    for task, key in (("mlp/digits", "temperature"), ("mlp/diabetes", "std_scale")):
        for name, entry in results["tasks"][task]["models"].items():
            value = entry["per_seed"][0][key]
            assert 0.01 <= value <= 100 and value != 1.0, (task, name, value)
    assert "temperature" in (tmp_path / "summary.md").read_text()
    with pytest.raises(ConfigError, match="recalibration: .* received 1.5"):
        uncertainty.load_config([], ["recalibration=1.5"])
    with pytest.raises(ConfigError, match="received True"):
        uncertainty.load_config([], ["recalibration=true"])


def test_hold_out_is_a_seeded_disjoint_split():
    data = {"x_train": np.arange(50.0)[:, None], "y_train": np.arange(50), "x_test": None}
    a, b = uncertainty.hold_out(data, 0.2, 3), uncertainty.hold_out(data, 0.2, 3)
    assert len(a["x_val"]) == 10 and len(a["x_train"]) == 40
    assert sorted(np.concatenate([a["y_train"], a["y_val"]]).tolist()) == list(range(50))
    np.testing.assert_array_equal(a["y_val"], b["y_val"])
    assert not np.array_equal(uncertainty.hold_out(data, 0.2, 4)["y_val"], a["y_val"])
    np.testing.assert_array_equal(a["x_train"][:, 0], a["y_train"])  # pairs kept together


@pytest.mark.parametrize("family", ["mlp", "cnn"])
def test_mc_dropout_has_a_dropout_after_every_block(family):
    """One MCDropout per hidden block in the swapped twin, on both stacks (a single Dropout
    instance reused in every block became one dropout on Keras 2 and two on Keras 3)."""
    config = uncertainty.load_config(["quick"], ["families.mlp.hidden=[4, 4]",
                                                 "families.cnn.filters=[2, 2]"])
    data = (_regression_data() if family == "mlp" else
            {"x_train": np.zeros((8, 8, 8, 1), np.float32), "y_train": np.arange(8) % 3,
             "x_test": np.zeros((8, 8, 8, 1), np.float32), "y_test": np.arange(8) % 3})
    model = uncertainty_models.build_model(family, "mc_dropout", data,
                                           config["families"][family], 0, config)
    drops = [layer for layer in model.inner.layers if isinstance(layer, bl.MCDropout)]
    assert len(drops) == 2 and drops[0] is not drops[1]
