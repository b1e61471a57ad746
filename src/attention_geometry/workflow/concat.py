"""`attention-geometry concat-tables`: one tidy table from per-run / per-model CSV tables.

The workflow writes one CSV per model (`score`), per run (`score-checkpoints`, `score-updates`, the
trainer's `loss.csv`) and concatenates them into the tables of the data contracts (docs/contracts.md).
Values are copied as text, unchanged (an empty `eval_loss` stays empty, a float keeps its digits); the
columns of every input must be the same set, except a kind's optional columns (TABLE_OPTIONAL_COLUMNS: an image
run's `eval_accuracy` in training_loss), left empty in the rows of inputs without them; `--kind` checks that the
contract's columns are there.
An input given twice (the same file under two names included), an --out that is one of the inputs, and two
rows with the same key (TABLE_KEYS of the kind, given or told by the columns; numbers compared by value, so
layer `0` and `0.0` are one key) are refused: the table would count those rows twice. So are a row with an
empty key cell and a score (symmetry, directionality) that is not a finite number, and, in the tables of training
runs, a row with an empty run key (size, dataset, objective, init, seed): `score-checkpoints` leaves the keys of a
Trainer output folder empty where it was not given them, and it is here, where rows join other runs', that they
are needed.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
from pathlib import Path

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS, TABLE_COLUMNS, TABLE_OPTIONAL_COLUMNS
from attention_geometry.formats.files import atomic_write_text, check_writable
from attention_geometry.formats.rundir import PROVENANCE_CSV, missing_provenance

__all__ = ["TABLE_KEYS", "SCORE_VALUE_COLUMNS", "key_value", "read_csv_text", "concat_tables", "table_kind"]

# the columns that identify a row of each contract table (docs/contracts.md): no two rows share them
TABLE_KEYS: dict[str, list[str]] = {
    "pretrained_scores": ["model", "component", "layer", "head"],
    "training_scores": ["run", "step", "component", "layer", "head"],
    "training_loss": ["run", "step"],
    "update_scores": ["run", "step", "layer", "kind"],
    "run_provenance": ["run", "started_utc", "from_step"],
}
assert set(TABLE_KEYS) == set(TABLE_COLUMNS) and all(
    set(keys) <= set(TABLE_COLUMNS[kind]) for kind, keys in TABLE_KEYS.items()
), "every table kind has its key columns among its columns"


# the score columns of the contract tables: a number in every row (never NaN or empty)
SCORE_VALUE_COLUMNS = ("symmetry", "directionality")


def key_value(text: str) -> str:
    """A key cell as compared for repeats: a number by its value (`0`, `0.0` and ` 0` are one layer), any other
    text as written, less surrounding blanks."""
    text = text.strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if math.isfinite(number) and number == int(number):
        return str(int(number))
    return repr(number)


def _check_score(value: str, column: str, where: str) -> None:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise UserError(f"{where}: {column} is {value!r}, not a number: a score table holds a finite score per row")


def table_kind(header: list[str]) -> str | None:
    """The contract table kind whose columns `header` holds (the one with most columns where several do:
    training scores hold the pretrained score columns too); None when it holds none's."""
    kinds = [k for k, cols in TABLE_COLUMNS.items() if set(cols) <= set(header)]
    return max(kinds, key=lambda k: len(TABLE_COLUMNS[k]), default=None)


