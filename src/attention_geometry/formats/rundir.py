"""The run-directory format (docs/contracts.md, "Runs and checkpoints"): names, snapshot steps, listing.

    results/runs/{run}/run.yaml                   the resolved run config (also inside every snapshot)
    results/runs/{run}/loss.csv                   loss rows (columns.LOSS_COLUMNS)
    results/runs/{run}/checkpoints/step-XXXXXXX/  weight-only snapshots: model.safetensors + config.json
                                                  (+ tokenizer, model card, run.yaml, checksums.json)
    results/runs/{run}/state/                     the newest resumable training state (state.json, ...,
                                                  checksums.json)
    results/runs/{run}/state.prev/                the state before it, kept for a damaged newest one
    results/runs/{run}.lock                       held by the `train` process writing the run (pid inside)

The trainer writes these names, the scoring and update commands and the workflow read them, all through
this module. Snapshots and states are checked against their checksums.json (files.verify_checksums) when
listed or picked for resume. No torch, no pandas (the workflow imports it at parse time).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.formats.files import CHECKSUMS, ChecksumError, read_yaml, verify_checksums

__all__ = [
    "RUN_YAML",
    "LOSS_CSV",
    "PROVENANCE_CSV",
    "missing_provenance",
    "TRAIN_LOG",
    "CHECKPOINTS",
    "STATE",
    "STATE_PREV",
    "STATE_DAMAGED",
    "SNAPSHOT_FILES",
    "MAX_STEP",
    "run_name",
    "snapshot_name",
    "parse_snapshot",
    "snapshot_dir",
    "is_complete_snapshot",
    "list_snapshots",
    "verify_snapshots",
    "verify_snapshot",
    "snapshot_steps",
    "read_run_yaml",
    "list_trainer_checkpoints",
    "TRAINER_WEIGHTS",
    "find_state",
    "state_step",
    "lock_path",
    "warn_stderr",
]

RUN_YAML = "run.yaml"
LOSS_CSV = "loss.csv"
TRAIN_LOG = "train.log"
CHECKPOINTS = "checkpoints"
STATE = "state"
STATE_PREV = "state.prev"  # the state before the newest one (kept: a damaged newest state falls back to it)
STATE_DAMAGED = "state.damaged"  # a damaged newest state set aside by the trainer when it fell back
STATE_JSON = "state.json"
# a snapshot folder is complete when it holds these (it is renamed into place only once written whole)
SNAPSHOT_FILES = ("model.safetensors", "config.json")
_SNAPSHOT = re.compile(r"^step-([0-9]{7})$")  # ASCII digits only (\d takes any script's digits)
_TRAINER_CHECKPOINT = re.compile(r"^checkpoint-[0-9]+$")  # a transformers Trainer's checkpoint folder
MAX_STEP = 9_999_999  # the largest step a 7-digit snapshot name holds


# ---------------------------------------------------------------------------------------------- names


def run_name(size: str, corpus: str, objective: str, init: str, seed: int) -> str:
    """The run name `{size}-{dataset}-{objective}-{init}-s{seed}` (the corpus key is the dataset part)."""
    return f"{size}-{corpus}-{objective}-{init}-s{seed}"


def snapshot_name(step: int) -> str:
    """`step-XXXXXXX`: the step in 7 digits."""
    step = int(step)
    if not 0 <= step <= MAX_STEP:
        raise UserError(f"snapshot step {step}: must be in [0, {MAX_STEP}]")
    return f"step-{step:07d}"


def parse_snapshot(name: str) -> int | None:
    """The step of a snapshot folder name, None for any other name (a temporary one included)."""
    m = _SNAPSHOT.match(name)
    return int(m.group(1)) if m else None


def owning_folder(path: str | os.PathLike) -> Path | None:
    """The run or snapshot folder that `path` would lie inside, or None: the nearest folder above it (after
    symbolic links) that is a run folder (is_run_folder), is named step-XXXXXXX (our snapshot) or checkpoint-N (a
    Trainer's). A command's output there would write over, or beside, what a run owns (its only loss log, its
    weights)."""
    real = Path(os.path.abspath(path)).resolve()
    for folder in real.parents:
        if is_run_folder(folder) or _SNAPSHOT.match(folder.name) or _TRAINER_CHECKPOINT.match(folder.name):
            return folder
    return None


# what a run writes beside its run.yaml as soon as it starts (the trainer) or ends (a finished run's loss log)
_RUN_WRITES = (TRAIN_LOG, LOSS_CSV, CHECKPOINTS, STATE)


def is_run_folder(folder: str | os.PathLike) -> bool:
    """Whether `folder` is one of our run folders: its run.yaml and something a run writes beside it (train.log,
    loss.csv, checkpoints/ or state/). A run.yaml alone is a config file a user named so, beside their outputs."""
    folder = Path(folder)
    return (folder / RUN_YAML).is_file() and any((folder / name).exists() for name in _RUN_WRITES)


# the files the workflow itself writes into a run folder (rules/score.smk: score_checkpoints, score_updates): the
# only outputs a command may put there
WORKFLOW_RUN_OUTPUTS = ("scores.csv", "update_scores.csv")


def is_workflow_run_output(out: str | os.PathLike) -> bool:
    """Whether `out` is one of the workflow's own score tables directly in a run folder (WORKFLOW_RUN_OUTPUTS)."""
    real = Path(os.path.abspath(out)).resolve()
    return real.name in WORKFLOW_RUN_OUTPUTS and is_run_folder(real.parent)


def check_not_in_a_run(out: str | os.PathLike, what: str = "--out") -> None:
    """A UserError naming `out` where it lies inside a run or snapshot folder (owning_folder), but for the
    workflow's own score tables directly in a run folder (is_workflow_run_output)."""
    if is_workflow_run_output(out):
        return
    folder = owning_folder(out)
    if folder is not None:
        raise UserError(
            f"{what} {out}: lies inside the run or snapshot folder {folder}, whose files a run owns (its loss log, "
            "its weights); write the output outside it"
        )


def snapshot_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """RUN_DIR/checkpoints/step-XXXXXXX (whether or not it exists)."""
    return Path(run_dir) / CHECKPOINTS / snapshot_name(step)


def is_complete_snapshot(path: str | os.PathLike) -> bool:
    """The one definition of a complete snapshot: a folder named step-XXXXXXX holding SNAPSHOT_FILES."""
    p = Path(path)
    return parse_snapshot(p.name) is not None and p.is_dir() and all((p / f).is_file() for f in SNAPSHOT_FILES)


def list_snapshots(
    run_dir: str | os.PathLike, must_exist: bool = True, verify: bool = True, warn: Callable[[str], None] | None = None
) -> dict[int, Path]:
    """step -> folder of every complete snapshot of a run, in step order. With must_exist, a run without
    checkpoints/ or without a complete snapshot is a UserError (else: an empty dict). With verify (what
    every reader of the weights wants), each snapshot is checked against its checksums.json: a file that
    differs is one UserError naming it; snapshots written before checksums were recorded are read
    unverified, with one warning for the run (`warn`, default: a `warning:` line on stderr)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        if must_exist:
            raise UserError(f"{root}: missing (no weight snapshots)")
        return {}
    found = dict(sorted((parse_snapshot(p.name), p) for p in root.iterdir() if is_complete_snapshot(p)))
    if not found and must_exist:
        raise UserError(f"{root}: no step-XXXXXXX snapshot folders (complete: {' + '.join(SNAPSHOT_FILES)})")
    if verify:
        verify_snapshots(found, warn)
    return found


def verify_snapshots(snapshots: Mapping[int, Path], warn: Callable[[str], None] | None = None) -> None:
    """verify_snapshot for each of `snapshots` (step -> folder of one run; a reader that reads only some of
    them verifies only those), with one warning for those written before checksums were recorded."""
    legacy = [p.name for p in snapshots.values() if not verify_snapshot(p)]
    if legacy:
        root = next(iter(snapshots.values())).parent
        (warn or warn_stderr)(
            f"{root}: {len(legacy)} of {len(snapshots)} snapshot(s) have no {CHECKSUMS} (written "
            f"before checksums were recorded, e.g. {legacy[0]}): read unverified"
        )


def verify_snapshot(folder: str | os.PathLike) -> bool:
    """Check a snapshot (or any model folder with a checksums.json) against it: True when verified, False
    when it has none (nothing to check); a file that differs is one UserError saying what to do."""
    folder = Path(folder)
    try:
        return verify_checksums(folder)
    except ChecksumError as exc:
        raise UserError(
            f"damaged snapshot: {exc}; restore {folder.name}/ from a copy, or move the run dir aside "
            "and train the run again"
        ) from None


# ---------------------------------------------------------------------------------------------- steps


def snapshot_steps(
    explicit: Iterable[int] | None,
    every: int | None,
    max_steps: int,
    include_zero: bool = True,
    key: str = "snapshot_steps",
) -> list[int]:
    """The sorted steps of a schedule (snapshots, held-out evaluations): the `explicit` steps, else every
    `every` steps from 0, else none; plus 0 (include_zero) and max_steps. The trainer and the workflow both
    use this. An explicit step beyond max_steps (or below 0) is a UserError naming `key`: such a step would
    never be reached, and whatever waits for it (a scored snapshot) would fail in its job."""
    max_steps = int(max_steps)
    if not 1 <= max_steps <= MAX_STEP:
        raise UserError(f"max_steps: must be in [1, {MAX_STEP}], got {max_steps}")
    steps = set()
    if explicit is not None:
        explicit = [int(s) for s in explicit]
        bad = sorted({s for s in explicit if not 0 <= s <= max_steps})
        if bad:
            raise UserError(f"{key}: step(s) {bad} outside [0, max_steps = {max_steps}]")
        steps.update(explicit)
    elif every is not None:
        if int(every) < 1:
            raise UserError(f"{key.replace('_steps', '_every')}: must be >= 1, got {every}")
        steps.update(range(0, max_steps + 1, int(every)))
    if include_zero:
        steps.add(0)
    steps.add(max_steps)
    return sorted(steps)


# ---------------------------------------------------------------------------------------------- run.yaml


def read_run_yaml(run_dir: str | os.PathLike, required: Iterable[str] = RUN_KEYS) -> dict[str, Any]:
    """RUN_DIR/run.yaml (the run's resolved config, written by the trainer), checked for `required` keys
    (present and not null)."""
    path = Path(run_dir) / RUN_YAML
    if not path.is_file():
        raise UserError(f"{path}: missing (the run's resolved config)")
    cfg = read_yaml(path, "run.yaml")
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a mapping")
    missing = [k for k in required if cfg.get(k) is None]
    if missing:
        raise UserError(f"{path}: missing key(s) {', '.join(missing)}")
    return cfg


# ------------------------------------------------------------------------- Hugging Face Trainer output
# the weight files of a Hugging Face model folder (the scorer reads .bin with weights_only, never unpickling)
TRAINER_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def _trainer_step(state: Path) -> int:
    """trainer_state.json's `global_step`: a whole number of updates (not a bool, a float, a string or null)."""
    try:
        recorded = json.loads(state.read_text(encoding="utf-8"))["global_step"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{state}: not a Trainer state with a global_step ({type(exc).__name__}: {exc})") from None
    if not isinstance(recorded, int) or isinstance(recorded, bool) or recorded < 0:
        raise UserError(f"{state}: global_step {json.dumps(recorded)} is not a whole number of updates")
    return recorded


def list_trainer_checkpoints(output_dir: str | os.PathLike) -> dict[int, Path]:
    """step -> folder of every `checkpoint-N/` a Hugging Face Trainer wrote into `output_dir` (the layout of
    the paper's own training code), in step order; the step is trainer_state.json's `global_step` where that
    file exists, else N. An empty dict when there are none. Nothing is skipped silently: a checkpoint-N folder
    without weights (TRAINER_WEIGHTS) or config.json, a trainer_state.json whose global_step is not a whole
    number or disagrees with its folder's N, and two folders of one step (checkpoint-20 and checkpoint-020) are
    each one UserError."""
    out: dict[int, Path] = {}
    for folder in sorted(Path(output_dir).glob("checkpoint-*")):
        m = re.fullmatch(r"checkpoint-([0-9]+)", folder.name)  # ASCII digits only: checkpoint-\u0663 is no step
        if not m:
            continue
        if not folder.is_dir():
            raise UserError(
                f"{folder}: a Trainer checkpoint that is not a folder (a file, or a link that is dangling or loops): "
                "restore it, or move it out of the folder"
            )
        if not any((folder / f).is_file() for f in TRAINER_WEIGHTS) or not (folder / "config.json").is_file():
            raise UserError(
                f"{folder}: a Trainer checkpoint without its weights ({' or '.join(TRAINER_WEIGHTS)}) and "
                "config.json: restore it, or move it out of the folder"
            )
        step = int(m.group(1))
        state = folder / "trainer_state.json"
        if state.is_file():
            recorded = _trainer_step(state)
            if recorded != step:
                raise UserError(f"{state}: global_step {recorded}, but the folder is {folder.name}")
        if step in out:
            raise UserError(f"{output_dir}: {out[step].name} and {folder.name} are both step {step}: keep one of them")
        out[step] = folder
    return dict(sorted(out.items()))


# ---------------------------------------------------------------------------------------------- state


def warn_stderr(message: str) -> None:
    """The default `warn` of the readers here: one `warning: ...` line on stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def check_run_out(out: str | os.PathLike) -> Path:
    """`train --out`: a new path, an empty folder, or a run folder (one holding run.yaml; a folder holding only
    the train.log of a run stopped before its run.yaml counts too). Anything else is one UserError before anything
    is written or removed: a file, FIFO, socket or dangling link at OUT, or a non-empty folder that is not a run
    (the trainer would train into it and remove its `.tmp-*` / `.trash-*` subfolders as its own leftovers)."""
    out = Path(out)
    if not out.exists():
        if out.is_symlink():
            raise UserError(f"{out}: a dangling link: give --out a new path, an empty folder or a run folder")
        return out
    if not out.is_dir():
        raise UserError(
            f"{out}: exists and is not a folder (a file, FIFO or socket): give --out a new path, an empty folder or a "
            "run folder"
        )
    names = sorted(p.name for p in out.iterdir())
    if RUN_YAML in names or set(names) <= {TRAIN_LOG}:
        return out
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    raise UserError(
        f"{out}: a non-empty folder that is not a run (no {RUN_YAML}; it holds {shown}): give --out a new path, an "
        "empty folder or a run folder"
    )


def lock_path(run_dir: str | os.PathLike) -> Path:
    """`{run_dir}.lock` beside the run dir (outside it, so it stays put when the trainer sets the run dir
    aside): held by the `train` process writing the run (files.pid_lock). Named after the real folder (symbolic
    links resolved), so two commands naming one run through different paths take the same lock (issue 59)."""
    p = Path(os.path.abspath(run_dir)).resolve()
    return p.with_name(p.name + ".lock")


def _read_step(path: Path) -> int:
    step = json.loads(path.read_text(encoding="utf-8"))["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"step {step!r}")
    return step


def _check_state(folder: Path) -> tuple[int, bool]:
    """(step, verified) of a state folder; ValueError naming the damaged file."""
    try:
        verified = verify_checksums(folder)
    except ChecksumError as exc:
        raise ValueError(str(exc)) from None
    path = folder / STATE_JSON
    try:
        return _read_step(path), verified
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: {type(exc).__name__}: {exc}") from None


def find_state(run_dir: str | os.PathLike, warn: Callable[[str], None] | None = None) -> Path | None:
    """The newest intact training state of a run (None when it has none): RUN_DIR/state/, else the one
    before it, RUN_DIR/state.prev/ (files.rotate_dir keeps it), else an `.old-state-*` left by a crash of
    an older version's replacement. Each is checked against its checksums.json before it is taken:

    - state/ damaged (a file differs from its checksum, state.json unreadable), state.prev/ intact:
      `warn` names the damaged file and the state taken instead (the trainer then sets the damaged one
      aside as state.damaged/ and continues from the previous one: docs/contracts.md);
    - no intact state left, but a damaged one: one UserError naming the file and what to do;
    - a state written before checksums were recorded: taken unverified, with one warning.
    """
    out = Path(run_dir)
    warn = warn or warn_stderr
    damaged: list[str] = []
    for folder in (out / STATE, out / STATE_PREV, *sorted(out.glob(f".old-{STATE}-*"))):
        if not folder.is_dir() or (folder.name.startswith(".old-") and not (folder / STATE_JSON).is_file()):
            continue
        try:
            step, verified = _check_state(folder)
        except ValueError as exc:
            damaged.append(str(exc))
            continue
        if damaged:
            warn(f"damaged training state: {damaged[0]}; resuming from the previous state {folder} at step {step}")
        if not verified:
            warn(
                f"{folder}: no {CHECKSUMS} (a state written before checksums were recorded): resuming from it "
                "unverified"
            )
        return folder
    if damaged:
        raise UserError(
            f"damaged training state: {damaged[0]}; no intact earlier state to resume from: restore "
            f"the file, or move {out} aside to restart the run from step 0"
        )
    return None


def state_step(state_dir: str | os.PathLike) -> int:
    """The step a state folder holds (its state.json); a damaged state.json is one UserError naming it."""
    path = Path(state_dir) / STATE_JSON
    try:
        return _read_step(path)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise UserError(
            f"{path}: damaged training state ({type(exc).__name__}: {exc}); resume is impossible "
            f"from it: move {Path(state_dir).name}/ aside to restart the run from step 0"
        ) from None


# the trainer's record of each start (training.run_provenance.record_provenance; formats.columns.PROVENANCE_COLUMNS)
PROVENANCE_CSV = "provenance.csv"


def missing_provenance(out: Path, run: str) -> str:
    """What to say where OUT/provenance.csv of `run` is missing: the record (the commit and CPU of each start)
    cannot be remade from the run, but the workflow's gathered table holds a copy of its rows; the command that
    restores them from it."""
    out = Path(out)
    # the workflow's layout {results}/runs/{run}/: the table is {results}/tables/run_provenance.csv
    table = (
        str(out.parent.parent / "tables" / "run_provenance.csv")
        if out.parent.name == "runs"
        else "{results}/tables/run_provenance.csv"
    )
    program = shlex.quote(f'NR == 1 || $1 == "{run}"')  # the header and the run's own rows
    source = table if table.startswith("{") else shlex.quote(table)
    return (
        f"{out / PROVENANCE_CSV}: missing; it records the commit and CPU each start of run {run} trained at and "
        f"cannot be remade from the run: restore it (git checkout, a backup), or its rows from the workflow's "
        f"gathered table: `awk -F, {program} {source} > {shlex.quote(str(out / PROVENANCE_CSV))}`"
    )
