"""The run-directory format (docs/contracts.md, "Runs and checkpoints"): names, snapshot steps, listing.

    results/runs/{run}/run.yaml                   the resolved run config (also inside every snapshot)
    results/runs/{run}/loss.csv                   loss rows (contract.LOSS_COLUMNS)
    results/runs/{run}/checkpoints/step-XXXXXXX/  weight-only snapshots: model.safetensors + config.json
    results/runs/{run}/state/                     the newest resumable training state (state.json, ...)

The trainer writes these names, the scoring and update commands and the workflow read them, all through
this module. No torch, no pandas (the workflow imports it at parse time).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Iterable

from .contract import RUN_KEYS
from .errors import UserError
from .files import read_yaml

__all__ = [
    "RUN_YAML",
    "LOSS_CSV",
    "TRAIN_LOG",
    "CHECKPOINTS",
    "STATE",
    "SNAPSHOT_FILES",
    "MAX_STEP",
    "run_name",
    "snapshot_name",
    "parse_snapshot",
    "snapshot_dir",
    "is_complete_snapshot",
    "list_snapshots",
    "snapshot_steps",
    "read_run_yaml",
    "find_state",
    "state_step",
]

RUN_YAML = "run.yaml"
LOSS_CSV = "loss.csv"
TRAIN_LOG = "train.log"
CHECKPOINTS = "checkpoints"
STATE = "state"
STATE_JSON = "state.json"
# a snapshot folder is complete when it holds these (it is renamed into place only once written whole)
SNAPSHOT_FILES = ("model.safetensors", "config.json")
_SNAPSHOT = re.compile(r"^step-(\d{7})$")
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


def snapshot_dir(run_dir: str | os.PathLike, step: int) -> Path:
    """RUN_DIR/checkpoints/step-XXXXXXX (whether or not it exists)."""
    return Path(run_dir) / CHECKPOINTS / snapshot_name(step)


def is_complete_snapshot(path: str | os.PathLike) -> bool:
    """The one definition of a complete snapshot: a folder named step-XXXXXXX holding SNAPSHOT_FILES."""
    p = Path(path)
    return parse_snapshot(p.name) is not None and p.is_dir() and all((p / f).is_file() for f in SNAPSHOT_FILES)


def list_snapshots(run_dir: str | os.PathLike, must_exist: bool = True) -> dict[int, Path]:
    """step -> folder of every complete snapshot of a run, in step order. With must_exist, a run without
    checkpoints/ or without a complete snapshot is a UserError (else: an empty dict)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        if must_exist:
            raise UserError(f"{root}: missing (no weight snapshots)")
        return {}
    found = {parse_snapshot(p.name): p for p in root.iterdir() if is_complete_snapshot(p)}
    if not found and must_exist:
        raise UserError(f"{root}: no step-XXXXXXX snapshot folders (complete: {' + '.join(SNAPSHOT_FILES)})")
    return dict(sorted(found.items()))


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


# ---------------------------------------------------------------------------------------------- state


def find_state(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete training state: RUN_DIR/state/ (renamed into place only when complete), or an
    `.old-state-*` left by a crash between the two renames of a replacement (files.replace_dir)."""
    out = Path(run_dir)
    s = out / STATE
    if (s / STATE_JSON).is_file():
        return s
    for o in sorted(out.glob(f".old-{STATE}-*")):
        if (o / STATE_JSON).is_file():
            return o
    return None


def state_step(state_dir: str | os.PathLike) -> int:
    """The step a state folder holds (its state.json); a damaged state.json is one UserError naming it."""
    path = Path(state_dir) / STATE_JSON
    try:
        step = json.loads(path.read_text(encoding="utf-8"))["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step {step!r}")
        return step
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: damaged training state ({type(exc).__name__}: {exc}); resume is impossible "
                        f"from it: move {Path(state_dir).name}/ aside to restart the run from step 0") from None
