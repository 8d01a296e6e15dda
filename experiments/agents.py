"""Grids of agent training runs: Bayesian vs deterministic world models, and exploration.

One script for experiments 1 and 3 (and 2, with ``--probe``) and the table across tasks;
the grid comes from presets in ``agents.yaml``::

    python experiments/agents.py --preset comparison                 # exp. 1, cartpole-swingup
    python experiments/agents.py --preset comparison,cheetah         # exp. 1, cheetah-run
    python experiments/agents.py --preset exploration                # exp. 3, sparse reward
    python experiments/agents.py --preset comparison --probe         # + exp. 2 latent probes
    python experiments/agents.py --preset comparison --aggregate-only
    python experiments/agents.py --preset tasks                      # 6 tasks, tasks_table.md
    python experiments/agents.py --preset sparse                     # novelty on a sparse task
    python experiments/agents.py --preset debug --out /tmp/agents    # seconds per run

**Runs.** One ``bayes-planet train`` subprocess per (task, estimator, β, novelty, value novelty,
weight prior, seed) of ``tasks`` × ``estimators`` × ``betas`` × ``novelties`` ×
``value_novelties`` × ``weight_priors`` × the task's
seeds (``seeds``, or its entry of ``seeds_per_task``), in ``<out>/runs/<variant>/seed<seed>/`` for one task and
``<out>/runs/<task>/<variant>/seed<seed>/`` for several (the variant is then named
``<task>/<variant>`` everywhere), with its output in ``<run>.launch/train.log`` beside it and
every launch in ``<run>.launch/launches.jsonl`` (its start and its end: finished, failed,
interrupted by Ctrl-C, or orphaned when its launcher was killed; `launches`). The grid never
writes into a run (only its trainer does), and refuses an ``out`` that is or lies inside a
run (`bayes_planet.run_dirs`). Sequential by default (``--parallel N`` runs N at once;
the runs then share the cores, which inflates their wall-clock), or on a Ray cluster
(**Backends**). Rerunning the command skips finished runs (as many episodes on disk as
``train.episodes``) and resumes unfinished ones (the trainer restores its checkpoint and
replay); a larger ``train.episodes`` in ``overrides`` extends finished runs
(``bayes_planet.agent.config.EXTENDABLE_KEYS``: equal to runs that long from the start). All run
configs are validated before the first launch.

**Backends** (``backend``; `experiments/branches.py` takes the same key). ``name: local``,
the default, runs each trainer as a subprocess of the launcher. ``name: ray``
(``pip install -e ".[ray]"``) runs each as one Ray task on the cluster at ``address`` (null:
``ray.init()``'s default, a Ray started on this machine, else a new local one; ``auto``,
``host:6379`` or ``ray://head:10001``) requesting ``num_cpus`` CPUs, so that Ray runs at most
a node's CPUs / ``num_cpus`` runs on it (and sets their ``OMP_NUM_THREADS`` to it);
``parallel`` bounds the tasks in flight as it bounds the subprocesses. A task runs the same
command in the launcher's working directory, appending to the same ``train.log``, and the
launcher records the same rows in ``launches.jsonl`` (the trainer's node and pid in the end
row). So ``out`` (a branch grid's ``parent`` too) and the launcher's working directory must
be on storage every node sees, at the same paths, with the same Python environment at the
same path on every node. Resuming is as with local runs: the same command skips finished
runs and resumes the others from their checkpoints, wherever they were killed; Ray does not
retry a task (a lost node fails its run naming the Ray error; the rerun resumes it). Ctrl-C
cancels the tasks with force (Ray kills the worker and its child, the trainer) and records
them as interrupted. Final evaluations and probes run on the launcher's machine, a final
evaluation as its run's task ends (a new run starts after it). On a cluster, from a
checkout on the shared storage (the preset's ``out`` is relative to it)::

    ray start --head --port=6379             # on the head; on each other node:
    ray start --address=HEAD:6379            # (HEAD: the head's address)
    python experiments/agents.py --preset tasks --parallel 16 --set 'backend={name: ray, address: auto}'

**Aggregation** (always, also with ``--aggregate-only``), per variant over seeds:

* ``learning_curves.png``: evaluation return (no exploration noise) and collection return vs
  environment steps, mean ± std over seeds (curves interpolated onto the union of steps;
  a point averages the seeds that reached it); a row per task.
* ``weight_kl.png``: the Bayesian transition's KL(q(W) || p(W)) during training (Fig. 10).
* ``tasks_table.md`` (also at the end of ``summary.md``): a row per task, the evaluation
  return of each variant at the env steps of ``table_steps`` (the last evaluation at or
  before the step, no interpolation), then published returns of TD-MPC, TD-MPC2, DreamerV3
  and SAC from ``anchors.yaml`` (see ``agents_report.py``).
* ``coverage.png``: state coverage of the collected episodes (random seed episodes
  included): the fraction of cells of a ``bins × bins`` grid over two columns of the true
  physics state that the replay has visited, cumulatively over environment steps. For
  cartpole the grids are (pole angle wrapped to [-π, π), pole angular velocity) and
  (cart position, cart velocity); values outside the ranges count in the border cells; not
  every cell is physically reachable, so compare fractions between variants, not with 1.
  The grids are one task's: a grid of several tasks needs ``coverage.enabled=false``.
* wall-clock per run: the training loop's seconds (``metrics.jsonl``, summed over
  resumed segments) and the launcher's (process start-up included).
* with ``--probe`` (or ``probe.enabled``): ``bayes-planet probe`` on every finished run,
  all runs of a task on the same held-out test episodes (``<out>/probe_test_episodes``,
  ``/<task>`` for several tasks, collected by the first probed run's evaluation policy), R²
  per variant in ``probe.png``. Each mode of
  ``probe.weights`` (``per_episode``, ``shared``, ``mean``: ``bayes-planet probe --weights``)
  probes the Bayesian runs into ``<run>.probe`` (per_episode) or ``<run>.probe_<mode>``
  beside the run (a probe never writes into a run);
  the summary has a row per variant and mode.
* with ``final_eval.episodes`` N > 0: ``bayes-planet eval --episodes N`` of every finished
  run's last checkpoint (as a run finishes, those finished before after the launches; again
  if the run was extended), into
  ``<run>.eval/eval.json`` beside the run; the summary's and the tasks table's "final"
  columns (mean ± std over seeds of each run's N-episode mean; TD-MPC's evaluations are 10
  episodes). The evaluation episodes are seeded by their index, so a rerun gives the same.

**Seeds run elsewhere** (earlier, or on another machine): ``results.json`` keeps every run's
curves and numbers, so archiving it (``experiments/archive/<study>/<grid>_results.json``)
and naming it in ``merge``
(``--set 'merge=[experiments/archive/exploration/exploration_results.json]'``) fills the
cells of the grid that have no episodes in ``--out`` with the archived finished runs: they
are not trained again and are aggregated with the local ones (status
``merged from <file>``). A cell is (task, estimator, β, novelty, value novelty, weight prior,
seed), so a one-task
archive (written before ``tasks``, with its ``task``) fills its task's cells of a grid of
several. The archived grid must share a task; a cell archived twice is refused. Each run of
``results.json`` keeps its merged training config, and fills a cell only if it equals the
cell's config (read as today's layout, `bayes_planet.agent.config.upgrade`, as a run's is): a
preset edited since the archive, or another ``train.episodes``, is refused naming the keys
(a run is extended in its own logdir, not through ``merge``), and the same agent spelled
with other presets or overrides merges. Archives written before runs kept their config must
have the same base presets, overrides and weight priors. A merged run's probe R² was measured
on its own grid's held-out episodes, not on this grid's.

Writes ``config.yaml``, ``results.json``, ``summary.md``, ``tasks_table.md`` and the PNGs
into ``--out``.
"""

