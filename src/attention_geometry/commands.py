"""The arguments of the subcommands whose work needs torch (score, score-checkpoints, compare-gqa, prefetch-qk,
score-updates), kept here without torch so that their `--help` and argument errors answer at once: cli.py builds
the parser from this module and imports the working module (scoring/scorer.py, weights/prefetch.py) only to run.
"""

from __future__ import annotations

import argparse
import math

from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.scoring.gqa_methods import GQA_METHODS

__all__ = [
    "num_std_arg",
    "add_arguments_score",
    "add_arguments_score_checkpoints",
    "add_arguments_compare_gqa",
    "add_arguments_prefetch_qk",
    "add_arguments_score_updates",
]


def num_std_arg(text: str) -> float:
    """argparse type of --num-std: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _scoring_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="FILE", help="output table, .csv or .parquet")
    parser.add_argument("--per-head", action="store_true", help="also one row per head (in addition to head 'all')")
    parser.add_argument(
        "--num-std",
        type=num_std_arg,
        default=2.0,
        metavar="K",
        help="directionality threshold: mean + K * std of the row/column norms (default 2)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def add_arguments_score(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help="model directory (config.json + safetensors or pytorch_model.bin), .gguf file, or hub id",
    )
    _scoring_arguments(parser)
    parser._option_string_actions["--out"].help = "output table, .csv or .parquet, or - for CSV on stdout"
    parser.add_argument("--gguf-file", metavar="F", help="GGUF file inside SOURCE (a directory or hub id)")
    parser.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit (default main)")
    parser.add_argument(
        "--name",
        metavar="LABEL",
        help="value of the model column (default: the repo id the "
        "files record, else the hub id, folder or file name: docs/cli.md)",
    )
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="let transformers run the model repository's own code (off by default)",
    )
    parser.add_argument(
        "--gqa-method",
        choices=GQA_METHODS,
        default="correct",
        help="grouped-query layers: the attention's matrix (correct, default) or the paper's expansion (paper: "
        "reproduces its published numbers, a known error: docs/cli.md)",
    )


def add_arguments_score_checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="training run folder with run.yaml and checkpoints/step-XXXXXXX/, or a Hugging Face Trainer output "
        "folder with checkpoint-N/ (docs/paper-code.md)",
    )
    _scoring_arguments(parser)
    parser._option_string_actions["--out"].help = "output table, .csv or .parquet, or - for CSV on stdout"
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"for a Trainer output folder, a run key of the rows ({', '.join(RUN_KEYS)}); repeatable; a folder "
        "named as the authors' released checkpoints ({model}-{mode}-{dataset}[--symmetric-init]) gives the keys "
        "a --label does not (docs/paper-code.md)",
    )


def add_arguments_compare_gqa(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="model directory, .gguf file or hub id (as for `score`)")
    parser.add_argument("--out", required=True, metavar="FILE", help="output table, .csv or .parquet")
    parser.add_argument("--num-std", type=num_std_arg, default=2.0, help="directionality threshold (default 2)")
    parser.add_argument("--gguf-file", metavar="F", help="GGUF file inside SOURCE (a directory or hub id)")
    parser.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit (default main)")
    parser.add_argument("--name", metavar="LABEL", help="value of the model column")
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="let transformers run the repository's code (as for score)"
    )


def add_arguments_prefetch_qk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="hub id (or a local model folder)")
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder to write (replaced whole: a new, empty or earlier prefetch-qk folder; never the source)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace DIR even if it holds other files (or is a file or a link)"
    )
    parser.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit (default main)")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="the model needs its repository's own code (copied with the config; pinned commit only)",
    )
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def add_arguments_score_updates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="training run dir (run.yaml, checkpoints/step-XXXXXXX/)")
    parser.add_argument(
        "--corpus", required=True, metavar="DIR", help="prepared corpus dir (heldout.npy, manifest.json)"
    )
    parser.add_argument("--out", required=True, metavar="FILE.csv", help="update rows (docs/contracts.md) as CSV")
    parser.add_argument("--steps", type=int, nargs="+", metavar="STEP", help="snapshot steps to score (default: all)")
    parser.add_argument("--batches", type=int, help="held-out batches per snapshot (default 4)")
    parser.add_argument("--batch-size", type=int, help="blocks per batch (default 32)")
    parser.add_argument("--seed", type=int, help="seed of the block choice and the MLM mask (default 0)")
    parser.add_argument("--num-std", type=num_std_arg, help="directionality threshold (mean + k std; default 2)")
    parser.add_argument(
        "--mlm-probability", type=float, default=None, help="masked-LM rate (default: run.yaml's, else 0.15)"
    )
    parser.add_argument("--device", default="cpu", help="torch device (cpu, cuda, ...)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
