"""docs/porting_from_tfp.md: its Python blocks run as they are on the installed stack and do
what their comments say; the page is in the site's navigation and linked from its index."""

import pathlib
import re

import numpy as np
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "porting_from_tfp.md"


def _python_blocks():
    return re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(), re.S | re.M)


def test_the_page_has_its_two_examples():
    assert len(_python_blocks()) == 2


@pytest.mark.parametrize("index", [0, 1], ids=["keras_io_port", "tfp_defaults"])
def test_the_examples_run_as_written(index, tmp_path, monkeypatch):
    import bayes_planet.layers as bl

    monkeypatch.chdir(tmp_path)  # the first example saves a model into the working directory
    namespace = {"__name__": "__docs__"}
    exec(compile(_python_blocks()[index], str(PAGE), "exec"), namespace)  # noqa: S102
    if index == 0:
        losses = namespace["history"].history["loss"]
        assert losses[-1] < losses[0], losses               # it trains
        assert np.all(namespace["epistemic"] > 0)           # "> 0 for every example"
        assert np.all(namespace["aleatoric"] > 0)
        assert bool(namespace["same"])                     # identical after reload
        kernel = namespace["model"].layers[2].kernel
        assert type(kernel) is bl.TrainableFullCovarianceNormal
    else:
        stddevs = namespace["stddevs"]
        # softplus(-3) = 0.0486, jittered in raw space by a TruncatedNormal(0.1) (±0.2 at most).
        assert abs(np.exp(np.log(stddevs).mean()) / 0.04859 - 1) < 0.05
        assert stddevs.min() > 0.039 and stddevs.max() < 0.060
        means = namespace["layer"].kernel.loc().numpy()
        assert abs(means.std() - 0.1) < 0.03 and abs(means.mean()) < 0.05


def _pages(nav):
    """The page paths of an mkdocs ``nav`` (nested lists of ``{title: page or list}``)."""
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            yield from _pages(value) if isinstance(value, list) else [value]


def test_the_page_is_in_the_nav_and_linked_from_the_index():
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert "porting_from_tfp.md" in set(_pages(nav))
    assert "(porting_from_tfp.md)" in (ROOT / "docs" / "index.md").read_text()