import argparse
import itertools
import json
import math
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np

from bayes_planet import yaml_config as _config  # noqa: E402
from bayes_planet.agent.replay import episode_files
from bayes_planet.experiment import load_script
from bayes_planet.run_dirs import check_output_dir

CONFIG_PATH = pathlib.Path(__file__).with_suffix(".yaml")
report = load_script(pathlib.Path(__file__).with_name("agents_report.py"), "agents_report")


# ---------------------------------------------------------------- the grid
def task_seeds(config):
    """``{task: [seeds]}``: each task of ``tasks`` with ``seeds``, or its own seeds from
    ``seeds_per_task``."""
    tasks, per_task = list(config["tasks"]), config["seeds_per_task"] or {}
    if not tasks or len(set(tasks)) < len(tasks):
        raise _config.ConfigError(f"tasks: expected distinct task names, received {tasks}")
    if not isinstance(per_task, dict) or set(per_task) - set(tasks):
        raise _config.ConfigError("seeds_per_task: expected a mapping of tasks of the grid "
                                  f"({tasks}) to seeds, received {per_task!r}")
    seeds = {task: list(per_task.get(task, config["seeds"])) for task in tasks}
    for task, values in seeds.items():
        if not values or not all(isinstance(x, int) for x in values):
            raise _config.ConfigError(f"expected a list of integer seeds for {task}, received "
                                      f"{values!r}")
    return seeds


def variants(config):
    """``[{name, label, task, estimator, beta, novelty, value_novelty, weight_prior}]``: the
    product of tasks, estimators, betas, novelties (``planner.novelty``), value novelties
    (``value.novelty``) and weight priors (``model.weight_prior``). ``label`` names the
    variant within a task; ``name`` is the label, ``<task>/<label>`` in a grid of several
    tasks."""
    estimators, betas = list(config["estimators"]), [float(b) for b in config["betas"]]
    novelties = [float(n) for n in config["novelties"]]
    value_novelties = [float(n) for n in config["value_novelties"]]
    priors, tasks = list(config["weight_priors"]), list(task_seeds(config))
    if not estimators or not betas or not novelties or not value_novelties or not priors:
        raise _config.ConfigError(
            "expected at least one estimator, beta, novelty, value novelty and weight prior; "
            f"received {estimators}, {betas}, {novelties}, {value_novelties}, {priors}")
    out = []
    for task, estimator, beta, novelty, value_novelty, prior in itertools.product(
            tasks, estimators, betas, novelties, value_novelties, priors):
        parts = [estimator] if len(estimators) > 1 or len(betas) == 1 else []
        parts += [f"beta{beta:g}"] if len(betas) > 1 else []
        parts += [f"novelty{novelty:g}"] if len(novelties) > 1 else []
        parts += [f"value_novelty{value_novelty:g}"] if len(value_novelties) > 1 else []
        parts += [prior] if len(priors) > 1 else []
        label = "_".join(parts)
        out.append({"name": f"{task}/{label}" if len(tasks) > 1 else label, "label": label,
                    "task": task, "estimator": estimator, "beta": beta, "novelty": novelty,
                    "value_novelty": value_novelty, "weight_prior": prior})
    return out


def grid(config, out):
    """Every run of the grid with its ``--set`` list and validated training config."""
    from bayes_planet.agent import config as config_lib

    seeds = task_seeds(config)
    # Seed-major: a partly run grid has every variant at its first seeds.
    cells = sorted(((i, seed, v) for v in variants(config)
                    for i, seed in enumerate(seeds[v["task"]])), key=lambda c: c[0])
    runs = []
    for _, seed, variant in cells:
        sets = [f"task={variant['task']}", f"seed={seed}",
                f"model.estimator={variant['estimator']}",
                f"planner.beta={variant['beta']}", f"planner.novelty={variant['novelty']}",
                f"value.novelty={variant['value_novelty']}",
                f"model.weight_prior={variant['weight_prior']}", *config["overrides"]]
        train_config = config_lib.validate(config_lib.load(config["base_presets"], sets))
        logdir = pathlib.Path(out) / "runs" / variant["name"] / f"seed{seed}"
        check_existing_run(logdir, train_config)
        runs.append({"variant": variant["name"], "task": variant["task"],
                     "estimator": variant["estimator"], "seed": seed, "sets": sets,
                     "cell": cell(variant, seed), "logdir": logdir,
                     "episodes": train_config.train.episodes,
                     "final_eval_episodes": config["final_eval"]["episodes"],
                     "config": train_config.to_dict()})
    return runs


