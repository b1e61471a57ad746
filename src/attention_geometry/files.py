"""File helpers shared by the package: the one atomic writer, the one YAML reader, content hashes.

Every file or folder the package writes goes through `atomic_path` / `atomic_write_*` (a file) or
`replace_dir` (a folder written under a temporary name): a reader, or a run killed half-way, sees either the
old complete file or the new complete one, never a partial one. The data is fsync'd before the rename and
the folder after it, so a rename that survived a crash points at complete data.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .errors import UserError

__all__ = [
    "file_sha256",
    "read_yaml",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_table",
    "check_table_path",
    "check_writable",
    "replace_dir",
    "TABLE_SUFFIXES",
]

TABLE_SUFFIXES = (".csv", ".parquet")


def file_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_yaml(path: str | os.PathLike, what: str, error: type[UserError] = UserError) -> Any:
    """The parsed YAML of `path`; a missing file or invalid YAML raises `error` naming the file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise error(f"{what} not found: {p}")
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{p}: unreadable ({type(exc).__name__}: {exc})") from None


# ------------------------------------------------------------------------------------------ atomic writes


def _fsync_path(path: str | os.PathLike) -> None:
    """fsync a file or a folder (a folder's fsync makes the renames in it durable; not every file system
    allows it, which is harmless)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` (same folder, a dot name) for the block to write; when the block ends
    without an error it is fsync'd and renamed to `path` (replacing an older file), else it is removed. The
    parent folders are created. The file gets the permissions of a plain `open` (umask applies)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        yield tmp
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_path(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` atomically (see atomic_path)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
    return path


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` atomically, its characters as given (no newline translation)."""
    return atomic_write_bytes(path, text.encode(encoding))


def check_writable(path: str | os.PathLike) -> Path:
    """`path` as a Path if atomic_path can write a file there: not a folder, and the nearest existing folder
    above it (atomic_path creates the missing ones) is a folder this process may write in; else a UserError.
    Commands call it before they read or compute anything."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory")
    parent = path.parent
    try:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        ok = parent.is_dir()
    except OSError as exc:
        raise UserError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    if not ok:
        raise UserError(f"{path}: cannot write there ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{path}: cannot write there ({parent} is not writable)")
    return path


def check_table_path(path: str | os.PathLike) -> Path:
    """`path` as a Path if atomic_write_table can write a table there (suffix .csv or .parquet; check_writable),
    else a UserError; commands call it before they compute anything."""
    path = Path(path)
    if path.suffix not in TABLE_SUFFIXES:
        raise UserError(f"{path}: unknown output suffix {path.suffix or '(none)'!r}; use .csv or .parquet")
    return check_writable(path)


def atomic_write_table(df: Any, path: str | os.PathLike, **csv_kwargs: Any) -> Path:
    """Write a pandas DataFrame to `path` atomically: `.csv` (df.to_csv(index=False, **csv_kwargs)) or
    `.parquet` (pyarrow); another suffix, or a folder at `path`, is a UserError."""
    path = check_table_path(path)
    with atomic_path(path) as tmp:
        if path.suffix == ".csv":
            df.to_csv(tmp, index=False, **csv_kwargs)
        else:
            df.to_parquet(tmp, index=False, engine="pyarrow")
    return path


def replace_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike) -> Path:
    """Put the complete folder `tmp_dir` (a sibling of `final_dir`) in place of `final_dir`.

    Every file in tmp_dir and the folders are fsync'd, then tmp_dir is renamed to final_dir. An existing
    final_dir is first renamed to `.old-{name}-{pid}` beside it and removed after the swap, so a crash
    between the two renames leaves the old complete folder under that name (readers that resume may look
    for it there)."""
    tmp_dir, final_dir = Path(tmp_dir), Path(final_dir)
    for root, _dirs, files in os.walk(tmp_dir):
        for name in files:
            _fsync_path(os.path.join(root, name))
        _fsync_path(root)
    if final_dir.exists():
        old = final_dir.parent / f".old-{final_dir.name}-{os.getpid()}"
        if old.exists():
            shutil.rmtree(old) if old.is_dir() else old.unlink()
        final_dir.rename(old)
        tmp_dir.rename(final_dir)
        _fsync_path(final_dir.parent)
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    else:
        tmp_dir.rename(final_dir)
        _fsync_path(final_dir.parent)
    return final_dir
