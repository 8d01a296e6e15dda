"""A `.keras` file of the library's classes names them ``bayes_planet.layers>ClassName``: the
module to import. Loaded in a fresh process that has not imported the library, Keras' error
prints those names, and importing the package they name makes the same load work. Files saved
under the former names (``bayes_planet>ClassName``) still load."""

import os
import pathlib
import zipfile

import numpy as np
import pytest

import bayes_planet.layers as bl
from bayes_planet.layers import KERAS3, keras
from bayes_planet.layers._registry import FORMER_PACKAGE, PACKAGE
from bayes_planet.layers.testing import mean_prediction, run_python

# Loads the file without importing bayes_planet, reads the package Keras' error names, imports
# it and loads again.
FRESH_LOAD = """
    import importlib, json, re, sys
    import numpy as np
    import keras
    directory = {directory!r}
    assert "bayes_planet" not in sys.modules
    try:
        keras.models.load_model(directory + "/model.keras")
    except Exception as error:  # Keras' own error: a TypeError naming the config
        message = f"{{type(error).__name__}}: {{error}}"
    else:
        raise AssertionError("loaded without the library")
    packages = sorted(set(re.findall(r"'registered_name': '([A-Za-z_][\\w.]*)>", message)))
    for package in packages:
        importlib.import_module(package)
    model = keras.models.load_model(directory + "/model.keras")
    x = np.load(directory + "/x.npy")
    with sys.modules["bayes_planet.layers"].posterior_mean(model):
        np.save(directory + "/reloaded.npy", np.asarray(model(x).distribution.mean()))
    print(json.dumps({{"message": message, "packages": packages}}))
"""


def _model():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).standard_normal((16, 3)).astype("float32")
    model = keras.Sequential([keras.Input((3,)), bl.DenseReparameterization(4, seed=1),
                              bl.Normal(seed=2)])
    model.compile("adam", loss=bl.negative_log_likelihood)
    model.fit(x, x[:, :2], epochs=1, verbose=0)
    return model, x


@pytest.mark.skipif(not KERAS3, reason="the fresh-process load is a Keras 3 check")
def test_the_error_names_the_package_that_makes_the_load_work(tmp_path):
    model, x = _model()
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    fresh = run_python(FRESH_LOAD.format(directory=str(tmp_path)), env)
    assert fresh["message"].startswith("TypeError: "), fresh["message"][:300]
    assert "Could not locate class 'DenseReparameterization'" in fresh["message"]
    assert f"'registered_name': '{PACKAGE}>DenseReparameterization'" in fresh["message"]
    assert fresh["packages"] == ["bayes_planet.layers"]
    np.testing.assert_array_equal(np.load(tmp_path / "reloaded.npy"), mean_prediction(model, x))


def _rewrite_registered_names(path, old, new):
    """Rewrites ``path`` (a .keras zip) with ``old`` registered-name packages as ``new``;
    returns how many names it replaced."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = members["config.json"].decode()
    count = config.count(f'"{old}>')
    members["config.json"] = config.replace(f'"{old}>', f'"{new}>').encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return count


def test_files_name_the_package_and_files_of_the_former_names_still_load(tmp_path):
    model, x = _model()
    path = pathlib.Path(tmp_path) / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        config = archive.read("config.json").decode()
    assert f'"{FORMER_PACKAGE}>' not in config
    # The layer, its posterior, constraint, prior, the output layer (and on Keras 3 the loss).
    assert _rewrite_registered_names(path, PACKAGE, FORMER_PACKAGE) >= 5
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(mean_prediction(loaded, x), mean_prediction(model, x))
    np.testing.assert_allclose(float(sum(loaded.losses)), float(sum(model.losses)), rtol=1e-7)


def test_every_class_is_registered_under_both_names_and_saved_under_the_package():
    registered = keras.saving.get_custom_objects()
    ours = {name.split(">", 1)[1]: obj for name, obj in registered.items()
            if name.startswith(f"{PACKAGE}>")}
    assert {"DenseReparameterization", "TrainableNormal", "NormalKLDivergence", "Normal",
            "negative_log_likelihood"} <= set(ours)
    for name, obj in ours.items():
        assert registered[f"{FORMER_PACKAGE}>{name}"] is obj, name
        assert keras.saving.get_registered_name(obj) == f"{PACKAGE}>{name}", name
    former = {name.split(">", 1)[1] for name in registered if name.startswith(f"{FORMER_PACKAGE}>")}
    assert former == set(ours)
