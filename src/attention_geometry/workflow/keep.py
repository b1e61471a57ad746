"""The last good committed outputs survive a failed job.

Snakemake removes a job's existing outputs before it runs and the outputs of a job that fails. For the rules
whose outputs are committed results (the notebook rules and tabulate_symmetry_speedup: records.drawn_entries) a
failure would leave a committed figure deleted until a later run succeeds. So at parse time `keep_outputs` keeps
each existing output aside under `.snakemake/committed-outputs/` (a hard link where the file system allows it: the
job's new file is a new inode, since Snakemake unlinks the old one first; else a copy), and the workflow's
`onerror` handler calls `restore_missing`, which puts back every kept output that is missing after the run. A
restored file gets an old modification time (RESTORED_MTIME), so it counts as out of date against any input: the
next run retries its job, unless its notebook and inputs are exactly those its input-sums record names
(records.content_current), in which case it is what they make.

A job killed outright (SIGKILL, a lost node) runs no `onerror`: its outputs stay removed (or half written). So the
parse calls `keep_committed`, which first puts back the kept set of every entry whose input-sums record (the
entry's last output, which its job writes last) is missing while a kept copy of each of its outputs is there
(`restore_unfinished`: what a job that did not finish leaves), and only then keeps what exists. An output removed on
purpose, with its entry's input-sums record still in place (`xargs rm` of a stale config's results), is never put
back: its kept copy is dropped as before.

Torch- and pandas-free: rules/figures.smk calls it at parse time and from `onerror`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence

__all__ = [
    "KEEP_DIR",
    "RESTORED_MTIME",
    "kept_path",
    "keep_outputs",
    "restore_missing",
    "restore_unfinished",
    "keep_committed",
]

KEEP_DIR = os.path.join(".snakemake", "committed-outputs")
RESTORED_MTIME = 315532800  # 1980-01-01 UTC: older than any input a run can have


def kept_path(path: str, folder: str = KEEP_DIR) -> str:
    """Where `path` is kept: its path relative to the working directory (an absolute one without its root)
    under `folder`."""
    rel = os.path.normpath(path)
    if os.path.isabs(rel):
        rel = os.path.relpath(rel, os.path.abspath(os.sep))
    if rel == ".." or rel.startswith(".." + os.sep):
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(os.sep))
    return os.path.join(folder, rel)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def keep_outputs(paths: Iterable[str], folder: str = KEEP_DIR) -> list[str]:
    """Keep each existing regular file of `paths` under `folder` (see the module docstring) and drop what is kept
    there for a path that no longer exists, so that a file removed on purpose is never put back. Returns the
    paths kept."""
    kept = []
    for path in dict.fromkeys(paths):
        dest = kept_path(path, folder)
        if not os.path.isfile(path) or os.path.islink(path):
            if os.path.lexists(dest):
                os.remove(dest)
            continue
        kept.append(path)
        if _same(path, dest):
            continue
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = f"{dest}.tmp-{os.getpid()}"
        if os.path.lexists(tmp):
            os.remove(tmp)
        try:
            os.link(path, tmp)
        except OSError:  # another file system, or links not allowed: a copy
            shutil.copy2(path, tmp)
        os.replace(tmp, dest)
    return kept


def restore_missing(kept: Iterable[str], folder: str = KEEP_DIR, mtime: int = RESTORED_MTIME) -> list[str]:
    """Put back each path of `kept` that is missing now from its kept copy, with modification time `mtime`.
    Returns the paths restored."""
    restored = []
    for path in kept:
        src = kept_path(path, folder)
        if os.path.lexists(path) or not os.path.isfile(src):
            continue
        _put_back(src, path, mtime)
        restored.append(path)
    return restored


def _put_back(src: str, path: str, mtime: int) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-restore-{os.getpid()}"
    shutil.copyfile(src, tmp)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)


def restore_unfinished(
    entries: Iterable[Sequence[str]], folder: str = KEEP_DIR, mtime: int = RESTORED_MTIME
) -> list[str]:
    """Put back the kept outputs of each entry (a job's outputs, its input-sums record last) whose job did not
    finish: the record is missing and every output has a kept copy. Each output is replaced by its kept copy (a
    half-written one too), with modification time `mtime`. Returns the paths restored."""
    restored = []
    for outputs in entries:
        outputs = list(outputs)
        if not outputs or os.path.lexists(outputs[-1]):
            continue
        copies = [kept_path(path, folder) for path in outputs]
        if not all(os.path.isfile(c) for c in copies):
            continue
        for path, src in zip(outputs, copies):
            _put_back(src, path, mtime)
            restored.append(path)
    return restored


def keep_committed(entries: Iterable[Sequence[str]], folder: str = KEEP_DIR) -> tuple[list[str], list[str]]:
    """The parse's step (rules/figures.smk): restore_unfinished, then keep_outputs of every entry's outputs.
    Returns (the paths kept, the paths restored)."""
    entries = [list(outputs) for outputs in entries]
    restored = restore_unfinished(entries, folder)
    return keep_outputs([path for outputs in entries for path in outputs], folder), restored
