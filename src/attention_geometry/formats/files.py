"""File helpers shared by the package: the one atomic writer, the one YAML reader, content hashes, the
checksums of a folder (`checksums.json`) and the pid lock.

Every file or folder the package writes goes through `atomic_path` / `atomic_write_*` (a file) or
`replace_dir` / `rotate_dir` (a folder written under a temporary name): a reader, or a run killed half-way,
sees either the old complete file or the new complete one, never a partial one. The data is fsync'd before
the rename and the folder after it, so a rename that survived a crash points at complete data. A folder
written whole can carry `checksums.json` (`write_checksums`): the sha256 and size of each of its files,
checked by `verify_checksums` before the folder is read, so damage after the write is found.

Before a command reads anything it checks where it will write: `check_writable` (a file), `check_out_location`
(never the current folder, the inputs, a folder holding them or a path inside them) and `check_folder_out` (a
folder replaced whole: only an empty folder or the command's own earlier output, unless --force). None of them,
nor atomic_path and replace_dir themselves, ever replaces what is not a regular file or a folder (a device such as
/dev/full, a FIFO, a socket, or a link to one): the rename would put a regular file in its place. A write that
fails all the same is one UserError line (atomic_path; `write_failure` names a full disk for the CLI).
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attention_geometry.errors import UserError

__all__ = [
    "file_sha256",
    "sha256_line",
    "mem_available_bytes",
    "MAX_YAML_VALUES",
    "expanded_size",
    "yaml_size_error",
    "join_files",
    "read_yaml",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_write_table",
    "check_table_path",
    "check_writable",
    "check_out_location",
    "check_folder_out",
    "check_not_special",
    "write_failure",
    "WriteError",
    "replace_dir",
    "rotate_dir",
    "fsync_path",
    "CHECKSUMS",
    "ChecksumError",
    "write_checksums",
    "verify_checksums",
    "pid_lock",
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


def mem_available_bytes() -> int | None:
    """The memory the kernel reports available (/proc/meminfo MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def sha256_line(path: str | os.PathLike) -> str:
    """The `sha256sum` line of a file a command just wrote (`HEX  PATH`): a table command prints it last, so the job's
    log names the content its job wrote (workflow.records.made_by_its_job)."""
    return f"{file_sha256(path)}  {os.fspath(path)}"


def join_files(parts: list[str | os.PathLike], dest: str | os.PathLike, sha256: str) -> Path:
    """Concatenate `parts` in order into `dest` (atomically, see atomic_path), checking that the whole has the
    hex SHA-256 `sha256`; a missing part or another hash raises UserError and leaves no file. A `dest` that
    already has that hash is kept as it is; a `dest` that is one of the parts, or a folder, is a UserError
    before anything is read."""
    dest = check_writable(dest)
    for part in parts:
        if _same_path(part, dest):
            raise UserError(f"{dest}: is one of the parts to join; write the joined file elsewhere")
    if dest.is_file() and file_sha256(dest) == sha256:
        return dest
    h = hashlib.sha256()
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as out:
            for part in parts:
                try:
                    with open(part, "rb") as fh:
                        for chunk in iter(lambda: fh.read(1 << 20), b""):
                            h.update(chunk)
                            out.write(chunk)
                except OSError as exc:
                    raise UserError(f"{part}: cannot read part of {dest.name} ({exc.strerror or exc})") from None
        if h.hexdigest() != sha256:
            raise UserError(
                f"{dest.name}: the {len(parts)} parts joined have sha256 {h.hexdigest()}, not the "
                f"recorded {sha256} (a damaged or different part)"
            )
    return dest


# the most values a parsed YAML document may hold once its aliases are expanded: a config or RUN.yaml holds a few
# hundred; a "billion laughs" of nested aliases holds shared references that expand to billions (and a message or a
# validator that walks them exhausts memory: issue 59.4)
MAX_YAML_VALUES = 100_000


def expanded_size(value: Any, limit: int = MAX_YAML_VALUES) -> int:
    """How many values (mappings, lists, keys and scalars) `value` holds with every shared reference counted each
    time it is reached, as a YAML alias expands; counted once per distinct object (memoized), so a bomb costs
    nothing to measure. A structure that contains itself counts as limit + 1."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(v: Any) -> int:
        if not isinstance(v, (dict, list, tuple)):
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in busy:  # recursive (an anchor inside itself)
            return limit + 1
        busy.add(key)
        items = [x for kv in v.items() for x in kv] if isinstance(v, dict) else list(v)
        total = 1
        for item in items:
            total += size(item)
            if total > limit:
                break
        busy.discard(key)
        sizes[key] = total
        return total

    return size(value)


def yaml_size_error(value: Any, where: str, limit: int = MAX_YAML_VALUES) -> str | None:
    """One line where `value` (parsed YAML) expands to more than `limit` values through its aliases, else None."""
    if expanded_size(value, limit) > limit:
        return (
            f"{where}: expands to more than {limit:,} values through YAML aliases (&anchor / *alias), or contains "
            "itself; a config holds a few hundred: write the values out, or use fewer nested aliases"
        )
    return None


def read_yaml(path: str | os.PathLike, what: str, error: type[UserError] = UserError) -> Any:
    """The parsed YAML of `path`; a missing file, invalid YAML, or a document whose aliases expand to more than
    MAX_YAML_VALUES values (yaml_size_error) raises `error` naming the file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise error(f"{what} not found: {p}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise error(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{p}: unreadable ({type(exc).__name__}: {exc})") from None
    except RecursionError:
        raise error(f"{p}: nested too deeply to read as YAML") from None
    bomb = yaml_size_error(data, str(p))
    if bomb:
        raise error(bomb)
    return data


# ------------------------------------------------------------------------------------------ atomic writes


def fsync_path(path: str | os.PathLike) -> None:
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


class WriteError(UserError, OSError):
    """A file or folder that cannot be written (atomic_path): one line naming it, for the CLI's `error:` line,
    and an OSError still for callers that catch those."""


def _why(exc: OSError) -> str:
    """An OSError in a few words: its strerror (No such file or directory), else its first line."""
    text = exc.strerror or str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}
