"""`attention-geometry` console script.

COMMANDS is the table of subcommands: each one's help line and the function that adds its arguments
(commands.py, torch-free, so every `--help` answers at once); `runner` names the function that does its work,
`run_NAME(args) -> int` in its own module, and imports only that module, after the arguments parsed, so
`attention-geometry score ...` does not import the training stack.
A UserError (bad input) is printed as one line `error: ...` on stderr with exit status 2; so is a bad
argument of a subcommand (argparse's own message, without the usage lines: `--help` shows them). A write the
storage refuses that a command let through (a full disk, a read-only file system; files.write_failure) is one
line naming the output, exit status 1. Standard output is part of the output: a command never runs with it
closed (what it prints would be lost, exit status 2), a write to it that fails is one line (exit status 1), and
a reader that went away (`| head`) ends the command quietly with exit status 141, as SIGPIPE ends a Unix tool.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

from attention_geometry import __version__, commands
from attention_geometry.errors import UserError

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool that SIGPIPE ended


class Command(NamedTuple):
    help: str  # the one line of `attention-geometry --help`, and the subcommand's description
    add_arguments: Callable[[argparse.ArgumentParser], None]  # in commands.py


COMMANDS: dict[str, Command] = {
    "score": Command(
        "score the self-attention W_qk of a model (dir, GGUF or hub id)",
        commands.add_arguments_score,
    ),
    "score-checkpoints": Command(
        "score every weight snapshot of a training run",
        commands.add_arguments_score_checkpoints,
    ),
    "compare-gqa": Command(
        "a grouped-query model's W_qk scores by the attention's matrix and by the paper's expansion",
        commands.add_arguments_compare_gqa,
    ),
    "prefetch-qk": Command(
        "fetch a hub model's q/k tensors and config into a local folder",
        commands.add_arguments_prefetch_qk,
    ),
    "fetch-hub-data": Command(
        "fetch the hub files a corpus or image set reads (data files, tokenizer) into a folder, for offline prepares",
        commands.add_arguments_fetch_hub_data,
    ),
    "prepare-corpus": Command(
        "tokenize a corpus into fixed-length blocks",
        commands.add_arguments_prepare_corpus,
    ),
    "prepare-images": Command(
        "prepare an image set (digits, CIFAR-10) with a held-out split",
        commands.add_arguments_prepare_images,
    ),
    "train": Command(
        "train (or resume) one run from a RUN.yaml",
        commands.add_arguments_train,
    ),
    "show-run": Command(
        "print a planned run's settings from the workflow config alone (before its corpus is prepared)",
        commands.add_arguments_show_run,
    ),
    "train-shared": Command(
        "train several runs at once on one device (e.g. small runs sharing a GPU), one process each",
        commands.add_arguments_train_shared,
    ),
    "score-updates": Command(
        "score the W_qk gradients and applied updates of a run",
        commands.add_arguments_score_updates,
    ),
    "score-null": Command(
        "score randomly initialized models of a run's shape (the null)",
        commands.add_arguments_score_null,
    ),
    "concat-tables": Command(
        "concatenate per-run/per-model tables into one tidy table",
        commands.add_arguments_concat_tables,
    ),
    "extract-wqk": Command(
        "write a model's median-symmetry layer W_qk (Figure 1) to .npz",
        commands.add_arguments_extract_wqk,
    ),
    "run-notebook": Command(
        "run a figure notebook with papermill; a failing cell is one error line and its traceback",
        commands.add_arguments_run_notebook,
    ),
    "join-parts": Command(
        "join a model file shipped in parts, checking its sha256",
        commands.add_arguments_join_parts,
    ),
    "locate-package": Command(
        "print the path of a file or folder inside an installed package (pkg:PACKAGE/PATH), checking its sha256",
        commands.add_arguments_locate_package,
    ),
    "symmetry-speedup": Command(
        "tabulate symmetry vs loss gain and speed-up per ablation run",
        commands.add_arguments_symmetry_speedup,
    ),
    "input-sums": Command(
        "record the sha256 of files (what a workflow rule read) as `sha256sum` lines",
        commands.add_arguments_input_sums,
    ),
    "record-corpus": Command(
        "write the committed record of a prepared corpus: its manifest's sha256 and counts",
        commands.add_arguments_record_corpus,
    ),
}


def runner(name: str) -> Callable[[argparse.Namespace], int]:
    """The function that runs subcommand `name`; only its module is imported (the scoring and training modules
    import torch)."""
    match name:
        case "score":
            from attention_geometry.scoring.scorer import run_score as run
        case "score-checkpoints":
            from attention_geometry.scoring.scorer import run_score_checkpoints as run
        case "compare-gqa":
            from attention_geometry.scoring.scorer import run_compare_gqa as run
        case "prefetch-qk":
            from attention_geometry.weights.prefetch import run_prefetch_qk as run
        case "fetch-hub-data":
            from attention_geometry.data.fetch import run_fetch_hub_data as run
        case "prepare-corpus":
            from attention_geometry.data.prepare import run_prepare_corpus as run
        case "prepare-images":
            from attention_geometry.data.images import run_prepare_images as run
        case "train":
            from attention_geometry.training.command import run_train as run
        case "show-run":
            from attention_geometry.workflow.show_run import run_show_run as run
        case "train-shared":
            from attention_geometry.training.share import run_train_shared as run
        case "score-updates":
            from attention_geometry.scoring.updates import run_score_updates as run
        case "score-null":
            from attention_geometry.scoring.random_init_null import run_score_null as run
        case "concat-tables":
            from attention_geometry.workflow.concat import run_concat_tables as run
        case "extract-wqk":
            from attention_geometry.analysis.figdata import run_extract_wqk as run
        case "run-notebook":
            from attention_geometry.workflow.notebook import run_run_notebook as run
        case "join-parts":
            from attention_geometry.workflow.pretrained import run_join_parts as run
        case "locate-package":
            from attention_geometry.workflow.pretrained import run_locate_package as run
        case "symmetry-speedup":
            from attention_geometry.analysis.figdata import run_symmetry_speedup as run
        case "input-sums":
            from attention_geometry.workflow.records import run_input_sums as run
        case "record-corpus":
            from attention_geometry.workflow.records import run_record_corpus as run
        case _:
            raise KeyError(name)
    return run


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attention-geometry",
        description="Symmetry and directionality of self-attention (Saponati et al., ICML 2025).",
    )
    p.add_argument("--version", action="version", version=f"attention-geometry {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        sub.add_parser(name, help=command.help, add_help=False)
    return p


class _OneLineParser(argparse.ArgumentParser):
    """A subcommand's parser whose errors are one `error: ...` line (exit status 2), as a UserError's."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {message.splitlines()[0] if message else 'bad arguments'} (see {self.prog} --help)\n")


