"""Stopping a training run early and resuming it (training/budget.py): the stop-before-budget decision, runs
stopped by `--time-limit` and by SIGTERM (one process and two DDP processes) that, run again, end identical to
an uninterrupted run, and the workflow's wiring (training.requeues -> the rule's --time-limit and retries; a
trainer stopped by SIGTERM under Snakemake is resumed by the rule's retry)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import BIN, SNAKEMAKE, cli_in_process, copy_workflow, env, run_names, snakemake
from helpers import run_cli as _cli
from helpers import write_random_corpus as write_corpus
from helpers import write_run_config_file as write_run

from attention_geometry.training import launch
from attention_geometry.training.budget import EXIT_STOPPED, Budget, TermSignal, out_of_time
from attention_geometry.training.loop import train
from attention_geometry.training.run_config import load_run_config

SNAPS = ("step-0000000", "step-0000010", "step-0000020")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c")


def _config(tmp_path: Path, corpus: Path, **kw) -> Path:
    # rows every 3 updates and a state only at snapshots: a stop mostly falls inside a loss window
    settings = dict(max_steps=20, snapshot_every=10, eval_every=4, log_every=3, state_every=100)
    return write_run(tmp_path / "run.yaml", corpus, **{**settings, **kw})


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus):
    """An uninterrupted run of _config's settings."""
    d = tmp_path_factory.mktemp("ref")
    cfg = _config(d, corpus)
    train(load_run_config(cfg), d / "out", progress=False)
    return d / "out"


def _assert_same_run(out: Path, ref: Path, snaps=SNAPS) -> None:
    assert (out / "loss.csv").read_bytes() == (ref / "loss.csv").read_bytes()
    for snap in snaps:
        a = (out / "checkpoints" / snap / "model.safetensors").read_bytes()
        assert a == (ref / "checkpoints" / snap / "model.safetensors").read_bytes(), snap
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == list(snaps)
    assert (out / "state" / "model.safetensors").read_bytes() == (ref / "state" / "model.safetensors").read_bytes()


def _state(out: Path) -> dict:
    return json.loads((out / "state" / "state.json").read_text())