_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# torch.save's zip writer reports a failed write (a full disk among others) as a RuntimeError of this text
_TORCH_WRITE = re.compile(r"PytorchStreamWriter failed writing|file write failed|unexpected pos \d+ vs \d+")


def write_failure(exc: BaseException) -> str | None:
    """What went wrong, in a few words, when `exc` is a write the storage refused (a full disk or quota, a file
    too large, a read-only file system, an I/O error; torch.save's own RuntimeError for a failed write), with
    what to do where the disk is full; None for any other exception. The CLI turns these into one `error:` line
    naming the output, where a command let them through."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        why = _why(exc)
        return why + (": free some space and run the same command again" if exc.errno in _FULL_ERRNOS else "")
    if isinstance(exc, RuntimeError) and _TORCH_WRITE.search(str(exc)):
        first = str(exc).strip().splitlines()[0]
        return f"a file write failed ({first}); is the disk full? free some space and run the same command again"
    return None


def _same_path(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name the same file or folder (symbolic links and `..` resolved)."""
    return Path(os.path.abspath(a)).resolve() == Path(os.path.abspath(b)).resolve()


_NAME_MAX = 255  # bytes in one file name (Linux, macOS)


def _tmp_name(name: str) -> str:
    """`.NAME.tmp-PID-RANDOM`, NAME shortened where the whole would exceed a file name's length limit."""
    suffix = f".tmp-{os.getpid()}-{secrets.token_hex(4)}"
    stem = "." + name
    while len(os.fsencode(stem + suffix)) > _NAME_MAX and len(stem) > 1:
        stem = stem[:-1]
    return stem + suffix


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` (same folder, a dot name) for the block to write; when the block ends
    without an error it is fsync'd and renamed to `path` (replacing an older file), else it is removed. The
    parent folders are created. The file gets the permissions of a plain `open` (umask applies).

    Every OSError of the write (a folder at `path`, a parent that cannot be created, a temporary file that
    cannot be created or written, a rename refused) is a WriteError (a UserError, and an OSError) of one line
    naming `path`; nothing is left."""
    path = Path(path)
    if path.is_dir():
        raise WriteError(f"{path}: is a directory")
    check_not_special(path, WriteError)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(f"{path}: cannot write there (cannot create the folder {path.parent}: {_why(exc)})") from None
    tmp = path.with_name(_tmp_name(path.name))
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
    except OSError as exc:  # creating, writing or renaming the temporary file (pandas and pyarrow raise these)
        _unlink_quietly(tmp)
        raise WriteError(f"{path}: cannot write ({type(exc).__name__}: {_why(exc)})") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_path(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


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
    """`path` as a Path if atomic_path can write a file there: not a folder, not a device, FIFO or socket
    (check_not_special), and the nearest existing folder above it (atomic_path creates the missing ones) is a
    folder this process may write in; else a UserError. Commands call it before they read or compute anything."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory")
    check_not_special(path)
    _check_parent(path)
    return path


_SPECIAL = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def check_not_special(path: str | os.PathLike, error: type[UserError] = UserError) -> None:
    """`error` naming `path` when something other than a regular file or a folder is there, or a symbolic link
    leads to one (a device such as /dev/full or /dev/null, a FIFO, a socket): an output never replaces it, and
    writing into it would hang on a FIFO or lose the data. Nothing there, or a dangling link, passes. Only
    stat is called: nothing is opened."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # nothing there, a dangling link, or a name no file can have
        return
    for test, kind in _SPECIAL:
        if test(mode):
            raise error(f"{path}: is {kind}, not a regular file: an output never replaces it; give another path")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise error(f"{path}: is not a regular file or a folder: an output never replaces it; give another path")


def _check_parent(path: Path) -> None:
    """UserError naming `path` unless the nearest existing entry above it (a dangling symbolic link counts:
    it cannot become a folder) is a folder this process may write in."""
    parent = path.parent
    try:
        while not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
        ok = parent.is_dir()
    except OSError as exc:
        raise UserError(f"{path}: cannot write there ({_why(exc)})") from None
    if not ok:
        raise UserError(f"{path}: cannot write there ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{path}: cannot write there ({parent} is not writable)")


def check_out_location(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """`out` as an absolute path (`.` and `..` resolved, a symbolic link at `out` itself kept) if a command may
    put a folder or file it writes there: not the file system's root, not a device, FIFO or socket
    (check_not_special), not the current folder nor a folder
    holding it, not one of `inputs` (what the command reads), not a folder holding one, not a path inside
    one, and with a writable folder above it (check_writable); else a UserError naming `out`. Nothing is
    written."""
    out = Path(os.path.abspath(out))
    if out.parent == out:
        raise UserError(f"{out}: is the root folder; write the output into a folder of its own")
    check_not_special(out)
    real = out.resolve()
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the current folder was removed: nothing to protect there
        cwd = None
    if cwd is not None and (real == cwd or real in cwd.parents):
        raise UserError(f"{out}: is the current folder or holds it; write the output into a folder beside it")
    for src in inputs:
        s = Path(os.path.abspath(src)).resolve()
        if real == s:
            raise UserError(f"{out}: is the source {src} (what the command reads); write the output elsewhere")
        if real in s.parents:
            raise UserError(f"{out}: holds the source {src} (what the command reads); write the output elsewhere")
        if s in real.parents:
            raise UserError(f"{out}: lies inside the source {s} (what the command reads); write the output elsewhere")
    _check_parent(out)
    return out


def check_folder_out(
    out: str | os.PathLike,
    *,
    inputs: Iterable[str | os.PathLike] = (),
    force: bool = False,
    previous: Callable[[Path], bool] | None = None,
    what: str = "this command's",
) -> Path:
    """`out` (absolute, see check_out_location) if a command may replace it whole with the folder it writes
    (replace_dir): check_out_location, and unless `force`, nothing there, an empty folder, or a folder
    for which previous(folder) is true (the command's own earlier output); a folder of other files, a
    file or a symbolic link is a UserError that names them and --force. Never the inputs, even with force."""
    out = check_out_location(out, inputs)
    if force or not os.path.lexists(out):
        return out
    if out.is_symlink():
        raise UserError(
            f"{out}: is a symbolic link, not a folder: use --force to replace the link (its target is kept)"
        )
    if not out.is_dir():
        raise UserError(f"{out}: is a file, not a folder: use --force to replace it, or another --out")
    try:
        names = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise UserError(f"{out}: cannot read the folder ({_why(exc)})") from None
    if names and not (previous is not None and previous(out)):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise UserError(
            f"{out}: is a folder that is not a previous {what} output (it holds {shown}): "
            "use --force to replace it, or another --out"
        )
    return out


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
    check_not_special(final_dir, WriteError)
    for root, _dirs, files in os.walk(tmp_dir):
        for name in files:
            fsync_path(os.path.join(root, name))
        fsync_path(root)
    if os.path.lexists(final_dir):  # a folder, a file, or a symbolic link (renamed itself; its target is kept)
        old = final_dir.parent / f".old-{final_dir.name}-{os.getpid()}"
        if os.path.lexists(old):
            _remove(old)
        final_dir.rename(old)
        tmp_dir.rename(final_dir)
        fsync_path(final_dir.parent)
        _remove(old)
    else:
        tmp_dir.rename(final_dir)
        fsync_path(final_dir.parent)
    return final_dir


def _remove(path: Path) -> None:
    """Remove a folder tree, a file or a symbolic link (never what a link points to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def rotate_dir(tmp_dir: str | os.PathLike, final_dir: str | os.PathLike, previous_dir: str | os.PathLike) -> Path:
    """Like replace_dir, but the replaced `final_dir` is kept as `previous_dir` (an older `previous_dir` is
    removed): fsync tmp_dir's files, rename previous -> `.trash-*`, final -> previous, tmp -> final, fsync
    the parent, then delete the trash. A crash at any point leaves `final_dir` or `previous_dir` complete
    (between the last two renames only `previous_dir`: a reader looks there when `final_dir` is missing)."""
    tmp_dir, final_dir, previous_dir = Path(tmp_dir), Path(final_dir), Path(previous_dir)
    for root, _dirs, files in os.walk(tmp_dir):
        for name in files:
            fsync_path(os.path.join(root, name))
        fsync_path(root)
    trash = previous_dir.parent / f".trash-{previous_dir.name}-{os.getpid()}"
    if trash.exists():
        shutil.rmtree(trash)
    if previous_dir.exists():
        previous_dir.rename(trash)
    if final_dir.exists():
        final_dir.rename(previous_dir)
    tmp_dir.rename(final_dir)
    fsync_path(final_dir.parent)
    if trash.exists():
        shutil.rmtree(trash)
    return final_dir


# ------------------------------------------------------------------------------------------ checksums

CHECKSUMS = "checksums.json"  # {"algorithm": "sha256", "files": {name: {"sha256": hex, "bytes": n}}}
_VERIFIED: dict[str, tuple] = {}  # folder -> the stat signature of its files when last verified (one process)


class ChecksumError(UserError):
    """A folder's file differs from its checksums.json (or that file is unreadable); the message names the
    file and what differs."""


def write_checksums(folder: str | os.PathLike) -> Path:
    """FOLDER/checksums.json: the sha256 and size of every file directly in FOLDER (dot-files and the
    checksums file itself aside). Written into a folder still under its temporary name (the folder is then
    swapped in whole), so a plain write is enough."""
    folder = Path(folder)
    files = {
        p.name: {"sha256": file_sha256(p), "bytes": p.stat().st_size}
        for p in sorted(folder.iterdir())
        if p.is_file() and p.name != CHECKSUMS and not p.name.startswith(".")
    }
    out = folder / CHECKSUMS
    out.write_text(json.dumps({"algorithm": "sha256", "files": files}, indent=1) + "\n", encoding="utf-8")
    return out


def _signature(folder: Path, names) -> tuple:
    sig = []
    for name in sorted(names):
        st = (folder / name).stat()
        sig.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sig)


def verify_checksums(folder: str | os.PathLike) -> bool:
    """Check FOLDER's files against its checksums.json: True when every listed file is there with its
    recorded size and sha256; False when the folder has no checksums.json (written before checksums were
    recorded: nothing to check); ChecksumError naming the first file that differs. A folder verified
    before in this process, with unchanged files (inode, size, mtime; all older than 2 s when verified),
    is not hashed again."""
    folder = Path(folder)
    path = folder / CHECKSUMS
    if not path.is_file():
        return False
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        if not isinstance(files, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) and isinstance(v.get("bytes"), int)
            for v in files.values()
        ):
            raise ValueError("no mapping of file -> sha256, bytes")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ChecksumError(f"{path}: unreadable ({type(exc).__name__}: {exc})") from None
    for name, rec in files.items():
        f = folder / name
        if not f.is_file():
            raise ChecksumError(f"{f}: missing (listed in {CHECKSUMS})")
        size = f.stat().st_size
        if size != rec["bytes"]:
            raise ChecksumError(f"{f}: {size} bytes, {rec['bytes']} when written (truncated or overwritten)")
    key = str(folder.resolve())
    sig = _signature(folder, [*files, CHECKSUMS])
    if _VERIFIED.get(key) == sig:
        return True
    for name, rec in files.items():
        if file_sha256(folder / name) != rec["sha256"]:
            raise ChecksumError(
                f"{folder / name}: sha256 differs from the one recorded in {CHECKSUMS} "
                "(the file changed after it was written)"
            )
    if time.time_ns() - max(m for *_, m in sig) > 2 * 10**9:  # a file changed within the clock's
        _VERIFIED[key] = sig  # granularity could keep its mtime: cache only files older than 2 s (as git does)
    return True


# ----------------------------------------------------------------------------------------------- lock


def _read_pid(fd: int) -> int | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


@contextmanager
def pid_lock(path: str | os.PathLike, what: str, warn=None) -> Iterator[None]:
    """Hold an exclusive lock on file `path` (filelock's UnixFileLock: fcntl.flock, released by the kernel when
    the process ends, however it ends) with this process's pid written in, for the block. Held by another
    process: a UserError `{what} is locked by pid N`. A pid left in the file by a process that died holding it
    (the lock itself died with it) is taken over, with `warn(message)`. The file is removed when the block ends.
    A file system without flock support: `warn`, and the block runs unlocked.

    filelock does the locking (open, flock, retry on an inode unlinked under it, release). It records no holder,
    so two small additions stay here: the pid written into the locked file (its `on_acquired` hook, which gets the
    locked descriptor), read back for the error and the stale-lock warning; and the file's removal at the end
    (filelock keeps it; removed while still locked, so a waiter that opened it finds it unlinked and reopens)."""
    from filelock import FileLock, Timeout

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stale: list[int] = []

    def write_pid(fd: int) -> None:
        previous = _read_pid(fd)
        if previous is not None and previous != os.getpid():
            stale.append(previous)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        os.fsync(fd)

    # on_acquired turns off filelock's soft (existence-file) fallback: without flock the block runs unlocked
    lock = FileLock(path, blocking=False, on_acquired=write_pid)
    try:
        lock.acquire()
    except Timeout:
        try:
            text = path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            text = ""
        holder = text if text.isdigit() else "?"
        raise UserError(
            f"{what} is locked by pid {holder} (lock file {path}): wait for that process to end, or stop it"
        ) from None
    except OSError as exc:
        if warn:
            warn(f"{path}: cannot lock ({exc.strerror or exc}); make sure no other process writes {what}")
        yield
        return
    try:
        if stale and warn:
            warn(f"{what}: taking over the stale lock of pid {stale[0]}, which ended without releasing it ({path})")
        yield
    finally:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        lock.release()


def csv_text(rows: Iterable[Mapping], columns: Sequence[str]) -> str:
    """Rows as CSV text with exactly `columns`, in that order (a row's other keys are left out)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row[c] for c in columns})
    return buf.getvalue()
