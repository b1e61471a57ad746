"""Training BERT encoders (masked LM) and decoders (causal LM) from scratch under four self-attention
initializations, with weight snapshots, a loss log and bitwise resume. See docs/training.md.

Public API: build_model(size, objective, init, seed, **overrides), train(RunConfig, out),
load_run_config(path), SIZES / OBJECTIVES / INITS, the objectives' batches (mask_tokens, make_batch) and
loss (lm_loss); CLI `attention-geometry train` (add_arguments_train, run_train).

    config.py      RUN.yaml, its validation, the resolved run (run.yaml)
    models.py      sizes, initializations, the model and its training forward / loss
    batches.py     learning-rate schedule, example order, masked-LM batches
    checkpoint.py  what a run writes: run.yaml, loss.csv, snapshots, the resumable state
    loop.py        train(): the loop, DDP, resume"""

from __future__ import annotations

from ..contract import LOSS_COLUMNS
from .batches import lr_at, make_batch, mask_tokens
from .config import RunConfig, load_run_config, read_corpus, resolve_run, run_config_from_dict
from .loop import train
from .models import (
    INITS,
    OBJECTIVES,
    SIZES,
    Hyper,
    apply_init,
    build_model,
    lm_loss,
    resolve_hyper,
    symmetry_penalty,
)

__all__ = [
    "build_model", "apply_init", "lm_loss", "symmetry_penalty", "train", "lr_at", "mask_tokens", "make_batch",
    "RunConfig", "Hyper", "resolve_hyper", "load_run_config", "run_config_from_dict", "read_corpus", "resolve_run",
    "SIZES", "OBJECTIVES", "INITS", "LOSS_COLUMNS", "add_arguments_train", "run_train",
]


def add_arguments_train(parser) -> None:
    parser.add_argument("--config", required=True, help="RUN.yaml (keys: see docs/training.md)")
    parser.add_argument("--out", required=True, help="run directory (results/runs/{run}); same again = resume")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: RUN.yaml threads)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="default: RUN.yaml device (auto = cuda when available)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_train(args) -> int:
    import sys

    from ..errors import UserError

    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads: must be >= 1, got {args.threads}")
    cfg = load_run_config(args.config)
    summary = train(cfg, args.out, threads=args.threads, device=args.device, progress=not args.no_progress)
    import os

    if os.environ.get("RANK", "0") != "0":
        return 0
    if summary["status"] == "finished":
        print(f"{summary['run']}: already finished at step {summary['step']}, nothing to do", file=sys.stderr)
    else:
        print(f"{summary['run']}: {summary['status']} to step {summary['step']} in {summary['seconds']:.1f} s "
              f"({summary['s_per_step']:.4f} s/step)", file=sys.stderr)
    return 0
