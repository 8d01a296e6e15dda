"""The README and the docs say what the code does: their Python examples run as they are on
the installed stack, their relative links and anchors resolve, and the configuration page
names every key of the agent's YAML (whose values it includes, not copies)."""

import pathlib
import re
import unicodedata

import numpy as np
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# The pages whose ```python blocks are complete programs (the others show fragments).
RUNNABLE = ("README.md", "docs/api_tour.md", "docs/ensembles_and_priors.md")


def _python_blocks(path):
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), re.S | re.M)


@pytest.mark.parametrize("page", RUNNABLE)
def test_the_examples_run_as_written(page, tmp_path, monkeypatch):
    blocks = _python_blocks(ROOT / page)
    assert blocks, f"{page} has no python block"
    monkeypatch.chdir(tmp_path)  # the examples save models into the working directory
    for block in blocks:
        namespace = {"__name__": "__docs__"}
        exec(compile(block, page, "exec"), namespace)  # noqa: S102
        _check_claims(page, namespace)


def _check_claims(page, ns):
    """What the examples' comments promise."""
    import bayes_planet.layers as bl

    if page == "README.md":  # the reloaded posterior mean predicts what the trained one does
        with bl.posterior_mean(ns["model"]):
            expected = ns["model"](ns["x"])
        np.testing.assert_allclose(np.asarray(ns["logits"]), np.asarray(expected), atol=1e-5)
    if page == "docs/api_tour.md":  # one weight sample for every call inside fixed_noise
        np.testing.assert_array_equal(np.asarray(ns["first"]), np.asarray(ns["again"]))


def _slug(text):
    """Python-Markdown's `toc` slug (MkDocs' heading ids)."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(path):
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#{1,6} (.+?)\s*$", text, re.M)
    return {_slug(re.sub(r"`", "", heading)) for heading in headings}


def test_the_readme_links_resolve():
    """Every relative link of the README names a file or folder that exists, and every
    `#anchor` into a page a heading of it (mkdocs checks the site's own links)."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    relative = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert relative
    for link in relative:
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else ROOT / "README.md"
        assert path.exists(), f"README links to {link}: no such file"
        if anchor:
            assert anchor in _anchors(path), f"README links to {link}: no such heading"


def _configuration_page():
    return (DOCS / "configuration.md").read_text()


def _included_yaml():
    paths = re.findall(r'^--8<-- "([^"]+)"$', _configuration_page(), re.M)
    assert len(paths) == 1, paths
    return ROOT / paths[0]


def _keys(mapping, prefix=""):
    for key, value in mapping.items():
        if isinstance(value, dict):
            yield from _keys(value, f"{prefix}{key}.")
        else:
            yield prefix + key


def test_the_configuration_page_names_every_key():
    """Each key of the defaults has a row (its first column names it), no row names a key
    that is not there, and the values come only from the included file."""
    defaults = set(_keys(yaml.safe_load(_included_yaml().read_text())["defaults"]))
    tables = re.findall(r"^\| key \| what it does \|\n\|---\|---\|\n((?:\|.*\n)+)",
                        _configuration_page(), re.M)
    assert len(tables) >= 8, "one table of keys per section"
    rows = [row.split(" | ")[0] for table in tables for row in table.splitlines()]
    named = {name for row in rows for name in re.findall(r"`([a-z_.]+)`", row)}
    assert named - defaults == set(), "rows for keys the YAML does not have"
    assert defaults - named == set(), "keys of the YAML without a row"


def test_the_configuration_page_includes_the_agents_yaml():
    from bayes_planet.agent import config as config_lib  # the agent extra

    assert _included_yaml().resolve() == config_lib._PATH.resolve()