def _no_progress_bars() -> None:
    """Switch off the bars the subcommand does not switch itself: tqdm's, and transformers' / huggingface_hub's
    (which pass `disable` themselves, so TQDM_DISABLE does not reach them; they read their switch on import)."""
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    elif "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()


def _is_utf8(text: str) -> bool:
    """Whether `text` is UTF-8 text (a command-line argument holds undecodable bytes as lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        import difflib

        close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        print(
            f"error: unknown command {argv[0]!r} ({hint}one of {', '.join(COMMANDS)}; see attention-geometry --help)",
            file=sys.stderr,
        )
        return 2
    # a path (or any argument) that is not UTF-8 cannot be recorded in the UTF-8 files every command writes (CSV,
    # JSON, YAML): refused here, before anything is written (issue 59.6: `train --out` failed after writing three
    # files, and every retry failed the same way)
    bad = next((a for a in argv if not _is_utf8(a)), None)
    if bad is not None:
        print(
            f"error: {ascii(bad)}: not valid UTF-8 (the file system gave bytes no UTF-8 text has); rename the file or "
            "folder, or give a path without them: every path a command records goes into UTF-8 files",
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] not in COMMANDS:
        _parser().parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    parser = _OneLineParser(prog=f"attention-geometry {name}", description=COMMANDS[name].help)
    COMMANDS[name].add_arguments(parser)
    if "--no-progress" not in parser._option_string_actions:  # one switch for every subcommand
        parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv[1:])
    if sys.stdout is None:  # Python's stand-in for a closed file descriptor 1 (`>&-`): every print would vanish
        print(
            "error: standard output is closed: run the command with it open (>/dev/null discards what it prints)",
            file=sys.stderr,
        )
        return 2
    if getattr(args, "no_progress", False) or getattr(args, "quiet", False):
        _no_progress_bars()
    try:
        code = int(runner(name)(args) or 0)
        sys.stdout.flush()  # a table or path printed to a full or closed pipe fails here, not at exit
        return code
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except (OSError, RuntimeError) as exc:
        from attention_geometry.formats.files import write_failure

        why = write_failure(exc)
        if why is None:
            raise
        out = getattr(args, "out", None)
        if out == "-" and getattr(exc, "filename", None) is None:
            print(f"error: standard output: cannot write ({getattr(exc, 'strerror', None) or why})", file=sys.stderr)
            _drop_stdout()
        else:
            where = getattr(exc, "filename", None) or out
            print(f"error: {f'{where}: ' if where else ''}cannot write ({why})", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that what is still buffered for a stdout that failed is not
    flushed again when the interpreter exits (a second message, from outside any handler)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's buffer): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
