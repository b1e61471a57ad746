"""provenance.csv of a run: one row per start of the trainer (formats/columns.py: PROVENANCE_COLUMNS and, since
study 4, PROVENANCE_HOST_COLUMNS) naming the code (commit, uncommitted changes), the steps it trained, when, and the
CPU it ran on (its model, the flags that decide which kernels run, a host id), the facts that say whether two runs
can be bit for bit equal."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import PROVENANCE_COLUMNS, PROVENANCE_HOST_COLUMNS, PROVENANCE_SPEED_COLUMNS
from attention_geometry.formats.files import atomic_write_text
from attention_geometry.formats.rundir import PROVENANCE_CSV

__all__ = ["NUMERIC_CPU_FLAGS", "cpu_flags", "host_id", "record_provenance", "record_speed"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


# the CPU flags a provenance row names: those that decide which kernels run, and so a float's last bits (the
# training is bit for bit reproducible within one such kind of host) and a step's speed (bf16 natively or emulated)
NUMERIC_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """The NUMERIC_CPU_FLAGS this CPU has, space-separated in that order ("" where /proc/cpuinfo is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return " ".join(flag for flag in NUMERIC_CPU_FLAGS if flag in have)
    except OSError:
        pass
    return ""


def host_id() -> str:
    """12 hex digits naming this host for its current boot: sha256 of the machine id (/etc/machine-id, which a
    machine image may share with its copies) and the kernel's boot id (new at every boot), so two hosts of one kind
    are told apart; where neither is readable, of the host name."""
    import hashlib
    import socket

    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read().strip())
        except OSError:
            parts.append("")
    if not any(parts):
        parts = [socket.gethostname()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def record_provenance(out: Path, run: str, from_step: int, to_step: int, when: str | None = None) -> None:
    """Append one row (formats.columns.PROVENANCE_COLUMNS) to OUT/provenance.csv: the trainer started or resumed
    `run` at `from_step` to train up to `to_step`, at UTC time `when` (now), with the git commit of the checkout
    this package runs from (formats.checkout.code_version: " + uncommitted changes" where it differed), the
    CPU model, and (formats.columns.PROVENANCE_HOST_COLUMNS) its numeric flags and the host id. A record begun
    before the host columns existed keeps its six columns. The workflow gathers these rows into
    {results}/tables/run_provenance.csv, the committed record of the commit and host each run's steps were trained
    at."""
    import datetime

    from attention_geometry.formats.checkout import code_version

    checkout = Path(__file__).resolve().parents[3]
    version = code_version(str(checkout)) if (checkout / ".git").exists() else "unknown (not a git checkout)"
    when = when or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = out / PROVENANCE_CSV
    try:
        old = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path}: unreadable provenance record ({type(exc).__name__}: {str(exc).splitlines()[0]}); restore it "
            f"(git checkout, or the copy in the workflow's run_provenance.csv), or move it aside to start a new record"
        ) from None
    if old and not old.startswith(",".join(PROVENANCE_COLUMNS)):
        raise UserError(
            f"{path}: not a provenance record (its header is not {','.join(PROVENANCE_COLUMNS)}); restore it, or "
            "move it aside to start a new record"
        )
    row = dict(zip(PROVENANCE_COLUMNS, (run, when, int(from_step), int(to_step), version, _cpu_model())))
    columns = PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS + PROVENANCE_SPEED_COLUMNS
    header = old.split("\n", 1)[0] if old else ""
    for older in (PROVENANCE_COLUMNS, PROVENANCE_COLUMNS + PROVENANCE_HOST_COLUMNS):
        if header == ",".join(older):
            columns = older  # a record begun before the host (or the speed) columns keeps its header
    if "host_id" in columns:
        row.update(cpu_flags=cpu_flags(), host_id=host_id())
    row.update({c: "" for c in PROVENANCE_SPEED_COLUMNS if c in columns})  # filled in when the start ends
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    if not old:
        writer.writeheader()
    writer.writerow(row)
    atomic_write_text(path, old + buf.getvalue())


def record_speed(out: Path, tokens_per_s: float, mfu: float | None) -> None:
    """Fill in the speed columns (formats.columns.PROVENANCE_SPEED_COLUMNS) of OUT/provenance.csv's last row, the
    start now ending: its positions per second and MFU (None: the peak is unknown, left empty). A record whose
    header has no speed columns (begun before them) is left as it is."""
    path = out / PROVENANCE_CSV
    text = path.read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.split("\n", 1)[0].split(",")
    if not rows or not set(PROVENANCE_SPEED_COLUMNS) <= set(header):
        return
    rows[-1].update(tokens_per_s=f"{tokens_per_s:.6g}", mfu="" if mfu is None else f"{mfu:.6g}")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())
