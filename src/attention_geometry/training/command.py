"""`attention-geometry train`: train (or resume) one run from a RUN.yaml."""

from __future__ import annotations

import os
import sys

from attention_geometry.errors import UserError


def add_arguments_train(parser) -> None:
    parser.add_argument("--config", required=True, help="RUN.yaml (keys: see docs/training.md)")
    parser.add_argument("--out", required=True, help="run directory (results/runs/{run}); same again = resume")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: RUN.yaml threads)")
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default=None,
        help="default: RUN.yaml device (auto = cuda when available)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_train(args) -> int:
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: must be >= 1, got {args.threads}")
    from attention_geometry.training.loop import train  # torch: imported only when training runs
    from attention_geometry.training.run_config import load_run_config

    cfg = load_run_config(args.config)
    summary = train(cfg, args.out, threads=args.threads, device=args.device, progress=not args.no_progress)
    if os.environ.get("RANK", "0") != "0":
        return 0
    if summary["status"] == "finished":
        print(f"{summary['run']}: already finished at step {summary['step']}, nothing to do", file=sys.stderr)
    else:
        print(
            f"{summary['run']}: {summary['status']} to step {summary['step']} in {summary['seconds']:.1f} s "
            f"({summary['s_per_step']:.4f} s/step)",
            file=sys.stderr,
        )
    return 0