def check_existing_run(logdir, train_config):
    """A one-line `ConfigError` if ``logdir`` holds a run of another config than the grid
    would train there (a larger ``train.episodes`` aside: `bayes-planet train` extends a
    run). Without it a grid would count that run as its own, finished or resumed: two
    one-task grids of different tasks in one ``out`` share ``<out>/runs/<variant>/seed<s>``."""
    if not (logdir / "config.yaml").exists():
        return
    from bayes_planet.agent import config as config_lib
    from bayes_planet.agent.run import RunError, read_config

    try:
        previous = read_config(logdir)
    except RunError as e:
        raise _config.ConfigError(str(e)) from None
    differ = config_lib.fixed_changes(previous, train_config)
    if differ:
        raise _config.ConfigError(
            f"{logdir} holds a run of another config ({_config.describe_changes(differ)}); "
            "give this grid its own out (--set out=...) or the presets and overrides that run "
            "was trained with")


def cell(variant, seed):
    """What identifies a run across grids (and archives): task, model, planner and seed."""
    return (variant["task"], variant["estimator"], float(variant["beta"]),
            float(variant["novelty"]), float(variant["value_novelty"]), variant["weight_prior"],
            int(seed))


def train_command(run, base_presets):
    command = [sys.executable, "-m", "bayes_planet.agent.cli", "train", "--logdir", str(run["logdir"]),
               "--quiet"]
    if base_presets:
        command += ["--preset", ",".join(base_presets)]
    for item in run["sets"]:
        command += ["--set", item]
    return command


def episodes_on_disk(logdir):
    return len(episode_files(pathlib.Path(logdir) / "episodes"))


def _env():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")


def launch_logs(run):
    """The folder of a run's ``train.log`` and ``launches.jsonl``, beside its logdir (only the
    trainer writes into a run; a branch's logdir must be empty until
    ``bayes-planet train --branch-from`` fills it): ``<logdir>.launch``."""
    logdir = pathlib.Path(run["logdir"])
    return logdir.with_name(logdir.name + ".launch")


def _record_launch(run, row):
    """Appends ``row`` to ``launches.jsonl`` on a line of its own (after a torn last line of a
    killed launcher too)."""
    path = launch_logs(run) / "launches.jsonl"
    with open(path, "ab+") as f:
        torn = False
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        f.write((("\n" if torn else "") + json.dumps(row) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())


def launches(run):
    """Every launch of the run's trainer, oldest first: ``{launch, started, command, pid,
    launcher, host, node, backend, seconds, returncode, outcome}``: ``launcher`` and ``host``
    the launcher's pid and machine, ``pid`` and ``node`` the trainer's (a `RayBackend`
    task's once it ended, else None), ``error`` (Ray) the error of a task lost without a
    return code. ``launches.jsonl`` has a ``start`` row when a trainer starts and an ``end``
    row when it ends (``outcome`` finished, failed,
    interrupted: the launcher stopped it on Ctrl-C, or orphaned: its launcher ended without
    recording the end, `record_orphans`); a launch without an end row yet has outcome None.
    Rows of launchers before start rows (one row per finished launch) read as ended launches."""
    rows, found = [], {}
    for path in (launch_logs(run) / "launches.jsonl",
                 pathlib.Path(run["logdir"]) / "launches.jsonl"):  # before `launch_logs`
        rows = read_jsonl(path) + rows
    for row in rows:
        if "event" not in row:  # One row per launch, written when it ended.
            found[len(found)] = {**row, "outcome": "finished" if row["returncode"] == 0
                                 else "failed"}
        elif row["event"] == "start":
            found[row["launch"]] = {"node": row.get("host"), "backend": "local", **row,
                                    "seconds": None, "returncode": None, "outcome": None}
        elif row["launch"] in found:  # `RayBackend`'s also: where it ran, or its Ray error
            found[row["launch"]].update({k: row[k] for k in ("seconds", "returncode",
                                                             "outcome", "node", "pid", "error")
                                         if k in row})
    for launch in found.values():
        launch.pop("event", None)
    return list(found.values())


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def record_orphans(run, say=print, name="agents"):
    """Ends the run's launches whose launcher on this host is gone without recording their end
    (killed, or its machine restarted) with an ``orphaned`` row; returns how many."""
    host, count = socket.gethostname(), 0
    for launch in launches(run):
        if (launch["outcome"] is None and launch.get("host") == host
                and not _alive(launch["launcher"])):
            _record_launch(run, {"event": "end", "launch": launch["launch"], "seconds": None,
                                 "returncode": None, "outcome": "orphaned"})
            count += 1
            say(f"{name}: {run['variant']} seed {run['seed']}: the launch of "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(launch['started']))} "
                "ended without its launcher (recorded as orphaned)")
    return count


