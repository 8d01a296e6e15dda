"""Run edward2's own TensorFlow tests against `bayes_planet.compat.edward2`.

edward2's test files (``edward2/tensorflow/layers/*_test.py``, ``initializers_test.py``,
``regularizers_test.py``, ``constraints_test.py``) are the measure of the compat module: an
edward2 user's code is written against the same names, arguments and defaults. The script
copies the chosen test files from an edward2 checkout into a temporary folder, writes a
``conftest.py`` there whose import hook makes ``import edward2`` (and ``edward2.<sub>``)
return `bayes_planet.compat.edward2` (and its submodules), runs pytest on them in a
subprocess and prints passed / failed / error counts per file and the failing tests. Run::

    python experiments/edward2_tests.py --edward2 /tmp/edward2
    python experiments/edward2_tests.py --edward2 /tmp/edward2 --files dense_test.py -k Rank1
    /tmp/venv-k3/bin/python experiments/edward2_tests.py --edward2 /tmp/edward2  # Keras 3

``--edward2`` is a checkout of github.com/google/edward2 (its root, or the ``edward2``
package inside it); nothing of it is copied into this repository. The pytest subprocess runs
with the interpreter of the script (``--python`` for another) and this checkout first on
``PYTHONPATH``. ``--json PATH`` writes every test's outcome and message. On Keras 3 the
conftest also makes ``tf.keras.backend.set_learning_phase`` a no-op and gives ``tf.keras.losses``
its ``mean_squared_error`` (Keras 2 calls of edward2's tests, not of the module measured),
unless ``--no-keras3-shims``.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

REPO = pathlib.Path(__file__).resolve().parents[1]

#: The edward2 test files that measure the compat module, relative to ``edward2/tensorflow``.
DEFAULT_GLOBS = ("layers/*_test.py", "initializers_test.py", "regularizers_test.py",
                 "constraints_test.py")

CONFTEST = '''\
"""Written by experiments/edward2_tests.py: ``edward2`` is bayes_planet.compat.edward2."""

import importlib
import importlib.abc
import importlib.util
import sys

TARGET = "bayes_planet.compat.edward2"


class _Edward2Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``edward2`` and ``edward2.<sub>`` and returns TARGET's module of that name."""

    def find_spec(self, name, path=None, target=None):
        if name == "edward2" or name.startswith("edward2."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        # edward2.tensorflow.<sub> is edward2.<sub> (``import edward2`` is its TF backend).
        parts = spec.name.split(".")[1:]
        if parts[:1] == ["tensorflow"]:
            parts = parts[1:]
        module = importlib.import_module(".".join([TARGET, *parts]))
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._spec  # The aliased module keeps its own spec.


sys.meta_path.insert(0, _Edward2Alias())
'''

#: Appended to the conftest unless ``--no-keras3-shims``: on Keras 3, the Keras 2 calls of
#: edward2's tests themselves (not of the module measured): ``set_learning_phase`` as a no-op,
#: ``tf.keras.losses.mean_squared_error`` as Keras 3's function.
KERAS3_SHIMS = '''

import tensorflow as tf

if not hasattr(tf.keras.backend, "set_learning_phase"):  # Keras 3 has no global phase.
    tf.keras.backend.set_learning_phase = lambda value: None
if not hasattr(tf.keras.losses, "mean_squared_error"):  # Keras 3's tf.keras namespace
    import keras

    tf.keras.losses.mean_squared_error = keras.losses.mean_squared_error
'''

PYTEST_INI = """\
[pytest]
python_files = *_test.py
addopts = -p no:cacheprovider -p no:randomly -p no:benchmark
filterwarnings = ignore::DeprecationWarning
"""


def edward2_package(path):
    """The ``edward2`` package folder of a checkout (its root or the package itself)."""
    path = pathlib.Path(path).resolve()
    for candidate in (path / "edward2", path):
        if (candidate / "tensorflow" / "layers").is_dir():
            return candidate
    raise SystemExit(f"expected an edward2 checkout (edward2/tensorflow/layers). "
                     f"Received: --edward2 {path}")


def test_files(package, names=None):
    """The test files under ``package/tensorflow``: the defaults, or those named in ``names``
    (basenames such as ``dense_test.py`` or paths relative to ``edward2/tensorflow``)."""
    root = package / "tensorflow"
    files = sorted({p for pattern in DEFAULT_GLOBS for p in root.glob(pattern)})
    if not names:
        return files
    chosen = []
    for name in names:
        matches = [p for p in files if p.name == name or str(p.relative_to(root)) == name]
        if not matches:
            raise SystemExit(f"no edward2 test file {name!r} under {root}")
        chosen += matches
    return chosen


def run(files, python, keyword=None, extra=(), keras3_shims=True):
    """Runs pytest on copies of ``files``; returns ``(records, returncode, stdout)``."""
    with tempfile.TemporaryDirectory(prefix="edward2_tests_") as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "conftest.py").write_text(CONFTEST + (KERAS3_SHIMS if keras3_shims else ""))
        (tmp / "pytest.ini").write_text(PYTEST_INI)
        for f in files:
            shutil.copy(f, tmp / f.name)
        report = tmp / "report.xml"
        command = [python, "-m", "pytest", "-q", "-rN", "--continue-on-collection-errors",
                   f"--junitxml={report}",
                   "-o", "junit_family=xunit1", *[f.name for f in files]]
        if keyword:
            command += ["-k", keyword]
        command += list(extra)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        proc = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True)
        records = parse_report(report, [f.stem for f in files]) if report.exists() else []
        return records, proc.returncode, proc.stdout + proc.stderr


def parse_report(report, modules):
    """``[{file, test, outcome, message}]`` from pytest's JUnit XML (xunit1)."""
    records = []
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        module = next((m for m in modules if classname == m or classname.startswith(m + ".")),
                      classname or case.get("file", "?"))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or node.text or "").strip()
                break
        if outcome == "error" and not classname:  # A file that failed to import.
            outcome = "module error"
            module = case.get("name", module).split(".")[-1]
        records.append({"file": module + ".py", "test": case.get("name", ""),
                        "outcome": outcome, "message": message.splitlines()[0][:300]
                        if message else ""})
    return records


OUTCOMES = ("passed", "failed", "error", "skipped", "module error")


def summarize(records):
    """Per-file counts of each outcome, and the totals (``None`` key)."""
    counts = {}
    for r in records:
        for key in (r["file"], None):
            counts.setdefault(key, dict.fromkeys(OUTCOMES, 0))[r["outcome"]] += 1
    return counts


def print_report(records, out=sys.stdout):
    counts = summarize(records)
    width = max([len(k) for k in counts if k] + [5])
    print(f"{'file':<{width}}  " + "  ".join(f"{o:>7}" for o in OUTCOMES), file=out)
    for key in sorted(k for k in counts if k) + [None]:
        row = counts[key]
        print(f"{key or 'total':<{width}}  " + "  ".join(f"{row[o]:>7}" for o in OUTCOMES),
              file=out)
    failures = [r for r in records if r["outcome"] in ("failed", "error", "module error")]
    if failures:
        print(f"\n{len(failures)} not passing:", file=out)
        for r in failures:
            print(f"  {r['file']}::{r['test']} [{r['outcome']}] {r['message']}", file=out)
    total = counts.get(None, dict.fromkeys(OUTCOMES, 0))
    n = sum(total.values()) - total["skipped"]  # tf.test.TestCase's own skipped test_session
    if n:
        print(f"\n{total['passed']} passed of {n} run ({100 * total['passed'] / n:.1f} %; "
              f"{total['skipped']} skipped)", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edward2", required=True, help="an edward2 checkout")
    parser.add_argument("--files", nargs="*", help="test files (basenames or paths relative "
                        "to edward2/tensorflow); default: " + ", ".join(DEFAULT_GLOBS))
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter of the pytest run (default: this one)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--json", help="write every test's outcome and message here")
    parser.add_argument("--no-keras3-shims", action="store_true",
                        help="on Keras 3, leave the tests' Keras 2 calls (set_learning_phase, "
                        "losses.mean_squared_error) failing")
    parser.add_argument("--show-output", action="store_true",
                        help="print pytest's own output as well")
    args, extra = parser.parse_known_args(argv)
    files = test_files(edward2_package(args.edward2), args.files)
    records, returncode, output = run(files, args.python, args.keyword, extra,
                                      keras3_shims=not args.no_keras3_shims)
    if args.show_output or not records:
        print(output)
    if not records:
        raise SystemExit(f"pytest produced no report (exit status {returncode})")
    print_report(records)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"python": args.python, "files": [f.name for f in files], "records": records,
             "counts": {k or "total": v for k, v in summarize(records).items()}}, indent=1))


if __name__ == "__main__":
    main()