def read_csv_text(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV file, every value as its text."""
    header, rows, _ = _read_csv_lines(path)
    return header, rows


def _read_csv_lines(path: str | Path) -> tuple[list[str], list[list[str]], list[int]]:
    """read_csv_text, plus the line number where each row ends."""
    path = Path(path)
    if not path.is_file():
        if path.name == PROVENANCE_CSV:  # a trainer's record: it cannot be remade, a copy can be restored
            raise UserError(missing_provenance(path.parent, path.parent.name))
        raise UserError(f"{path}: no such file")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            try:
                header = next(reader)
            except StopIteration:
                raise UserError(f"{path}: empty file (no header line)") from None
            rows, lines = [], []
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    raise UserError(f"{path}:{reader.line_num}: {len(row)} fields, the header has {len(header)}")
                rows.append(row)
                lines.append(reader.line_num)
    except (UnicodeDecodeError, csv.Error) as exc:  # a binary file: bytes that are not UTF-8, or NUL bytes
        raise UserError(f"{path}: not a UTF-8 CSV table ({str(exc).splitlines()[0]})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(set(header)) != len(header):
        raise UserError(f"{path}: duplicated column names in the header {header}")
    return header, rows, lines


def _check_paths(paths: list[str | Path], out: str | Path) -> None:
    """No input given twice (compared as resolved paths), and `out` none of them."""
    seen: dict[Path, str | Path] = {}
    for path in paths:
        real = Path(os.path.abspath(path)).resolve()
        if real in seen:
            raise UserError(f"{path}: given twice (as {seen[real]} and {path}); its rows would be counted twice")
        seen[real] = path
    if Path(os.path.abspath(out)).resolve() in seen:
        raise UserError(f"{out}: is one of the input tables; write the concatenation elsewhere")


def concat_tables(paths: list[str | Path], out: str | Path, kind: str | None = None) -> int:
    """Concatenate CSV tables (same column set, any order) into `out` in the first file's column order;
    returns the number of rows written (atomically: files.atomic_write_text). A duplicated input, an `out`
    among the inputs and two rows with the same key (TABLE_KEYS of `kind`, else of table_kind(columns)) are
    refused."""
    if not paths:
        raise UserError("concat-tables: no input tables given")
    if kind is not None and kind not in TABLE_COLUMNS:
        raise UserError(f"concat-tables --kind {kind!r}: unknown (one of {', '.join(TABLE_COLUMNS)})")
    check_writable(out)
    _check_paths(paths, out)
    tables = [(path, *_read_csv_lines(path)) for path in paths]
    columns = list(tables[0][1])
    if kind is not None:
        missing = [c for c in TABLE_COLUMNS[kind] if c not in columns]
        if missing:
            raise UserError(f"{paths[0]}: missing column(s) {', '.join(missing)} of a {kind} table")
    key_kind = kind or table_kind(columns)
    # the kind's optional columns that any input has (appended in their contract order where the first lacks them)
    optional = [c for c in TABLE_OPTIONAL_COLUMNS.get(key_kind, []) if any(c in header for _, header, _, _ in tables)]
    columns += [c for c in optional if c not in columns]
    key_at = [columns.index(c) for c in TABLE_KEYS[key_kind]] if key_kind else []
    score_at = [(columns.index(c), c) for c in SCORE_VALUE_COLUMNS if key_kind and c in TABLE_COLUMNS[key_kind]]
    # the run keys of a table of training runs: what its rows are compared and grouped by
    run_at = [columns.index(c) for c in RUN_KEYS if key_kind and c in TABLE_COLUMNS[key_kind]]
    all_rows: list[list[str]] = []
    keys: dict[tuple[str, ...], str] = {}  # a row's key -> where it was first seen
    for path, header, rows, lines in tables:
        if set(header) - set(optional) != set(columns) - set(optional) or not set(header) <= set(columns):
            extra = sorted(set(header) - set(columns))
            lacking = sorted(set(columns) - set(header) - set(optional))
            raise UserError(
                f"{path}: columns differ from {paths[0]} (extra: {extra or 'none'}, missing: {lacking or 'none'})"
            )
        order = [header.index(c) if c in header else None for c in columns]
        for row, line in zip(rows, lines):
            row = [row[i] if i is not None else "" for i in order]
            for i, column in score_at:
                _check_score(row[i], column, f"{path}:{line}")
            if empty := [columns[i] for i in run_at if not row[i].strip()]:
                raise UserError(
                    f"{path}:{line}: empty {', '.join(empty)}: every {key_kind} row names its run's keys (a Trainer "
                    "output folder scored without them: score it again with score-checkpoints --label KEY=VALUE)"
                )
            if key_at:
                key = tuple(key_value(row[i]) for i in key_at)
                if empty := [columns[i] for i, v in zip(key_at, key) if not v]:
                    raise UserError(f"{path}:{line}: empty {', '.join(empty)}: every {key_kind} row names its key")
                if key in keys:
                    shown = ", ".join(f"{columns[i]}={v}" for i, v in zip(key_at, key))
                    raise UserError(f"{path}:{line}: a second {key_kind} row for {shown} (the first is at {keys[key]})")
                keys[key] = f"{path}:{line}"
            all_rows.append(row)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(all_rows)
    atomic_write_text(out, buf.getvalue())
    return len(all_rows)


def run_concat_tables(args: argparse.Namespace) -> int:
    from attention_geometry.formats.files import sha256_line

    n = concat_tables(args.inputs, args.out, args.kind)
    print(f"wrote {args.out}: {n} rows from {len(args.inputs)} tables")
    print(sha256_line(args.out))  # last: the record's proof that this job wrote it (workflow.records.made_by_its_job)
    return 0