def launch(runs, base_presets, parallel=1, say=print, name="agents", backend=None):
    """Runs the unfinished runs (at most ``parallel`` at once) on ``backend`` (`make_backend`;
    None: `LocalBackend`); returns ``{logdir: status}``.
    A run's training command is its ``command`` if it has one (`experiments/branches.py`),
    else `train_command`; its output goes to `launch_logs`, where every launch is recorded
    (`launches`); ``name`` begins each line said. Interrupted (Ctrl-C), it stops the trainers
    it started, records them as interrupted and re-raises: the same command resumes."""
    backend = backend or LocalBackend()
    status, pending, active = {}, [], []
    for run in runs:
        if episodes_on_disk(run["logdir"]) >= run["episodes"]:
            status[str(run["logdir"])] = "finished before"
        else:
            pending.append(run)
    say(f"{name}: {len(runs)} runs, {len(runs) - len(pending)} already finished, "
        f"{len(pending)} to run ({parallel} at a time{backend.where})")
    total = len(pending)
    try:
        while pending or active:
            while pending and len(active) < parallel:
                run = pending.pop(0)
                active.append(_start(run, base_presets, say, name, backend))
                resumed, point = active[-1]["resumed"], run.get("branch_point")
                where = (f" (resuming at episode {resumed})" if resumed and resumed != point
                         else f" (branched at episode {point})" if point else "")
                say(f"{name}: [{total - len(pending)}/{total}] {run['variant']} seed "
                    f"{run['seed']}: started{where}")
            time.sleep(0.2)
            for item in list(active):
                code = backend.poll(item["handle"])
                if code is None:
                    continue
                active.remove(item)
                run = item["run"]
                seconds = _end(item, "finished" if code == 0 else "failed", code)
                status[str(run["logdir"])] = "trained" if code == 0 else f"failed ({code})"
                failed = (f"FAILED with code {code}" if isinstance(code, int) else
                          f"FAILED ({code})")
                say(f"{name}: {run['variant']} seed {run['seed']}: "
                    + (f"done in {seconds:.0f} s" if code == 0 else
                       f"{failed}, see {launch_logs(run)}/train.log"))
                if code == 0:  # While the other runs go on (runs finished before: after them all).
                    status.update(final_eval([run], say, name))
    finally:
        for item in active:  # Interrupted: end our trainers; the same command resumes.
            _end(item, "interrupted", backend.terminate(item["handle"]))
    return status


def _start(run, base_presets, say, name, backend):
    """Starts the run's trainer on ``backend`` (after recording orphaned launches) and its
    start row."""
    launch_logs(run).mkdir(parents=True, exist_ok=True)
    record_orphans(run, say, name)
    command = run.get("command") or train_command(run, base_presets)
    resumed, host = episodes_on_disk(run["logdir"]), socket.gethostname()
    start = time.time()
    handle = backend.start(run, command)
    launch_id = f"{host}-{os.getpid()}-{time.time_ns()}"
    _record_launch(run, {"event": "start", "launch": launch_id, "started": start,
                         "command": command, "pid": handle.get("pid"), "launcher": os.getpid(),
                         "host": host, "node": handle.get("node"),
                         "backend": backend.name, "resumed_at": resumed})
    return {"run": run, "handle": handle, "start": start, "id": launch_id, "resumed": resumed}


def _end(item, outcome, code):
    """Records a launch's end row (``code``: the trainer's return code, or a string saying why
    there is none, or None) and the handle's ``end_row`` (`RayBackend`: the ``node`` and
    ``pid`` of the trainer, known once it ended); returns its seconds."""
    seconds = time.time() - item["start"]
    row = {"event": "end", "launch": item["id"], "seconds": seconds,
           "returncode": code if isinstance(code, int) else None, "outcome": outcome}
    if isinstance(code, str):
        row["error"] = code
    row.update(item["handle"].get("end_row", {}))
    _record_launch(item["run"], row)
    return seconds


# ---------------------------------------------------------------- backends
BACKENDS = ("local", "ray")


def make_backend(config):
    """The grid's backend from its ``backend`` config: `LocalBackend` (``name: local``) or
    `RayBackend` (``name: ray``, its ``address`` and ``num_cpus``). A one-line `ConfigError`
    for a bad value, and for ``ray`` without Ray installed; nothing is started or connected
    (`launch` connects when it starts the first run)."""
    spec = config["backend"]
    name, address, num_cpus = spec["name"], spec["address"], spec["num_cpus"]
    if name not in BACKENDS:
        raise _config.ConfigError(f"Expected backend.name in {list(BACKENDS)}. Received: "
                                  f"backend.name={name!r}")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise _config.ConfigError("Expected null (a local Ray) or a Ray cluster's address "
                                  "(auto, host:port, ray://host:10001). Received: "
                                  f"backend.address={address!r}")
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1:
        raise _config.ConfigError(f"Expected a positive integer. Received: "
                                  f"backend.num_cpus={num_cpus!r}")
    if name == "local":
        return LocalBackend()
    return RayBackend(address, num_cpus)


def _open_log(path, command):
    """The run's ``train.log`` ``path`` opened to append, after a ``$ command`` line."""
    log = open(path, "a")  # noqa: SIM115 (closed by the caller)
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    return log


class LocalBackend:
    """Each trainer a subprocess of the launcher (the default). ``start(run, command)``
    returns a handle (``pid`` and ``node`` of the trainer), ``poll(handle)`` its return code
    once it ended (else None), ``terminate(handle)`` ends it and returns its return code."""

    name, where = "local", ""

    def start(self, run, command):
        log = _open_log(launch_logs(run) / "train.log", command)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env())
        return {"process": process, "log": log, "pid": process.pid,
                "node": socket.gethostname()}

    def poll(self, handle):
        code = handle["process"].poll()
        if code is not None:
            handle["log"].close()
        return code

    def terminate(self, handle):
        handle["process"].terminate()
        handle["process"].wait()
        handle["log"].close()
        return handle["process"].returncode


def _import_ray():
    try:
        import ray
    except ImportError:
        raise _config.ConfigError('Expected Ray installed for the ray backend: pip install -e '
                                  '".[ray]". Received: backend.name=\'ray\'') from None
    return ray


def _train_on_node(command, log_path, cwd):
    """The body of a run's Ray task (`RayBackend`), on whichever node Ray schedules it: the
    training command as a subprocess of the task's worker, in the launcher's working
    directory ``cwd``, its output appended to ``log_path``; returns ``{returncode, node,
    pid}``. A cancellation that reaches the task (KeyboardInterrupt) terminates the trainer;
    a forced one kills the worker, and Ray its child, the trainer."""
    node, log = socket.gethostname(), None
    try:
        log = _open_log(log_path, command)
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env(),
                                   cwd=cwd)
    except OSError as e:
        if log is not None:
            log.close()
        raise RuntimeError(f"on {node}: {e} (the runs and the launcher's working directory "
                           "must be on storage every node sees, at the same paths)") from None
    try:
        while process.poll() is None:
            time.sleep(0.5)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()
        log.close()
    return {"returncode": process.returncode, "node": node, "pid": process.pid}


