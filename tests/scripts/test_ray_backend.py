"""The grid launcher's Ray backend (`experiments/agents.py`, ``backend.name=ray``) on a Ray
head started on this machine, connected by its address as a user's existing cluster is."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tests.scripts import _experiments

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def agents():
    return _experiments.load("agents")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head():
    """``{address, client}`` (``host:port``, ``ray://host:port``) of a Ray head (2 CPUs)
    started with ``ray start --head`` on loopback in a process group of its own (its own
    ports and temp dir: two test processes can each have one), ended, that group only,
    after the module's tests."""
    port, client, agent = _free_port(), _free_port(), _free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short unix socket paths
    log = open(os.path.join(temp, "head.log"), "w")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
         f"--port={port}", f"--ray-client-server-port={client}",
         f"--dashboard-agent-listen-port={agent}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}"],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=os.setpgrp)
    try:
        deadline = time.time() + 120
        while "Ray runtime started" not in open(log.name).read():
            assert process.poll() is None and time.time() < deadline, open(log.name).read()
            time.sleep(0.5)
        yield {"address": f"127.0.0.1:{port}", "client": f"ray://127.0.0.1:{client}"}
    finally:
        ray.shutdown()
        process.terminate()  # `ray start --block` then ends the head's processes
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what is left of its group, if anything
        except ProcessLookupError:
            pass
        process.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _backend(agents, head, num_cpus=1):
    return agents.make_backend({"backend": {"name": "ray", "address": head["address"],
                                            "num_cpus": num_cpus}})


def _fake_train(code):
    """A training command that prints to stdout and stderr, commits one episode if it exits
    0 (a finished one-episode run) and exits ``code``."""
    return ("import pathlib, sys\n"
            "logdir = pathlib.Path(sys.argv[1])\n"
            "print('fake trainer of', logdir.name, flush=True)\n"
            "print('a warning', file=sys.stderr, flush=True)\n"
            f"if {code} == 0:\n"
            "    (logdir / 'episodes').mkdir(parents=True, exist_ok=True)\n"
            "    (logdir / 'episodes' / '000000-16.npz').touch()\n"
            f"raise SystemExit({code})\n")


def _alive(pid):
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_ray_runs_finish_with_their_statuses_log_and_launch_rows_and_rerun_skips(
        agents, head, tmp_path, monkeypatch):
    """Runs exiting 0 and 3 as Ray tasks are trained and failed (3), each launch recorded
    with the node it ran on, the command's output in train.log; a run whose command cannot
    start on the node fails in one line; the rerun skips the finished run only."""
    codes = {0: 0, 1: 3}
    monkeypatch.setattr(agents, "train_command", lambda run, presets: [
        sys.executable, "-c", _fake_train(codes[run["seed"]]), str(run["logdir"])])
    evaluated = []
    monkeypatch.setattr(agents, "final_eval",
                        lambda runs, say, name: evaluated.append(runs[0]["seed"]) or {})
    runs = [{"logdir": tmp_path / f"seed{s}", "variant": "v", "seed": s, "episodes": 1}
            for s in codes]
    runs.append({"logdir": tmp_path / "seed2", "variant": "v", "seed": 2, "episodes": 1,
                 "command": [str(tmp_path / "no-such-python"), "-c", ""]})
    backend = _backend(agents, head)
    said = []
    status = agents.launch(runs, [], parallel=3, say=said.append, backend=backend)
    assert said[0].endswith("3 to run (3 at a time, as Ray tasks)"), said
    assert [status[str(run["logdir"])] for run in runs[:2]] == ["trained", "failed (3)"]
    lost = status[str(runs[2]["logdir"])]
    assert lost.startswith("failed (RuntimeError: on ") and "no-such-python" in lost, lost
    assert "\n" not in lost and evaluated == [0]
    outcomes = zip(runs, ("finished", "failed", "failed"), (0, 3, None), strict=True)
    for run, outcome, code in outcomes:
        (launch,) = agents.launches(run)
        assert (launch["outcome"], launch["returncode"], launch["backend"]) == (
            outcome, code, "ray"), launch
        assert launch["host"] == socket.gethostname() and launch["launcher"] == os.getpid()
        assert launch["seconds"] > 0 and launch["resumed_at"] == 0
    for run in runs[:2]:
        (launch,) = agents.launches(run)
        assert launch["node"] == socket.gethostname() and launch["pid"] > 0, launch
        log = (agents.launch_logs(run) / "train.log").read_text()
        assert log == (f"$ {' '.join(launch['command'])}\nfake trainer of "
                       f"{run['logdir'].name}\na warning\n"), log
    assert "no-such-python" in agents.launches(runs[2])[0]["error"]

    said.clear()
    status = agents.launch(runs, [], parallel=3, say=said.append, backend=backend)
    assert said[0].endswith("1 already finished, 2 to run (3 at a time, as Ray tasks)"), said
    assert [status[str(run["logdir"])][:10] for run in runs] == [
        "finished b", "failed (3)", "failed (Ru"]
    assert [len(agents.launches(run)) for run in runs] == [1, 2, 2]
    log = (agents.launch_logs(runs[1]) / "train.log").read_text()
    assert log.count("fake trainer of seed1") == 2  # appended, not overwritten


