"""`attention-geometry train`: train (or resume) one run from a RUN.yaml."""

from __future__ import annotations

import math
import os
import sys
import time

from attention_geometry.errors import UserError
from attention_geometry.training.budget import EXIT_STOPPED, Budget, TermSignal, is_process_command


def run_train(args) -> int:
    started = time.monotonic()  # the budget counts the imports and the loading too
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: must be >= 1, got {args.threads}")
    limit = args.time_limit
    if limit is not None and not (math.isfinite(limit) and limit >= 0):
        raise UserError(f"--time-limit: must be a number of minutes (0: no limit), got {limit:g}")
    budget = Budget(limit * 60 if limit else None, started)
    # SIGTERM is handled from here to the end of the process (the loop's own handler nests inside): one before
    # the loop stops it before its first update, one after the run finished changes nothing (exit 0, not 143)
    with TermSignal(keep=is_process_command("train")):
        from attention_geometry.training.loop import train  # torch: imported only when training runs
        from attention_geometry.training.run_config import load_run_config

        cfg = load_run_config(args.config)
        summary = train(
            cfg, args.out, threads=args.threads, device=args.device, progress=not args.no_progress, budget=budget
        )
    code = EXIT_STOPPED if summary["status"] == "stopped" else 0  # every DDP process alike
    if os.environ.get("RANK", "0") != "0":
        return code
    if summary["status"] == "stopped":
        print(
            f"{summary['run']}: stopped {summary['reason']} at step {summary['step']}, state saved; the same "
            f"command resumes it (exit status {EXIT_STOPPED})",
            file=sys.stderr,
        )
    elif summary["status"] == "finished":
        print(f"{summary['run']}: already finished at step {summary['step']}, nothing to do", file=sys.stderr)
        from attention_geometry.formats.rundir import PROVENANCE_CSV, missing_provenance

        if not os.path.exists(os.path.join(args.out, PROVENANCE_CSV)):
            print(f"warning: {missing_provenance(args.out, summary['run'])}", file=sys.stderr)
    else:
        print(
            f"{summary['run']}: {summary['status']} to step {summary['step']} in {summary['seconds']:.1f} s "
            f"({summary['s_per_step']:.4f} s/step)",
            file=sys.stderr,
        )
    return code
