"""The README's pixel table on a machine with a GPU: train, archive, rewrite the score files.

    python experiments/gpu_pixels.py                    # 6 tasks x 3 seeds, 6 runs at a time
    python experiments/gpu_pixels.py --parallel 3       # fewer at once (GPU memory, CPU cores)
    python experiments/gpu_pixels.py --only cartpole-swingup/reparameterization

Four steps, each a subprocess, so that rerunning the same command resumes where a killed one
stopped:

1. **A GPU.** Stops with one line unless TensorFlow sees a GPU (``--allow-cpu`` goes on
   without one: the tests, or a CPU machine on purpose).
2. **Mixed precision where it pays.** `benchmarks.update_step` times one update of the grid's
   agent in float32 and with ``model.cnn_precision=mixed_bfloat16`` (alternating, ``--rounds``
   rounds of ``--steps`` steps) into ``<out>/precision.json``; bfloat16 is kept if its update
   takes at most ``--keep-below`` (0.9) of float32's. The file is read back on a rerun, so a
   resumed grid keeps the precision its runs started with.
3. **The grid** (``experiments/agents.py --preset <grid>``, default ``pixels``: the default
   agent from 64 x 64 pixels) with that precision in its overrides. Every run is one process;
   ``TF_FORCE_GPU_ALLOW_GROWTH`` lets them share the GPU.
4. **The results as data.** The grid's ``results.json`` (also after a failed run: the others
   count) is copied to ``--archive`` (``experiments/archive/pixels/<grid>_results.json``;
   the precision's timings beside it, ``<grid>_precision.json``),
   and ``experiments/scores.py`` rewrites ``scores/dmc_pixels/<task>.csv`` and the README's
   pixel table from the archive (``--no-scores``: not).

``model.cnn_precision`` is a compute setting, like the device: the score files file a run
under its method whatever the precision (`scores.NEUTRAL_KEYS`), and its recorded config
keeps which it was.
"""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

from bayes_planet import yaml_config
from bayes_planet.experiment import load_script

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
agents = load_script(HERE / "agents.py", "agents")
BFLOAT16 = "model.cnn_precision=mixed_bfloat16"


def gpu_names():
    """The GPUs TensorFlow sees, in a fresh process (this one never initializes devices)."""
    code = ("import json, tensorflow as tf; "
            "print(json.dumps([d.name for d in tf.config.list_physical_devices('GPU')]))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def variant_spec(base_presets, overrides):
    """The `benchmarks.agent_episode.parse_variant` spec of the grid's agent."""
    presets = ",".join(base_presets)
    if not presets:
        raise yaml_config.ConfigError("Expected a grid with base_presets (the benchmark's "
                                      "variant names them). Received: base_presets=[]")
    return ":".join([presets, *overrides])


def choose_precision(timings, keep_below):
    """``'mixed_bfloat16'`` if its update took at most ``keep_below`` of float32's, else
    ``'float32'``; ``timings`` is `benchmarks.update_step`'s JSON of two variants."""
    first, second = timings["variants"].values()
    ratio = second["update_s"] / first["update_s"]
    return "mixed_bfloat16" if ratio <= keep_below else "float32"


def measure_precision(config, path, rounds, steps, keep_below):
    """``(precision, timings)``: read back from ``path`` if it exists, else measured there."""
    if not path.exists():
        spec = variant_spec(config["base_presets"], config["overrides"])
        out = subprocess.run([sys.executable, "-m", "benchmarks.update_step", "--variants", spec,
                              f"{spec}:{BFLOAT16}", "--rounds", str(rounds), "--steps",
                              str(steps)], check=True, capture_output=True, text=True, cwd=ROOT)
        timings = json.loads(out.stdout)
        timings["precision"] = choose_precision(timings, keep_below)
        timings["keep_below"] = keep_below
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(timings, indent=1))
    timings = json.loads(path.read_text())
    return timings["precision"], timings


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--grid", default="pixels",
                        help="the agents.yaml preset(s) of the grid, comma-separated")
    parser.add_argument("--out", default=None, help="the grid's out (default: the preset's)")
    parser.add_argument("--parallel", type=int, default=None,
                        help="runs at once (default: the preset's)")
    parser.add_argument("--only", action="append", default=None, metavar="VARIANT",
                        help="train only this variant (agents.py --only)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="go on when TensorFlow sees no GPU")
    parser.add_argument("--rounds", type=int, default=3, help="benchmark rounds")
    parser.add_argument("--steps", type=int, default=5, help="benchmark steps per round")
    parser.add_argument("--keep-below", type=float, default=0.9,
                        help="keep bfloat16 if its update takes at most this share of float32's")
    parser.add_argument("--archive", default=None,
                        help="where results.json goes (default: experiments/archive/pixels/"
                             "<grid>_results.json)")
    parser.add_argument("--no-scores", action="store_true",
                        help="do not rewrite scores/ and the README's tables")
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "parallel"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"Expected a positive integer. Received: --{name.replace('_', '-')}="
                         f"{value}")
    if not 0 < args.keep_below:
        parser.error(f"Expected a positive share. Received: --keep-below={args.keep_below}")
    presets = args.grid.split(",")
    config = yaml_config.load_dict(agents.CONFIG_PATH, presets, [])
    out = pathlib.Path(args.out or config["out"])
    gpus = gpu_names()
    if not gpus and not args.allow_cpu:
        sys.exit("gpu_pixels.py: TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') "
                 "is empty); --allow-cpu runs the grid on the CPU")
    print(f"GPUs: {gpus or 'none (--allow-cpu)'}", flush=True)
    precision, timings = measure_precision(config, out / "precision.json", args.rounds,
                                           args.steps, args.keep_below)
    first, second = (v["update_s"] for v in timings["variants"].values())
    print(f"one update: float32 {first:.3f} s, mixed_bfloat16 {second:.3f} s "
          f"({second / first:.2f}x): {precision}", flush=True)
    overrides = [*config["overrides"], f"model.cnn_precision={precision}"]
    command = [sys.executable, str(HERE / "agents.py"), "--preset", args.grid, "--out", str(out),
               "--set", f"overrides={json.dumps(overrides)}"]
    if args.parallel is not None:
        command += ["--parallel", str(args.parallel)]
    for variant in args.only or []:
        command += ["--only", variant]
    env = dict(os.environ, TF_FORCE_GPU_ALLOW_GROWTH="true")
    trained = subprocess.run(command, cwd=ROOT, env=env).returncode
    results = out / "results.json"
    if not results.exists():
        sys.exit(f"gpu_pixels.py: the grid wrote no {results} (agents.py exit {trained})")
    name = "_".join(presets)
    archive = pathlib.Path(args.archive or HERE / "archive" / "pixels" / f"{name}_results.json")
    archive.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(results, archive)
    shutil.copyfile(out / "precision.json", archive.with_name(f"{name}_precision.json"))
    print(f"archived {results} -> {archive}", flush=True)
    if not args.no_scores:
        subprocess.run([sys.executable, str(HERE / "scores.py")], cwd=ROOT, check=True)
    return trained


if __name__ == "__main__":
    sys.exit(main())
