"""`attention-geometry` console script.

Each subcommand lives in the module that does the work, as `add_arguments(parser)` + `run(args) -> int`;
only the chosen one is imported, so `attention-geometry score ...` does not import the training stack.
A UserError (bad input) is printed as one line `error: ...` on stderr with exit status 2; so is a bad
argument of a subcommand (argparse's own message, without the usage lines: `--help` shows them). A write the
storage refuses that a command let through (a full disk, a read-only file system; files.write_failure) is one
line naming the output, exit status 1. Standard output is part of the output: a command never runs with it
closed (what it prints would be lost, exit status 2), a write to it that fails is one line (exit status 1), and
a reader that went away (`| head`) ends the command quietly with exit status 141, as SIGPIPE ends a Unix tool.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from attention_geometry import __version__
from attention_geometry.errors import UserError

EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a tool that SIGPIPE ended

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "score": ("attention_geometry.scoring.scorer", "score the self-attention W_qk of a model (dir, GGUF or hub id)"),
    "score-checkpoints": ("attention_geometry.scoring.scorer", "score every weight snapshot of a training run"),
    "compare-gqa": (
        "attention_geometry.scoring.scorer",
        "a grouped-query model's W_qk scores by the attention's matrix and by the paper's expansion",
    ),
    "prefetch-qk": (
        "attention_geometry.weights.prefetch",
        "fetch a hub model's q/k tensors and config into a local folder",
    ),
    "fetch-hub-data": (
        "attention_geometry.data.fetch",
        "fetch the hub files a corpus or image set reads (data files, tokenizer) into a folder, for offline prepares",
    ),
    "prepare-corpus": ("attention_geometry.data.prepare", "tokenize a corpus into fixed-length blocks"),
    "prepare-images": (
        "attention_geometry.data.images",
        "prepare an image set (digits, CIFAR-10) with a held-out split",
    ),
    "train": ("attention_geometry.training.command", "train (or resume) one run from a RUN.yaml"),
    "score-updates": ("attention_geometry.scoring.updates", "score the W_qk gradients and applied updates of a run"),
    "score-null": (
        "attention_geometry.scoring.random_init_null",
        "score randomly initialized models of a run's shape (the null)",
    ),
    "concat-tables": ("attention_geometry.workflow.concat", "concatenate per-run/per-model tables into one tidy table"),
    "extract-wqk": (
        "attention_geometry.analysis.figdata",
        "write a model's median-symmetry layer W_qk (Figure 1) to .npz",
    ),
    "run-notebook": (
        "attention_geometry.workflow.notebook",
        "run a figure notebook with papermill; a failing cell is one error line and its traceback",
    ),
    "join-parts": ("attention_geometry.workflow.pretrained", "join a model file shipped in parts, checking its sha256"),
    "locate-package": (
        "attention_geometry.workflow.pretrained",
        "print the path of a file or folder inside an installed package (pkg:PACKAGE/PATH), checking its sha256",
    ),
    "symmetry-speedup": (
        "attention_geometry.analysis.figdata",
        "tabulate symmetry vs loss gain and speed-up per ablation run",
    ),
}


# subcommand -> the module that defines its arguments, where that is not the working module: these work with
# torch, and their arguments live in the torch-free commands.py so that `--help` answers at once
ARGUMENTS: dict[str, str] = {
    name: "attention_geometry.commands"
    for name in ("score", "score-checkpoints", "compare-gqa", "prefetch-qk", "score-updates")
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="attention-geometry",
        description="Symmetry and directionality of self-attention (Saponati et al., ICML 2025).",
    )
    p.add_argument("--version", action="version", version=f"attention-geometry {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        print(
            f"error: unknown command {argv[0]!r} (one of {', '.join(COMMANDS)}; see attention-geometry --help)",
            file=sys.stderr,
        )
        return 2
    if not argv or argv[0] not in COMMANDS:
        _parser().parse_args(argv or ["--help"])
        return 2
    name = argv[0]
    arguments = importlib.import_module(ARGUMENTS.get(name, COMMANDS[name][0]))
    parser = _OneLineParser(prog=f"attention-geometry {name}", description=COMMANDS[name][1])
    getattr(arguments, "add_arguments_" + name.replace("-", "_"))(parser)
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
        module = importlib.import_module(COMMANDS[name][0])
        code = int(getattr(module, "run_" + name.replace("-", "_"))(args) or 0)
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
