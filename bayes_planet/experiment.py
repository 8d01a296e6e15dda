"""The shared entry point of the example scripts in ``experiments/``.

``python experiments/<kind>.py --preset <name> [more presets] --set key=value --out DIR``:
merges the script's YAML (`bayes_planet.yaml_config`), writes the merged ``config.yaml`` to
``DIR``, seeds TensorFlow, runs ``examples[config['example']]`` and writes
``results.json``. `load_script` imports a script of ``experiments/`` or ``benchmarks/`` (not
packages) by its path.
"""

import argparse
import importlib.util
import json
import pathlib
import time

from bayes_planet import yaml_config

__all__ = ["example_main", "load_script"]


def load_script(path, name=None):
    """The Python file ``path`` as a new module named ``name`` (default: its stem), without
    touching ``sys.path`` or ``sys.modules``: how a script imports its sibling helper file
    and how the tests import the scripts."""
    path = pathlib.Path(path)
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def example_main(argv, doc, config_path, examples, default_preset, hide=()):
    """Parses ``argv``, runs the selected example, returns its results dict.

    Args:
      argv: command-line arguments (None: ``sys.argv[1:]``).
      doc: the script's docstring (its first line is the CLI description).
      config_path: the script's YAML (``defaults`` + presets).
      examples: ``{name: fn(section_config, seed, out_dir) -> dict}``.
      default_preset: preset used when none is given.
      hide: result keys left out of the printed summary (e.g. long histories).
    """
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    yaml_config.add_preset_argument(
        parser, default=[default_preset],
        help=f"presets from {pathlib.Path(config_path).name}, merged in order (a,b or a b)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="override config keys (dotted paths)")
    parser.add_argument("--out", required=True, help="output directory")
    args = parser.parse_args(argv)
    presets = yaml_config.presets_from(args)
    config = yaml_config.load_dict(config_path, presets, args.set)
    if config["example"] not in examples:
        raise yaml_config.ConfigError(f"Unknown example {config['example']!r}; "
                                      f"expected {sorted(examples)}")
    out_dir = pathlib.Path(args.out)
    yaml_config.save_dict(config, out_dir)

    import tensorflow as tf

    tf.keras.utils.set_random_seed(config["seed"])
    start = time.time()
    results = examples[config["example"]](config[config["example"]], config["seed"], out_dir)
    results = {"example": config["example"], "presets": presets, **results,
               "seconds": round(time.time() - start, 1)}
    (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results.items() if k not in hide}, indent=2))
    return results