class RayBackend:
    """Each trainer in a Ray task (`_train_on_node`) requesting ``num_cpus`` CPUs, on the Ray
    cluster at ``address`` (None: ``ray.init()``'s default, ``RAY_ADDRESS`` or a Ray started
    on this machine, else a new local one; a process already connected to Ray keeps its
    connection). The same interface as `LocalBackend`: the trainer's ``node`` and ``pid``
    are known when its task ends (``end_row``); ``poll`` returns a string naming the Ray
    error of a task lost without a return code (its node died, its worker crashed);
    ``terminate`` cancels the task with force (Ray kills the worker and the trainer) and returns
    None. A task is not retried: the rerun resumes the run."""

    name, where = "ray", ", as Ray tasks"

    def __init__(self, address=None, num_cpus=1):
        self.ray, self.address, self.num_cpus = _import_ray(), address, num_cpus
        self._task = None

    def _connect(self):
        ray = self.ray
        if not ray.is_initialized():
            try:
                ray.init(address=self.address, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError) as e:
                line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise _config.ConfigError(f"Expected a Ray cluster to connect to ({line}). "
                                          f"Received: backend.address={self.address!r}") from None
        self._task = ray.remote(num_cpus=self.num_cpus, max_retries=0)(_train_on_node)

    def start(self, run, command):
        if self._task is None:
            self._connect()
        log_path = os.path.abspath(launch_logs(run) / "train.log")
        return {"ref": self._task.remote(command, log_path, os.getcwd()), "pid": None,
                "node": None}

    def poll(self, handle):
        ready, _ = self.ray.wait([handle["ref"]], timeout=0)
        return self._result(handle) if ready else None

    def _result(self, handle, timeout=None):
        try:
            result = self.ray.get(handle["ref"], timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            return None
        except self.ray.exceptions.RayError as e:
            return _ray_error(self.ray, e)
        handle["end_row"] = {"node": result["node"], "pid": result["pid"]}
        return result["returncode"]

    def terminate(self, handle):
        self.ray.cancel(handle["ref"], force=True)
        code = self._result(handle, timeout=30)  # the task's end (cancelled: no return code)
        return code if isinstance(code, int) else None


def _ray_error(ray, error):
    """A Ray error as one line: the type and first line of the task's own exception, or of
    the Ray error (a lost node, a crashed worker, a task killed for memory)."""
    if isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None:
        error = error.cause
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


PROBE_WEIGHTS = ("per_episode", "shared", "mean")  # `bayes-planet probe --weights`


def probe_dir(logdir, weights):
    """Beside the run, not in it (readers never write into a run): ``<logdir>.probe[_mode]``."""
    logdir = pathlib.Path(logdir)
    suffix = ".probe" if weights == "per_episode" else f".probe_{weights}"
    return logdir.with_name(logdir.name + suffix)


def probe(runs, config, out, say=print):
    """``bayes-planet probe`` on every finished run without a probe.json (sequentially),
    once per mode of ``probe.weights`` (modes other than per_episode: Bayesian runs only).
    The held-out episodes: ``<out>/probe_test_episodes``, ``/<task>`` in a grid of tasks."""
    several = len(config["tasks"]) > 1
    for run, weights in itertools.product(runs, config["probe"]["weights"]):
        shared = pathlib.Path(out) / "probe_test_episodes" / (run["task"] if several else "")
        target = probe_dir(run["logdir"], weights)
        deterministic = run["estimator"] == "deterministic"
        if ((target / "probe.json").exists() or (deterministic and weights != "per_episode")
                or episodes_on_disk(run["logdir"]) < run["episodes"]):
            continue
        command = [sys.executable, "-m", "bayes_planet.agent.cli", "probe", "--logdir",
                   str(run["logdir"]), "--out", str(target), "--test-episodes", str(shared),
                   "--episodes", str(config["probe"]["episodes"]), "--weights", weights,
                   "--horizons", ",".join(str(h) for h in config["probe"]["horizons"])]
        log_path = target.with_name(target.name + ".log")
        with open(log_path, "a") as log:
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=_env())
        say(f"agents: probe ({weights} weights) {run['variant']} seed {run['seed']}: "
            + ("done" if code == 0 else f"FAILED ({code}), see {log_path}"))


def eval_dir(logdir):
    """Beside the run, not in it: ``<logdir>.eval`` (``eval.json``; ``.eval.log`` its output)."""
    logdir = pathlib.Path(logdir)
    return logdir.with_name(logdir.name + ".eval")


def read_final_eval(run):
    """The run's ``eval.json`` if it evaluated the run's current last checkpoint with the
    grid's episodes and planner (the run's own, or ``--set`` of the run's
    ``final_eval_planning``), else None."""
    path = eval_dir(run["logdir"]) / "eval.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    current = (report["checkpoint"] == episodes_on_disk(run["logdir"])
               and report["episodes"] == run["final_eval_episodes"]
               and report["planning"] == list(run.get("final_eval_planning", ())))
    return report if current else None