class _Clock:
    """A clock that advances one second each time it is read: the loop's reads, and so the step a budget of
    N seconds stops at, are deterministic."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


# ------------------------------------------------------------------------------------------- the decision


def test_out_of_time_reserves_the_longest_update_and_state_save():
    assert not out_of_time(elapsed=50, limit=None, longest_step=1e9, longest_save=1e9)  # no limit
    assert not out_of_time(elapsed=50, limit=100, longest_step=30, longest_save=20)  # 100: just fits
    assert out_of_time(elapsed=50.5, limit=100, longest_step=30, longest_save=20)
    assert out_of_time(elapsed=101, limit=100, longest_step=0, longest_save=0)
    assert not out_of_time(elapsed=10, limit=100, longest_step=89, longest_save=0)


def test_budget_keeps_the_longest_times_and_trains_one_update_first():
    now = [0.0]
    b = Budget(limit=100.0, started=0.0, clock=lambda: now[0])
    now[0] = 99.0  # start-up took almost the whole budget: still one update first, so that requeues progress
    assert not b.exhausted()
    b.start_step()
    now[0] = 99.75
    b.end_step()
    assert b.longest_step == 0.75 and b.exhausted()

    b = Budget(limit=100.0, started=0.0, clock=lambda: now[0])
    now[0] = 10.0
    b.start_step()
    now[0] = 12.0
    b.end_step()  # an update of 2 s
    b.start_step()
    now[0] = 13.0
    b.end_step()  # then one of 1 s: the longest stays 2
    b.saved(5.0)
    b.saved(3.0)
    assert (b.longest_step, b.longest_save) == (2.0, 5.0)
    now[0] = 93.0
    assert not b.exhausted()  # 93 + 2 + 5 = 100
    now[0] = 93.01
    assert b.exhausted()
    assert not Budget(limit=None, clock=lambda: 1e12).exhausted()
    with pytest.raises(ValueError, match="above 0"):
        Budget(limit=0.0)


def test_term_signal_sets_a_flag_and_restores_the_handler():
    before = signal.getsignal(signal.SIGTERM)
    with TermSignal() as term:
        assert not term.received
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs between bytecodes of the main thread
        assert term.received
    assert signal.getsignal(signal.SIGTERM) == before


def test_bad_time_limit_is_one_line():
    for bad in ("-1", "nan", "ten"):
        code, _, err = cli_in_process(["train", "--config", "x.yaml", "--out", "o", "--time-limit", bad])
        assert code == 2 and err.count("\n") == 1 and "--time-limit" in err, (bad, err)


# ------------------------------------------------------------------------------ stopped, then resumed


def test_runs_stopped_at_many_points_resume_to_the_uninterrupted_run(tmp_path, corpus, reference):
    """A budget on a fake clock stops the run after different updates: inside a loss window (its updates'
    losses saved with the state), at a row step, at a snapshot step (whose state is on disk already). Each,
    run again without a limit, ends byte-identical to the uninterrupted run."""
    cfg = load_run_config(_config(tmp_path, corpus))
    stops = []
    for limit in (4, 14, 20, 28):
        out = tmp_path / f"out-{limit}"
        summary = train(cfg, out, progress=False, budget=Budget(limit=float(limit), clock=_Clock()))
        assert summary["status"] == "stopped" and 0 < summary["step"] < 20, summary
        state = _state(out)
        assert state["step"] == summary["step"]
        stops.append((state["step"], len(state["loss_window"])))
        log = (out / "train.log").read_text()
        assert f"stopped for the time limit ({limit / 60:.4g} min" in log
        assert f"at step {state['step']}, its state saved: running the same command resumes" in log
        assert not (out / "checkpoints" / "step-0000020").exists()
        assert train(cfg, out, progress=False)["status"] == "resumed"
        _assert_same_run(out, reference)
    assert any(n for _, n in stops) and any(not n for _, n in stops), stops  # inside a window and not


def test_a_tiny_real_time_limit_stops_after_one_update(tmp_path, corpus, reference):
    cfg = load_run_config(_config(tmp_path, corpus))
    out = tmp_path / "out"
    summary = train(cfg, out, progress=False, budget=Budget(limit=1e-3))
    assert summary["status"] == "stopped" and summary["step"] == 1 and _state(out)["step"] == 1
    while (s := train(cfg, out, progress=False, budget=Budget(limit=1e-3)))["status"] == "stopped":
        assert s["step"] == _state(out)["step"]  # each requeue makes progress
    assert s["status"] == "resumed" and s["step"] == 20
    _assert_same_run(out, reference)


@pytest.mark.slow
def test_cli_time_limit_exits_75_and_the_same_command_resumes(tmp_path, corpus, reference):
    cfg = _config(tmp_path, corpus)
    out = tmp_path / "out"
    args = ("train", "--config", str(cfg), "--out", str(out), "--no-progress")
    res = _cli(*args, "--time-limit", "0.001")  # 60 ms: spent by the imports, so one update, then stop
    assert res.returncode == EXIT_STOPPED == 75, res.stderr[-2000:]
    assert "stopped for the time limit" in res.stderr and "the same command resumes it" in res.stderr
    assert _state(out)["step"] == 1
    res = _cli(*args, "--time-limit", "0")  # 0: no limit
    assert res.returncode == 0, res.stderr[-2000:]
    _assert_same_run(out, reference)


@pytest.mark.slow
def test_sigterm_saves_the_state_exits_75_and_resumes_bitwise(tmp_path, corpus):
    overrides = {"num_layers": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32}
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=400,
        snapshot_every=200,
        eval_every=50,
        log_every=7,
        state_every=10,
        overrides=overrides,
    )
    ref = tmp_path / "ref"
    train(load_run_config(cfg), ref, progress=False)

    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "attention_geometry.cli", "train", "--config", str(cfg), "--out", str(out)]
    proc = subprocess.Popen(
        [*cmd, "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 120
    while not (out / "state" / "state.json").is_file():
        assert proc.poll() is None and time.time() < deadline, "training ended before a state was written"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, err[-2000:]
    step = _state(out)["step"]
    assert 0 < step < 400 and f"stopped on SIGTERM at step {step}, state saved" in err
    assert f"stopped on SIGTERM at step {step}, its state saved" in (out / "train.log").read_text()
    assert train(load_run_config(cfg), out, progress=False)["status"] == "resumed"
    _assert_same_run(out, ref, snaps=("step-0000000", "step-0000200", "step-0000400"))


@pytest.mark.slow
def test_two_ddp_processes_stop_at_the_same_step_and_resume(tmp_path, corpus):
    cfg = write_run(
        tmp_path / "run.yaml",
        corpus,
        max_steps=8,
        snapshot_steps=[],
        eval_every=4,
        log_every=3,
        state_every=None,
        overrides={"batch_size": 8, "grad_accum": 2},
    )
    one = tmp_path / "one"
    train(load_run_config(cfg), one, progress=False)
    two = tmp_path / "two"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd = [*torchrun, "-m", "attention_geometry.cli", "train", "--config", str(cfg), "--out", str(two)]
    cmd += ["--no-progress", "--device", "cpu"]
    run = dict(capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    res = subprocess.run([*cmd, "--time-limit", "0.001"], **run)
    assert res.returncode != 0 and "stopped for the time limit" in res.stderr, res.stderr[-3000:]
    assert _state(two)["step"] == 1 and "stopped for the time limit" in (two / "train.log").read_text()
    res = subprocess.run(cmd, **run)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resuming run" in (two / "train.log").read_text()
    with open(one / "loss.csv", newline="") as f1, open(two / "loss.csv", newline="") as f2:
        r1, r2 = list(csv.DictReader(f1)), list(csv.DictReader(f2))
    assert [r["step"] for r in r1] == [r["step"] for r in r2] == ["0", "3", "4", "6", "8"]
    for a, b in zip(r1, r2):
        for col in ("train_loss", "eval_loss"):
            if a[col]:
                assert float(b[col]) == pytest.approx(float(a[col]), rel=1e-4), (a["step"], col)


# ------------------------------------------------------------------------------------------- the workflow


def test_requeues_give_the_rule_a_time_limit_below_the_runtime_and_retries():
    assert launch.time_limit(1440, requeues=5) == 1425  # 15 min at most held back
    assert launch.time_limit(120, requeues=1) == 108  # 10 %
    assert launch.time_limit(10, requeues=1) == 9  # at least 1 min
    assert launch.time_limit(1, requeues=1) == 1
    assert launch.time_limit(1440, requeues=0) is None  # no requeues: no limit
    section = {"gpus": 1, "threads": 4, "runtime": 1440, "requeues": 5}
    one = launch.train_launch(section)
    assert (one.time_limit, one.retries, one.resources) == (1425, 5, {"gpu": 1})
    assert launch.train_launch({**section, "gpus": 4, "nodes": 2}).time_limit == 1425
    default = launch.train_launch({"gpus": 0, "threads": 1, "runtime": 120, "requeues": 0})
    assert (default.time_limit, default.retries) == (None, None)  # the profile's --retries stay in force


def test_paper_config_fits_a_24_hour_limit_with_requeues():
    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "paper.yaml").read_text())
    t = cfg["training"]
    assert t["runtime"] <= 1440 and t["requeues"] >= 3
    # the longest run (200,000 steps) at the comment's planning rate of 2,500 steps an hour, in the jobs it has
    limit_h = launch.time_limit(t["runtime"], t["requeues"]) / 60
    assert (t["requeues"] + 1) * limit_h * 2500 >= 200_000


@pytest.mark.workflow
def test_rule_passes_the_time_limit_from_the_runtime(tmp_path):
    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "smoke.yaml").read_text())
    path = tmp_path / "c.yaml"
    for requeues, limit in ((0, 0), (2, 69)):
        cfg["training"].update(runtime=77, requeues=requeues)
        path.write_text(yaml.safe_dump(cfg))
        proc = snakemake("-n", "-p", "--cores", "4", "--configfile", str(path), "--config", f"results={tmp_path}/r")
        commands = re.findall(r"python -m attention_geometry train .*", proc.stdout)
        assert len(commands) == len(run_names(cfg)), proc.stdout[-3000:]
        assert all(f" --time-limit {limit} " in c for c in commands), commands[0]
        assert f"trainer_time_limit={limit}" in proc.stdout


@pytest.mark.workflow
def test_a_trainer_stopped_by_sigterm_is_resumed_by_the_rules_retry(tmp_path):
    """SIGTERM to the trainer (as SLURM sends at a time limit) while Snakemake runs it: it saves its state and
    exits 75, the job fails without train.done, Snakemake's retry (training.requeues) resumes it, and the run
    ends bitwise equal to an uninterrupted one."""
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    cfg["results"] = "results-requeue"
    cfg["training"]["requeues"] = 1
    for group in cfg["training"]["groups"].values():
        group["settings"].update(max_steps=300, snapshot_every=150, state_every=20, log_every=7)
        for entry in group["runs"]:
            entry.pop("max_steps", None)
    cfg["updates"]["steps"] = [0, 150]
    (wf / "config" / "requeue.yaml").write_text(yaml.safe_dump(cfg))
    run = sorted(run_names(cfg))[0]
    target = f"results-requeue/runs/{run}/train.done"
    run_dir = wf / "results-requeue" / "runs" / run
    proc = subprocess.Popen(
        [SNAKEMAKE, "--configfile", "config/requeue.yaml", "--cores", "1", target],
        cwd=wf,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, signalled = time.time() + 600, False
        while not signalled and time.time() < deadline and proc.poll() is None:
            try:
                ready = _state(run_dir)["step"] >= 20
                pid = int((run_dir.parent / f"{run}.lock").read_text())
            except (ValueError, KeyError, OSError):
                ready = False
            if ready:
                os.kill(pid, signal.SIGTERM)
                signalled = True
            time.sleep(0.1)
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert signalled, "no training state within the time limit"
    assert proc.returncode == 0, out[-4000:]
    assert (wf / target).exists()
    log = (run_dir / "train.log").read_text()
    stopped = [int(m) for m in re.findall(r"stopped on SIGTERM at step (\d+)", log)]
    assert len(stopped) == 1 and re.findall(r"resuming .*? at step (\d+)", log) == [str(stopped[0])]
    # the stopped attempt's rule log, as Snakemake shows it (it removes a failed job's log before the retry)
    assert f"train_model {run}: the trainer stopped early (time limit or SIGTERM)" in out and "restart job" in out

    fresh = tmp_path / "fresh"
    config = wf / "results-requeue" / "configs" / "runs" / f"{run}.yaml"
    cli = [str(BIN / "attention-geometry"), "train", "--config", str(config), "--out", str(fresh), "--no-progress"]
    r = subprocess.run(cli, cwd=wf, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run_dir / "loss.csv").read_bytes() == (fresh / "loss.csv").read_bytes()
    final = "checkpoints/step-0000300/model.safetensors"
    assert (run_dir / final).read_bytes() == (fresh / final).read_bytes()
