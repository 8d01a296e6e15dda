"""`layer_overhead` on several interpreters (e.g. Keras 2 on TF 2.15, Keras 3 on TF 2.21),
alternating whole processes A B A B, and one table of each stack's median ratio.

A ratio (a layer's train step ÷ the Keras twin's) is measured inside one process, interleaved,
so it is comparable across stacks even where absolute times are not; the table gives each
stack's median over rounds (range in parentheses), their quotient and the median step times::

    python -m benchmarks.overhead_across_stacks --python keras2=python \\
        --python keras3=/path/to/venv-k3/bin/python --rounds 3 --out runs/overhead_stacks
    python -m benchmarks.overhead_across_stacks --python ... --rounds 2 --out DIR -- --ensemble
    python -m benchmarks.overhead_across_stacks --summarize DIR   # the table of saved reports

Each report is saved as ``<out>/<label>_<round>.md`` (stderr beside it), with the load average
before and after each process in ``<out>/runs.log``.
"""

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
from collections import defaultdict

from bayes_planet.run_dirs import OutputDirError, check_output_dir

_ROW = re.compile(r"^\| (?P<layer>.+?) \| (?:(?P<input>[a-z ]+) \| )?(?P<ms>[\d.]+) \| "
                  r"(?P<ratio>[\d.]+)× \|")


def _load():
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def run(pythons, rounds, out, extra):
    """``rounds`` rounds of every interpreter in turn; returns the saved report paths."""
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "runs.log").open("a")
    for round_ in range(1, rounds + 1):
        for label, python in pythons:
            report = out / f"{label}_{round_}.md"
            log.write(f"{label} round {round_}: load before {_load()}\n")
            log.flush()
            with report.open("w") as stdout, (out / f"{label}_{round_}.err").open("w") as err:
                status = subprocess.call([python, "-m", "benchmarks.layer_overhead", *extra],
                                         stdout=stdout, stderr=err)
            log.write(f"{label} round {round_}: exit {status}, load after {_load()}\n")
            log.flush()
            if status:
                raise SystemExit(f"{python} -m benchmarks.layer_overhead failed (exit {status}); "
                                 f"see {out / f'{label}_{round_}.err'}")


def read_reports(directory):
    """``{(section, row): {label: [(ratio, ms), ...]}}`` and ``{label: [header lines]}``."""
    rows = defaultdict(lambda: defaultdict(list))
    headers = defaultdict(list)
    for path in sorted(pathlib.Path(directory).glob("*_*.md")):
        label = path.stem.rsplit("_", 1)[0]
        section = None
        for line in path.read_text().splitlines():
            if line.startswith("TF "):
                headers[label].append(line)
            elif line.startswith("### "):
                section = line[4:]
            elif section and (m := _ROW.match(line)):
                row = m["layer"] + (f", {m['input']}" if m["input"] else "")
                rows[(section, row)][label].append((float(m["ratio"]), float(m["ms"])))
    return rows, headers


def summarize(directory):
    rows, headers = read_reports(directory)
    if not rows:
        raise SystemExit(f"No layer_overhead reports (<label>_<round>.md) in {directory}")
    labels = sorted(headers)
    lines = [f"{label}: {len(headers[label])} rounds; {headers[label][0]}" for label in labels]
    section = None
    for (sec, row), by in rows.items():
        if sec != section:
            section = sec
            lines += ["", f"### {sec}", "",
                      "| layer | " + " | ".join(f"{lb} ÷ Keras" for lb in labels)
                      + (f" | {labels[1]} / {labels[0]}" if len(labels) == 2 else "")
                      + " | step ms " + " / ".join(labels) + " |",
                      "|---|" + "---:|" * (len(labels) + (len(labels) == 2) + 1)]
        cells, medians, steps = [], [], []
        for label in labels:
            values = by.get(label, [])
            if not values:
                cells.append("—")
                medians.append(None)
                steps.append("—")
                continue
            ratios = [r for r, _ in values]
            medians.append(statistics.median(ratios))
            cells.append(f"{medians[-1]:.2f}× ({min(ratios):.2f}–{max(ratios):.2f})")
            steps.append(f"{statistics.median(ms for _, ms in values):.2f}")
        quotient = ([f"{medians[1] / medians[0]:.2f}" if None not in medians else "—"]
                    if len(labels) == 2 else [])
        lines.append(f"| {row} | " + " | ".join(cells + quotient) + " | "
                     + " / ".join(steps) + " |")
    return "\n".join(lines)


def _python(value):
    label, sep, python = value.partition("=")
    if not sep or not label or not python or "_" in label:
        raise argparse.ArgumentTypeError(
            f"Expected LABEL=INTERPRETER (a label without '_'). Received: --python {value!r}")
    return label, python


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", type=_python, action="append", default=[],
                        help="LABEL=INTERPRETER; give one per stack, in the order they alternate")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--summarize", type=pathlib.Path, metavar="DIR",
                        help="only print the table of the reports saved in DIR")
    parser.add_argument("extra", nargs="*", help="arguments of layer_overhead (after --)")
    args = parser.parse_args(argv)
    if args.summarize:
        print(summarize(args.summarize))
        return
    if len(args.python) < 2 or args.out is None:
        parser.error("Expected at least two --python LABEL=INTERPRETER and --out. "
                     f"Received: --python {[p for p, _ in args.python]}, --out {args.out}")
    if args.rounds < 1:
        parser.error(f"Expected a positive integer. Received: rounds={args.rounds}")
    try:
        check_output_dir("--out", args.out)
    except OutputDirError as e:
        parser.error(str(e))
    run(args.python, args.rounds, args.out, args.extra)
    print(summarize(args.out))


if __name__ == "__main__":
    sys.exit(main())