def final_eval(runs, say=print, name="agents"):
    """``bayes-planet eval`` of every finished run without a current ``eval.json``
    (sequentially; with ``--set`` of the run's ``final_eval_planning``, if any); returns
    ``{logdir: status}`` of the failures."""
    failed = {}
    for run in runs:
        episodes = run["final_eval_episodes"]
        if (not episodes or episodes_on_disk(run["logdir"]) < run["episodes"]
                or read_final_eval(run) is not None):
            continue
        target = eval_dir(run["logdir"])
        command = [sys.executable, "-m", "bayes_planet.agent.cli", "eval", "--logdir",
                   str(run["logdir"]), "--episodes", str(episodes), "--out", str(target)]
        for item in run.get("final_eval_planning", ()):
            command += ["--set", item]
        log_path = target.with_name(target.name + ".log")
        with open(log_path, "a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, env=_env())
        if code:
            failed[str(run["logdir"])] = f"failed final evaluation ({code})"
        say(f"{name}: final evaluation ({episodes} episodes) {run['variant']} seed "
            f"{run['seed']}: " + ("done" if code == 0 else f"FAILED ({code}), see {log_path}"))
    return failed


def archived_runs(config):
    """``{cell: run}`` (see `cell`): the finished runs of the ``merge`` results files."""
    archived = {}
    for path in map(pathlib.Path, config["merge"]):
        if not path.is_file():
            raise _config.ConfigError(f"merge: expected a results.json file, received '{path}'")
        earlier = json.loads(path.read_text())
        # Grids archived before `weight_priors` existed all ran with N(0, 1) weight priors;
        # before `tasks`, a grid had one `task`.
        earlier_config = {"weight_priors": ["normal"], **earlier["config"]}
        if "tasks" not in earlier_config:
            earlier_config["tasks"] = [earlier_config["task"]]
        finished = [run for variant in earlier["variants"].values()
                    for run in variant["runs"].values() if run["finished"]]
        # Runs that kept their training config are compared by it (`local_runs`): the same
        # agent spelled with other presets or overrides merges. Older archives by the names;
        # they ran over PlaNet's defaults, which are the `planet` preset now.
        if not all("config" in run for run in finished):
            earlier_config["base_presets"] = ["planet", *earlier_config["base_presets"]]
            for key in ("base_presets", "overrides", "weight_priors"):
                if earlier_config[key] != config[key]:
                    raise _config.ConfigError(
                        f"merge: {path} was run with {key}={earlier_config[key]!r}, this grid "
                        f"has {key}={config[key]!r}")
        if not set(earlier_config["tasks"]) & set(config["tasks"]):
            raise _config.ConfigError(f"merge: {path} was run with tasks="
                                      f"{earlier_config['tasks']!r}, this grid has tasks="
                                      f"{config['tasks']!r}")
        for name, variant in earlier["variants"].items():
            # Before `novelties` (`value_novelties`), no run had the planner's (the critic's)
            # disagreement bonus.
            variant = {"task": earlier_config["tasks"][0], "novelty": 0.0, "value_novelty": 0.0,
                       "weight_prior": earlier_config["weight_priors"][0], **variant}
            for seed, run in variant["runs"].items():
                if not run["finished"]:
                    continue
                if "curves" not in run:
                    raise _config.ConfigError(f"merge: {path} has no per-run curves (written "
                                              "before results.json kept them)")
                key = cell(variant, seed)
                if key in archived:
                    raise _config.ConfigError(f"merge: {name} seed {seed} is archived twice "
                                              f"({archived[key]['status']}, {path})")
                archived[key] = {**run, "status": f"merged from {path}"}
    return archived


def only_variants(runs, names):
    """The runs of the variants ``names`` (``--only``; None: all), refusing a name that is
    not a variant of the grid in one line that lists them."""
    if names is None:
        return runs
    known = list(dict.fromkeys(run["variant"] for run in runs))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise _config.ConfigError(f"--only: expected variants of this grid, one of {known}; "
                                  f"received {unknown}")
    return [run for run in runs if run["variant"] in names]


def local_runs(runs, archived):
    """The runs to train or probe here: those not filled by an archived run. An archived run
    that kept its training config fills a cell only if it equals the cell's: a one-line
    `ConfigError` naming the differences otherwise (a preset changed since, or another
    ``train.episodes``)."""
    from bayes_planet.agent import config as config_lib

    local = []
    for run in runs:
        earlier = archived.get(run["cell"])
        if earlier is None or episodes_on_disk(run["logdir"]):
            local.append(run)
        elif "config" in earlier:  # an older layout reads as today's, as a run's does
            diff = _config.changes(config_lib.upgrade(earlier["config"]), run["config"])
            if diff:
                raise _config.ConfigError(
                    f"merge: {run['variant']} seed {run['seed']} ({earlier['status']}) was "
                    f"trained with another config than this grid's "
                    f"({_config.describe_changes(diff)})")
    return local


# ---------------------------------------------------------------- reading runs
def read_jsonl(path):
    """The rows of a JSON-lines file (none if it is missing; a torn line of a killed writer
    is left out)."""
    path = pathlib.Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def training_seconds(records):
    """Seconds of the training loop, summed over resumed segments (the clock restarts)."""
    total, last = 0.0, 0.0
    for r in records:
        if r["seconds"] < last:
            total += last
        last = r["seconds"]
    return total + last


def coverage_cells(physics, spec, bins):
    """Flat indices of the ``bins × bins`` cells of one grid visited by ``physics`` rows."""
    values = np.asarray(physics, np.float64)[:, list(spec["columns"])].copy()
    for k, wrap in enumerate(spec["wrap"]):
        if wrap:
            values[:, k] = (values[:, k] + math.pi) % (2 * math.pi) - math.pi
    low, high = np.asarray(spec["low"], np.float64), np.asarray(spec["high"], np.float64)
    index = np.clip(np.floor((values - low) / (high - low) * bins), 0, bins - 1).astype(int)
    return set((index[:, 0] * bins + index[:, 1]).tolist())


def coverage_curves(logdir, coverage, steps_by_episode):
    """``{grid: [(env_steps, fraction)]}`` after each collected episode (None: no physics)."""
    files = [path for _, _, path in episode_files(pathlib.Path(logdir) / "episodes")]
    visited = {g["name"]: set() for g in coverage["grids"]}
    curves = {name: [] for name in visited}
    bins = coverage["bins"]
    for i, path in enumerate(files):
        with np.load(path) as npz:
            if "physics" not in npz.files:
                return None
            physics = npz["physics"]
        for spec in coverage["grids"]:
            visited[spec["name"]] |= coverage_cells(physics, spec, bins)
            if i + 1 in steps_by_episode:
                curves[spec["name"]].append((steps_by_episode[i + 1],
                                             len(visited[spec["name"]]) / bins ** 2))
    return curves


def read_run(run, config):
    """Curves and numbers of one run from its logdir."""
    from bayes_planet.agent.run import read_metrics

    logdir = run["logdir"]
    records = read_metrics(logdir)  # The run's reader: a torn last row is left out.
    evals = [(r["env_steps"], r["eval_return"]) for r in records if "eval_return" in r]
    out = {
        "logdir": str(logdir), "config": run["config"], "episodes": len(records),
        "finished": episodes_on_disk(logdir) >= run["episodes"],
        "env_steps": records[-1]["env_steps"] if records else 0,
        "curves": {
            "eval_return": evals,
            "return": [(r["env_steps"], r["return"]) for r in records],
            "weight_kl": [(r["env_steps"], r["weight_kl"]) for r in records if "weight_kl" in r],
        },
        "training_seconds": training_seconds(records) if records else None,
        "launcher_seconds": sum(x["seconds"] or 0 for x in launches(run)) or None,
        "final_eval_return": evals[-1][1] if evals else None,
        "mean_eval_return": float(np.mean([e for _, e in evals])) if evals else None,
        "final_weight_kl": _last(records, "weight_kl"),
        "coverage": None,
    }
    if config["coverage"]["enabled"]:
        steps = {r["episode"]: r["env_steps"] for r in records}
        curves = coverage_curves(logdir, config["coverage"], steps)
        if curves is not None:
            out["curves"].update({f"coverage_{k}": v for k, v in curves.items()})
            out["coverage"] = {k: v[-1][1] if v else None for k, v in curves.items()}
    report = read_final_eval(run) if out["finished"] else None
    steps = {r["episode"]: r["env_steps"] for r in records}
    out["final_eval"] = None if report is None else {
        "mean": report["mean"], "std": report["std"], "episodes": report["episodes"],
        "returns": report["returns"], "env_steps": steps.get(report["checkpoint"])}
    out["probe"] = {}
    for weights in PROBE_WEIGHTS:
        path = probe_dir(logdir, weights) / "probe.json"
        if path.exists():
            out["probe"][weights] = _probe_summary(json.loads(path.read_text()))
    return out


def _last(records, key):
    values = [r[key] for r in records if key in r]
    return values[-1] if values else None


def _probe_summary(report):
    """``{'closed_loop/ridge/velocity': R², 'open_loop_h5/mlp/position': R², ...}``."""
    flat = {}
    entries = [("closed_loop", report["closed_loop"])]
    entries += [(f"open_loop_h{h}", r) for h, r in report["open_loop"].items()]
    for label, entry in entries:
        for probe_name, result in entry.items():
            for group, value in result["mean"].items():
                flat[f"{label}/{probe_name}/{group}"] = value
    return flat


# ---------------------------------------------------------------- aggregation
def mean_curve(curves):
    """Mean, std and count over seeds of ``[(x, y)]`` curves on the union of their x."""
    curves = [np.asarray(c, np.float64) for c in curves if len(c)]
    if not curves:
        return None
    xs = np.unique(np.concatenate([c[:, 0] for c in curves]))
    ys = np.full((len(curves), len(xs)), np.nan)
    for i, c in enumerate(curves):
        inside = (xs >= c[0, 0]) & (xs <= c[-1, 0])
        ys[i, inside] = np.interp(xs[inside], c[:, 0], c[:, 1])
    count = np.sum(~np.isnan(ys), 0)
    mean = np.nansum(ys, 0) / count
    std = np.sqrt(np.nansum((ys - mean) ** 2, 0) / count)
    return {"steps": xs.tolist(), "mean": mean.tolist(), "std": std.tolist(),
            "seeds": count.tolist()}


def stats(values):
    """``{mean, std, n}`` of the values that are not None (population std), or None."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"mean": float(np.mean(values)), "std": float(np.std(values)), "n": len(values)}


def aggregate(config, out, runs, status=None, archived=None):
    out = pathlib.Path(out)
    archived = archived or {}
    local = local_runs(runs, archived)
    results = {"config": config, "variants": {}}
    for variant in variants(config):
        name = variant["name"]
        per_run = {r["seed"]: read_run(r, config) for r in local if r["variant"] == name}
        for r in per_run.values():
            r["status"] = (status or {}).get(r["logdir"], "finished" if r["finished"] else
                                             "unfinished")
        per_run.update({r["seed"]: archived[r["cell"]] for r in runs
                        if r["variant"] == name and r["seed"] not in per_run})
        per_run = dict(sorted(per_run.items()))
        curve_keys = sorted({k for r in per_run.values() for k in r["curves"]})
        summary = {key: stats([r[key] for r in per_run.values()])
                   for key in ("final_eval_return", "mean_eval_return", "training_seconds",
                               "launcher_seconds", "final_weight_kl", "env_steps")}
        summary["final_eval"] = stats([r["final_eval"]["mean"] for r in per_run.values()
                                        if r.get("final_eval")])
        coverage = [r["coverage"] for r in per_run.values() if r["coverage"]]
        if coverage:
            summary["coverage"] = {g: stats([c[g] for c in coverage]) for g in coverage[0]}
        summary["probe"] = {}
        for weights in PROBE_WEIGHTS:
            probes = [r["probe"][weights] for r in per_run.values() if weights in r["probe"]]
            if probes:
                summary["probe"][weights] = {k: stats([p.get(k) for p in probes])
                                             for k in probes[0]}
        results["variants"][name] = {
            **variant, "summary": summary,
            "curves": {k: mean_curve([r["curves"].get(k, []) for r in per_run.values()])
                       for k in curve_keys},
            "runs": {str(seed): r for seed, r in per_run.items()},  # curves too: mergeable
        }
    report.plot_curves(results, out)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    from bayes_planet.agent import config as config_lib

    pixels = config_lib.load(config["base_presets"], config["overrides"]).obs_type == "pixels"
    anchors = report.read_anchors(report.PIXEL_ANCHORS_PATH if pixels else report.ANCHORS_PATH)
    table = report.tasks_table(results, config["table_steps"], anchors)
    (out / "tasks_table.md").write_text(table)
    (out / "summary.md").write_text(summary_markdown(results) + "\n" + table)
    return results


def _fmt(stat, scale=1.0, digits=1):
    if not stat:
        return "–"
    return f"{stat['mean'] * scale:.{digits}f} ± {stat['std'] * scale:.{digits}f} (n={stat['n']})"


def summary_markdown(results):
    c = results["config"]
    seeds = "; ".join(f"{t} seeds {s}" for t, s in task_seeds(c).items())
    lines = [f"{seeds}; base presets {c['base_presets']}, overrides {c['overrides']}; "
             "mean ± std over seeds", "",
             "| variant | final eval return | final N-episode eval | mean eval return | "
             "training min | launcher min | final weight KL | coverage |",
             "|---|---|---|---|---|---|---|---|"]
    for name, v in results["variants"].items():
        s = v["summary"]
        cov = "; ".join(f"{g} {_fmt(st, digits=3)}" for g, st in s.get("coverage", {}).items())
        lines.append(f"| {name} | {_fmt(s['final_eval_return'])} | "
                     f"{_fmt(s.get('final_eval'))} | "
                     f"{_fmt(s['mean_eval_return'])} | {_fmt(s['training_seconds'], 1 / 60)} | "
                     f"{_fmt(s['launcher_seconds'], 1 / 60)} | "
                     f"{_fmt(s['final_weight_kl'], digits=0)} | {cov or '–'} |")
    probed = {(n if w == "per_episode" else f"{n} ({w} weights)"): p
              for w in PROBE_WEIGHTS for n, v in results["variants"].items()
              if (p := v["summary"]["probe"].get(w))}
    if probed:
        horizons = [int(h) for h in c["probe"]["horizons"]]
        labels = ["closed_loop"] + [f"open_loop_h{h}" for h in horizons]
        for group in ("velocity", "position"):
            dims = "qvel" if group == "velocity" else "qpos"
            lines += ["", f"probe R² of {group} ({dims} dims averaged) on shared held-out "
                      "episodes, mean ± std over seeds", "",
                      "| variant | probe | closed loop | "
                      + " | ".join(f"open loop h={h}" for h in horizons) + " |",
                      "|---|---|---|" + "---|" * len(horizons)]
            for name, p in probed.items():
                for probe_name in ("ridge", "mlp"):
                    cells = [_fmt(p.get(f"{k}/{probe_name}/{group}"), digits=3) for k in labels]
                    lines.append(f"| {name} | {probe_name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the command
def grid_parser(description, only_help, metavar="VARIANT"):
    """The flags of a grid script: ``--preset``, ``--set``, ``--out``, ``--parallel``,
    ``--aggregate-only`` and ``--only`` (its help ``only_help``)."""
    parser = _config.add_arguments(argparse.ArgumentParser(description=description))
    parser.add_argument("--parallel", type=int, default=None,
                        help="concurrent training runs (config: parallel)")
    parser.add_argument("--aggregate-only", action="store_true",
                        help="only re-aggregate the existing runs")
    parser.add_argument("--only", action="append", default=None, metavar=metavar,
                        help=only_help)
    return parser


def grid_config(args, path):
    """The grid's config from the YAML ``path`` with ``args``' presets and ``--set``, its
    ``out`` and ``parallel`` replaced by ``--out`` and ``--parallel`` if given."""
    config = _config.load_dict(path, _config.presets_from(args), args.set)
    if args.out:
        config["out"] = args.out
    if args.parallel is not None:
        config["parallel"] = args.parallel
    return config


def main(argv=None):
    parser = grid_parser(__doc__.split("\n")[0],
                         "train only this variant of the grid (repeatable; its name as in the "
                         "table, e.g. reparameterization_novelty10): a subset of the grid's own "
                         "lists would name its variants, and so logdirs, differently; the table "
                         "shows every variant")
    parser.add_argument("--probe", action="store_true",
                        help="also run latent probes on finished runs (config: probe.enabled)")
    args = parser.parse_args(argv)
    config = grid_config(args, CONFIG_PATH)
    if args.probe:
        config["probe"]["enabled"] = True
    unknown = sorted(set(config["probe"]["weights"]) - set(PROBE_WEIGHTS))
    if unknown:
        raise _config.ConfigError(f"expected probe.weights in {list(PROBE_WEIGHTS)}, "
                                  f"received {unknown}")
    episodes = config["final_eval"]["episodes"]
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 0:
        raise _config.ConfigError(f"Expected a non-negative integer (0: off). Received: "
                                  f"final_eval.episodes={episodes!r}")
    if config["parallel"] < 1:
        raise _config.ConfigError(f"expected parallel >= 1, received {config['parallel']}")
    if config["coverage"]["enabled"] and len(config["tasks"]) > 1:
        raise _config.ConfigError("coverage.enabled: the coverage grids are columns of one "
                                  "task's physics; expected false for a grid of several tasks")
    if not config["table_steps"] or not all(isinstance(s, int) and s > 0
                                            for s in config["table_steps"]):
        raise _config.ConfigError(f"table_steps: expected positive integer env steps, "
                                  f"received {config['table_steps']!r}")
    backend = make_backend(config)
    out = check_output_dir("out", config["out"])  # Before anything is written.
    runs = grid(config, out)
    picked = only_variants(runs, args.only)
    archived = archived_runs(config)
    _config.save_dict(config, out)
    status = None
    if not args.aggregate_only:
        local = local_runs(picked, archived)
        status = launch(local, config["base_presets"], config["parallel"], backend=backend)
        if config["probe"]["enabled"]:
            probe(local, config, out)
        status.update(final_eval(local))
    results = aggregate(config, out, runs, status, archived)
    print((out / "summary.md").read_text())
    failed = [k for k, v in (status or {}).items() if v.startswith("failed")]
    results["failed"] = failed
    return results


if __name__ == "__main__":
    sys.exit(1 if _config.run_script(main, resumes=True)["failed"] else 0)
