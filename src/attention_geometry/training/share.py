"""`attention-geometry train-shared`: several runs trained at once on one device, one trainer process each
(docs/training.md, "Several small runs on one GPU"). A bert-mini or ViT run leaves most of a GPU idle; N of them
as N processes on the same GPU fill it (with NVIDIA's MPS their kernels also run side by side). Each process is
the ordinary `python -m attention_geometry train --config C --out D`, so each run is what it would be alone:
its run dir, its resume, its time limit; on a CPU its loss.csv is byte for byte the run's alone (tested).

Torch-free: it only starts and waits for the trainer processes. SIGTERM to this process (a cluster's notice at a
job's time limit) is passed on to every trainer, which saves its state and exits 75; the exit status is the first
failing trainer's (other than 75), else 75 if any trainer stopped early, else 0."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from attention_geometry.errors import UserError
from attention_geometry.training.budget import EXIT_STOPPED

__all__ = ["shared_commands", "run_shared", "shared_status", "run_train_shared"]


def shared_commands(
    configs: list[str], outs: list[str], device: str | None, threads: int | None, time_limit: float | None
) -> list[list[str]]:
    """The trainer command of each (config, out) pair: `--threads` is the total, shared evenly (at least 1 each);
    no progress bars (several would overwrite each other's line)."""
    if len(configs) != len(outs):
        raise UserError(f"--out: {len(outs)} run dir(s) for {len(configs)} config(s): give one --out per --config")
    if not configs:
        raise UserError("--config: no run given")
    resolved = [str(Path(o).resolve()) for o in outs]
    twice = sorted({o for o in resolved if resolved.count(o) > 1})
    if twice:
        raise UserError(f"--out: {twice[0]} is given twice (each run trains into its own dir)")
    if threads is not None and threads < 1:
        raise UserError(f"--threads: must be >= 1, got {threads}")
    each = None if threads is None else max(1, threads // len(configs))
    commands = []
    for config, out in zip(configs, outs):
        cmd = [sys.executable, "-m", "attention_geometry", "train", "--no-progress", "--config", config, "--out", out]
        if each is not None:
            cmd += ["--threads", str(each)]
        if device is not None:
            cmd += ["--device", device]
        if time_limit:
            cmd += ["--time-limit", repr(float(time_limit))]
        commands.append(cmd)
    return commands


def run_shared(commands: list[list[str]]) -> list[int]:
    """Start every command at once, pass SIGTERM on to each, wait for all; their exit statuses."""
    procs: list[subprocess.Popen] = []

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        procs.extend(subprocess.Popen(cmd) for cmd in commands)
        return [p.wait() for p in procs]
    finally:
        signal.signal(signal.SIGTERM, previous)


def shared_status(codes: list[int]) -> int:
    """The exit status of the whole: the first failure's (a status other than 0 and EXIT_STOPPED), else
    EXIT_STOPPED if a trainer stopped early (its state saved; the same command resumes), else 0."""
    failed = [c for c in codes if c not in (0, EXIT_STOPPED)]
    if failed:
        return failed[0]
    return EXIT_STOPPED if EXIT_STOPPED in codes else 0


def run_train_shared(args) -> int:
    commands = shared_commands(args.config, args.out, args.device, args.threads, args.time_limit)
    codes = run_shared(commands)
    for out, code in zip(args.out, codes):
        if code:
            print(f"train-shared: the trainer of {out} exited with status {code}", file=sys.stderr)
    return shared_status(codes)