def test_ctrl_c_cancels_the_ray_tasks_and_kills_their_trainers(agents, head, tmp_path,
                                                                monkeypatch):
    """Ctrl-C while two trainers run as Ray tasks: re-raised, both recorded as interrupted,
    and both trainer processes are gone (not left training)."""
    monkeypatch.setattr(agents, "final_eval", lambda runs, say, name: {})
    pid_files = [tmp_path / f"seed{s}.pid" for s in (0, 1)]
    monkeypatch.setattr(agents, "train_command", lambda run, presets: [
        sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write("
        "str(os.getpid())); time.sleep(120)", str(pid_files[run["seed"]])])
    runs = [{"logdir": tmp_path / f"seed{s}", "variant": "v", "seed": s, "episodes": 1}
            for s in (0, 1)]
    sleep, training = agents.time.sleep, []

    def interrupt_once_both_train(seconds):
        if (threading.current_thread() is threading.main_thread()
                and all(path.exists() and path.read_text() for path in pid_files)):
            monkeypatch.setattr(agents.time, "sleep", sleep)
            training.extend(_alive(int(path.read_text())) for path in pid_files)
            raise KeyboardInterrupt
        sleep(seconds)

    monkeypatch.setattr(agents.time, "sleep", interrupt_once_both_train)
    start = time.time()
    with pytest.raises(KeyboardInterrupt):
        agents.launch(runs, [], parallel=2, say=lambda line: None,
                      backend=_backend(agents, head))
    assert time.time() - start < 60 and training == [True, True]
    for run in runs:
        (launch,) = agents.launches(run)
        assert (launch["outcome"], launch["returncode"], launch["backend"]) == (
            "interrupted", None, "ray"), launch
    pids = [int(path.read_text()) for path in pid_files]
    deadline = time.time() + 15
    while any(map(_alive, pids)) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, pids)), pids


@pytest.mark.slow  # 40 s; the backend's bookkeeping is checked above with fake trainers
def test_debug_grid_trains_on_ray_and_a_rerun_skips_it(agents, head, tmp_path):
    """The debug grid end to end on the Ray backend (2 runs side by side), then the same
    command again: nothing launched, the same results."""
    argv = ["--preset", "debug", "--out", str(tmp_path), "--parallel", "2",
            "--set", "backend.name=ray", "--set", f"backend.address={head['address']}"]
    results = agents.main(argv)
    assert results["failed"] == []
    variants = json.loads((tmp_path / "results.json").read_text())["variants"]
    assert list(variants) == ["deterministic", "reparameterization"]
    runs = []
    for name, v in variants.items():
        run = v["runs"]["0"]
        assert run["status"] == "trained" and run["finished"] and run["episodes"] == 3, run
        assert run["final_eval_return"] is not None and run["training_seconds"] > 0
        runs.append({"logdir": tmp_path / "runs" / name / "seed0"})
    for run in runs:
        (launch,) = agents.launches(run)
        assert (launch["outcome"], launch["backend"], launch["node"]) == (
            "finished", "ray", socket.gethostname()), launch
    again = agents.main(argv)
    assert again["failed"] == [] and [len(agents.launches(run)) for run in runs] == [1, 1]
    assert [v["runs"]["0"]["status"] for v in again["variants"].values()] == [
        "finished before"] * 2


def test_a_ray_client_address_runs_the_same(head, tmp_path):
    """``backend.address=ray://...`` (Ray Client, the cluster's client server): the same
    statuses and rows, from a process of its own (this one is connected to the head)."""
    code = f"""
import json, sys
from bayes_planet.experiment import load_script
agents = load_script({str(_experiments.EXPERIMENTS / "agents.py")!r})
agents.train_command = lambda run, presets: [
    sys.executable, "-c", f"print('seed', {{run['seed']}}); raise SystemExit({{run['seed']}})"]
agents.final_eval = lambda runs, say, name: {{}}
runs = [{{"logdir": {str(tmp_path)!r} + f"/seed{{s}}", "variant": "v", "seed": s, "episodes": 1}}
        for s in (0, 3)]
backend = agents.make_backend({{"backend": {{"name": "ray", "address": {head["client"]!r},
                                            "num_cpus": 1}}}})
status = agents.launch(runs, [], parallel=2, say=lambda line: None, backend=backend)
print(json.dumps([[status[run["logdir"]] for run in runs]] + [agents.launches(run) for run in runs]))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    status, *launches = json.loads(result.stdout.splitlines()[-1])
    assert status == ["trained", "failed (3)"]
    assert [(x["outcome"], x["returncode"], x["backend"], x["node"]) for (x,) in launches] == [
        ("finished", 0, "ray", socket.gethostname()), ("failed", 3, "ray", socket.gethostname())]
    assert (tmp_path / "seed3.launch" / "train.log").read_text().endswith("\nseed 3\n")
