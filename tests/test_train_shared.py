"""`attention-geometry train-shared` (training/share.py): several runs as as many trainer processes on one device;
each run is what it is alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import run_cli, write_random_corpus, write_run_config_file

from attention_geometry.errors import UserError
from attention_geometry.training.budget import EXIT_STOPPED
from attention_geometry.training.share import shared_commands, shared_status


def test_the_commands_share_the_threads_and_pass_the_device_and_time_limit():
    cmds = shared_commands(["a.yaml", "b.yaml", "c.yaml"], ["A", "B", "C"], "cuda", 8, 30)
    assert [c[c.index("--config") + 1] for c in cmds] == ["a.yaml", "b.yaml", "c.yaml"]
    assert [c[c.index("--out") + 1] for c in cmds] == ["A", "B", "C"]
    for c in cmds:
        assert c[:4] == [sys.executable, "-m", "attention_geometry", "train"] and "--no-progress" in c
        assert c[c.index("--threads") + 1] == "2" and c[c.index("--device") + 1] == "cuda"
        assert c[c.index("--time-limit") + 1] == "30.0"
    bare = shared_commands(["a.yaml"], ["A"], None, None, None)[0]
    assert not {"--threads", "--device", "--time-limit"} & set(bare)
    assert shared_commands(["a.yaml", "b.yaml"], ["A", "B"], None, 1, None)[1][-1] == "1"  # at least one each


@pytest.mark.parametrize(
    "configs, outs, match",
    [
        (["a.yaml", "b.yaml"], ["A"], r"^--out: 1 run dir\(s\) for 2 config\(s\)"),
        (["a.yaml", "b.yaml"], ["A", "./A"], r"^--out: .*A is given twice"),
    ],
)
def test_bad_pairs_are_one_line(configs, outs, match):
    with pytest.raises(UserError, match=match):
        shared_commands(configs, outs, None, None, None)


def test_the_exit_status_is_the_first_failure_else_stopped_else_zero():
    assert shared_status([0, 0]) == 0
    assert shared_status([0, EXIT_STOPPED]) == EXIT_STOPPED
    assert shared_status([EXIT_STOPPED, 2, 1]) == 2
    assert shared_status([1, EXIT_STOPPED]) == 1


def test_sigterm_reaches_every_trainer(tmp_path):
    """The launcher passes SIGTERM on: each (stand-in) trainer exits 75 as a stopped trainer does, and so does the
    launcher."""
    child = textwrap.dedent(
        f"""
        import pathlib, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit({EXIT_STOPPED}))
        pathlib.Path(sys.argv[1]).touch()
        time.sleep(60)
        """
    )
    ready = [tmp_path / "a", tmp_path / "b"]
    parent = textwrap.dedent(
        f"""
        import sys
        from attention_geometry.training.share import run_shared, shared_status
        codes = run_shared([[sys.executable, "-c", {child!r}, p] for p in {[str(p) for p in ready]!r}])
        print(codes)
        sys.exit(shared_status(codes))
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not all(p.exists() for p in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_STOPPED and out.strip() == f"[{EXIT_STOPPED}, {EXIT_STOPPED}]"


@pytest.mark.slow
def test_two_runs_through_the_launcher_equal_each_run_alone(tmp_path):
    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config

    corpus = write_random_corpus(tmp_path / "corpus")
    configs = [
        write_run_config_file(tmp_path / "enc.yaml", corpus, max_steps=6, run="enc"),
        write_run_config_file(tmp_path / "dec.yaml", corpus, objective="decoder", max_steps=6, run="dec"),
    ]
    outs = [tmp_path / "shared-enc", tmp_path / "shared-dec"]
    proc = run_cli(
        "train-shared",
        "--config",
        *map(str, configs),
        "--out",
        *map(str, outs),
        "--threads",
        "2",
        "--device",
        "cpu",
        "--no-progress",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for config, out in zip(configs, outs):
        alone = tmp_path / f"alone-{out.name}"
        train(load_run_config(config), alone, threads=1, device="cpu", progress=False)
        assert (out / "loss.csv").read_text() == (alone / "loss.csv").read_text(), out.name
        assert [r.split(",")[6] for r in (out / "loss.csv").read_text().splitlines()[1:]] == list("0123456")
