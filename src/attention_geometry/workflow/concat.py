"""`attention-geometry concat-tables`: one tidy table from per-run / per-model CSV tables.

The workflow writes one CSV per model (`score`), per run (`score-checkpoints`, `score-updates`, the
trainer's `loss.csv`) and concatenates them into the tables of the data contracts (docs/contracts.md).
Values are copied as text, unchanged (an empty `eval_loss` stays empty, a float keeps its digits); the
columns of every input must be the same set, and `--kind` checks that the contract's columns are there.
"""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import TABLE_COLUMNS
from attention_geometry.formats.files import atomic_write_text, check_writable

# the required columns of each contract table (docs/contracts.md)


def read_csv_text(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV file, every value as its text."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            try:
                header = next(reader)
            except StopIteration:
                raise UserError(f"{path}: empty file (no header line)") from None
            rows = []
            for lineno, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise UserError(f"{path}:{lineno}: {len(row)} fields, the header has {len(header)}")
                rows.append(row)
    except (UnicodeDecodeError, csv.Error) as exc:  # a binary file: bytes that are not UTF-8, or NUL bytes
        raise UserError(f"{path}: not a UTF-8 CSV table ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(set(header)) != len(header):
        raise UserError(f"{path}: duplicated column names in the header {header}")
    return header, rows


def concat_tables(paths: list[str | Path], out: str | Path, kind: str | None = None) -> int:
    """Concatenate CSV tables (same column set, any order) into `out` in the first file's column order;
    returns the number of rows written (atomically: files.atomic_write_text)."""
    if not paths:
        raise UserError("concat-tables: no input tables given")
    if kind is not None and kind not in TABLE_COLUMNS:
        raise UserError(f"concat-tables --kind {kind!r}: unknown (one of {', '.join(TABLE_COLUMNS)})")
    check_writable(out)
    columns: list[str] | None = None
    all_rows: list[list[str]] = []
    for path in paths:
        header, rows = read_csv_text(path)
        if columns is None:
            columns = header
            if kind is not None:
                missing = [c for c in TABLE_COLUMNS[kind] if c not in header]
                if missing:
                    raise UserError(f"{path}: missing column(s) {', '.join(missing)} of a {kind} table")
        elif set(header) != set(columns):
            extra = sorted(set(header) - set(columns))
            lacking = sorted(set(columns) - set(header))
            raise UserError(
                f"{path}: columns differ from {paths[0]} (extra: {extra or 'none'}, missing: {lacking or 'none'})"
            )
        order = [header.index(c) for c in columns]
        all_rows.extend([row[i] for i in order] for row in rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(all_rows)
    atomic_write_text(out, buf.getvalue())
    return len(all_rows)


def add_arguments_concat_tables(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", help="CSV tables with the same columns")
    parser.add_argument("--out", required=True, help="the concatenated CSV table")
    parser.add_argument(
        "--kind",
        choices=sorted(TABLE_COLUMNS),
        default=None,
        help="check the contract columns of this table kind (docs/contracts.md)",
    )


def run_concat_tables(args: argparse.Namespace) -> int:
    n = concat_tables(args.inputs, args.out, args.kind)
    print(f"wrote {args.out}: {n} rows from {len(args.inputs)} tables")
    return 0
