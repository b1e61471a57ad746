"""Tables that prove they are whole: every tidy table the claims read holds exactly the rows the plan says.

A truncated or row-dropped table does not fail by itself: the claims that lose their runs come out "not
tested", Holm adjusts over fewer claims and another claim's verdict moves. So before any claim is computed each
table is compared, by its key columns, with what the workflow's plan expects (`Plan.expected_tables`, the
reproduction report's param `expected_tables`), and every claim the config's design includes
(`Plan.design_claims`, param `design_claims`) must come out tested. A table that differs is one error line
naming the table and what is missing, extra or repeated, with one example each.

The expected rows of a table kind (KEY_COLUMNS) are a list of blocks; a block maps each key column to its values
and stands for their product, e.g. {"run": [r1, r2], "step": [0, 250], "layer": [0, 1]}. A column given as a
number N instead of a list (the null's `sample`, whose seeds the scorer chooses) means N distinct values, those the
table holds for the block's other keys. Rows that are not keyed are left out: training_scores' per-head rows (only
head "all" is keyed) and training_loss's rows without eval_loss (only the held-out evaluations are keyed).

A value a claim reads must be a number too: `value_problems` names a score (symmetry, directionality) that is empty,
not finite or outside [-1, 1], and a loss that is not finite or empty where it must be there (train_loss after step
0; eval_loss and eval_accuracy are empty where not evaluated, and then never "nan"), with the row and the column. A
non-finite value would otherwise drop its seed from a claim without a word. And a row of a training run must be
its run's: `run_key_problems` names a run-key cell (size, dataset, objective, init, seed) that disagrees with the
run's name, which the claims would otherwise pair and group by.

No pandas at module level, no torch: rules/common.smk calls `table_error` at parse time (a Snakemake-only
environment), and the notebook passes its DataFrames to `check_tables`.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.formats.rundir import run_name

__all__ = [
    "KEY_COLUMNS",
    "TABLE_FILES",
    "key_text",
    "table_problems",
    "run_key_problems",
    "value_problems",
    "file_problems",
    "table_error",
    "check_tables",
    "check_design_claims",
    "check_claim_values",
]

# table kind -> the columns that identify a row (in the order messages name them)
KEY_COLUMNS: dict[str, tuple[str, ...]] = {
    "training_scores": ("run", "step", "layer"),
    "training_loss": ("run", "step"),
    "update_scores": ("run", "step", "layer", "kind"),
    "null_scores": ("size", "init", "sample", "layer"),
}
# table kind -> its file name under {results}/tables
TABLE_FILES = {kind: f"{kind}.csv" for kind in KEY_COLUMNS}
# table kind -> the columns that say whether a row is keyed (_keyed)
_SELECT = {"training_scores": ("head",), "training_loss": ("eval_loss",)}
_INTEGER = {"step", "layer", "sample", "seed"}
# table kind -> {value column: (may be empty, bounds)}; may be empty: "never", "step0" (only in the row of step 0),
# "always" (empty = not evaluated); bounds: the closed interval the value lies in (scores: [-1, 1], up to rounding)
_SCORE = ("never", (-1.0 - 1e-9, 1.0 + 1e-9))
VALUE_COLUMNS: dict[str, dict[str, tuple[str, tuple[float, float] | None]]] = {
    "training_scores": {"symmetry": _SCORE, "directionality": _SCORE},
    "update_scores": {"symmetry": _SCORE, "directionality": _SCORE},
    "pretrained_scores": {"symmetry": _SCORE, "directionality": _SCORE},
    "null_scores": {"symmetry": _SCORE, "directionality": _SCORE},
    "training_loss": {
        "train_loss": ("step0", None),
        "eval_loss": ("always", None),
        "eval_accuracy": ("always", (0.0, 1.0)),
        "learning_rate": ("never", None),
    },
}
_EXAMPLES = 1


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _value(column: str, value):
    """A key value as the plan writes it: an integer column's integral value as int, anything else as text;
    None where the cell is empty."""
    if _missing(value):
        return None
    if column in _INTEGER:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return str(value)
        return int(number) if math.isfinite(number) and number.is_integer() else str(value)
    return str(value)


def _keyed(kind: str, row: Mapping) -> bool:
    """Whether a row is one of the keyed rows of its table (see the module docstring)."""
    if kind == "training_scores":
        return str(row.get("head")) == "all"
    if kind == "training_loss":
        return not _missing(row.get("eval_loss")) and str(row.get("eval_loss")).lower() != "nan"
    return True


def key_text(kind: str, key: Sequence) -> str:
    """`run R step 3250 layer 1`: a key as a message names it."""
    return " ".join(f"{c} {'(empty)' if v is None else v}" for c, v in zip(KEY_COLUMNS[kind], key))


def _order(key: Sequence):
    return tuple((0, v, "") if isinstance(v, int) else (1, 0, "" if v is None else str(v)) for v in key)


def _examples(kind: str, keys: Iterable[Sequence]) -> str:
    first = sorted(keys, key=_order)[:_EXAMPLES]
    return ", ".join(key_text(kind, k) for k in first)


def _expected(kind: str, blocks: Sequence[Mapping], present: Counter) -> tuple[set, list[str]]:
    """The keys the plan expects (a counted column filled in from the table) and problems with the counts."""
    columns = KEY_COLUMNS[kind]
    out: set = set()
    problems = []
    for block in blocks:
        unknown = sorted(set(block) - set(columns)) + sorted(set(columns) - set(block))
        if unknown:
            raise UserError(f"expected {kind} rows: block keys {sorted(block)} are not {list(columns)}")
        fixed = {c: {_value(c, v) for v in block[c]} for c in columns if not isinstance(block[c], int)}
        for c, n in ((c, block[c]) for c in columns if isinstance(block[c], int)):
            i = columns.index(c)
            seen = {k[i] for k in present if all(k[j] in fixed[col] for j, col in enumerate(columns) if col in fixed)}
            if len(seen) != n:
                problems.append(f"{len(seen)} distinct {c} values where the plan has {n}")
            fixed = {**fixed, c: seen}
        out.update(itertools.product(*(sorted(fixed[c], key=str) for c in columns)))
    return out, problems


def _disagreeing(run: str, keys: Mapping) -> list[str]:
    """The run-key columns whose cell is not where the run's name has it (rundir.run_name's order); every one when
    the name says nothing clearer."""
    size, seed = keys["size"], keys["seed"]
    bad = [c for c in ("dataset", "objective", "init") if f"-{keys[c]}-" not in run]
    bad = [*(["size"] if not run.startswith(f"{size}-") else []), *bad]
    bad += ["seed"] if not run.endswith(f"-s{seed}") else []
    return bad or list(RUN_KEYS)


def run_key_problems(rows: Iterable[Mapping], columns: Sequence[str]) -> list[str]:
    """Rows (every row, keyed or not) of a table of training runs whose run-key cells (size, dataset, objective,
    init, seed) do not make their run's name (`{size}-{dataset}-{objective}-{init}-s{seed}`), as one phrase naming
    the count and the first one's cell, run and data row (1-based); none: each row is its run's. The claims pair and
    group runs by these cells, so a seed 3099 in a run named ...-s3004 would move a verdict without a word."""
    if "run" not in columns or not set(RUN_KEYS) <= set(columns):
        return []
    bad = []
    for i, row in enumerate(rows, start=1):
        keys = {c: _value(c, row.get(c)) for c in RUN_KEYS}
        run = str(_value("run", row.get("run")))
        if run != run_name(*(keys[c] for c in RUN_KEYS)):
            bad.append((i, run, keys, row))
    if not bad:
        return []
    i, run, keys, row = bad[0]
    cells = ", ".join(f"{c} {'(empty)' if keys[c] is None else keys[c]}" for c in _disagreeing(run, keys))
    where = f" step {_value('step', row.get('step'))}" if "step" in columns else ""
    return [
        f"{len(bad)} row(s) whose run keys disagree with their run name, e.g. {cells} in run {run}{where} "
        f"(data row {i})"
    ]


def table_problems(kind: str, rows: Iterable[Mapping], blocks: Sequence[Mapping], columns: Sequence[str]) -> list[str]:
    """What is wrong with a table's rows against the plan's blocks, as short phrases (none: it is whole).
    `columns`: the table's columns (a key column it lacks is the only problem named). A row whose run keys disagree
    with its run name is named too (run_key_problems)."""
    keys = KEY_COLUMNS[kind]
    need = [*keys, *_SELECT.get(kind, ())]
    lacking = [c for c in need if c not in columns]
    if lacking:
        return [f"no column(s) {', '.join(lacking)}"]
    rows = list(rows)
    present = Counter(tuple(_value(c, row.get(c)) for c in keys) for row in rows if _keyed(kind, row))
    expected, problems = _expected(kind, blocks, present)
    problems += run_key_problems(rows, columns)
    repeated = [k for k, n in present.items() if n > 1]
    missing = expected - set(present)
    extra = set(present) - expected
    if missing:
        problems.append(f"{len(missing)} row(s) missing, e.g. {_examples(kind, missing)}")
    if extra:
        if keys[0] == "run":
            planned = {k[0] for k in expected} | {r for b in blocks for r in b["run"]}
            strangers = sorted({str(k[0]) for k in extra if k[0] is not None and k[0] not in planned})
            if strangers:
                problems.append(
                    f"rows of {len(strangers)} run(s) the plan does not have ({', '.join(strangers[:3])}"
                    + (", ..." if len(strangers) > 3 else "")
                    + ")"
                )
                extra = {k for k in extra if k[0] is None or k[0] in planned}
        if extra:
            problems.append(f"{len(extra)} row(s) the plan does not have, e.g. {_examples(kind, extra)}")
    if repeated:
        problems.append(f"{len(repeated)} row(s) repeated, e.g. {_examples(kind, repeated)}")
    return problems


def _bad_value(value, empty: str, bounds, step) -> str | None:
    """Why a value cell is not acceptable (None: it is)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        if isinstance(value, float) and empty == "always":
            return None  # a DataFrame's empty cell (NaN); the file's cell is checked as text at parse time
        if empty == "always" or (empty == "step0" and _value("step", step) == 0):
            return None
        return "empty" if not isinstance(value, float) else "not a number (nan)"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"not a number ({value!r})"
    if not math.isfinite(number):
        return f"not finite ({value!r})"
    if bounds is not None and not bounds[0] <= number <= bounds[1]:
        return f"outside [{round(bounds[0])}, {round(bounds[1])}] ({value!r})"
    return None


def value_problems(kind: str, rows: Sequence[Mapping], columns: Sequence[str]) -> list[str]:
    """The value cells of a table that a claim could not use, as one phrase naming the count and the first one's
    column, row key and data row (1-based); none: every value is a number where it must be."""
    spec = {c: v for c, v in VALUE_COLUMNS.get(kind, {}).items() if c in columns}
    bad = []
    for i, row in enumerate(rows, start=1):
        for column, (empty, bounds) in spec.items():
            why = _bad_value(row.get(column), empty, bounds, row.get("step"))
            if why is not None:
                bad.append((i, column, why, row))
    if not bad:
        return []
    i, column, why, row = bad[0]
    names = KEY_COLUMNS.get(kind, ("model", "component", "layer"))
    key = " ".join(f"{c} {'(empty)' if _value(c, row.get(c)) is None else _value(c, row.get(c))}" for c in names)
    head = f" head {row.get('head')}" if kind == "training_scores" and str(row.get("head")) != "all" else ""
    return [f"{len(bad)} value(s) a claim cannot use, e.g. {column} {why} at {key}{head} (data row {i})"]


def file_problems(path: str) -> list[str]:
    """What is wrong with a table file as a file: every table writer ends it with a newline, so a file that does
    not end with one was cut (a truncated last row can still parse as a row with other values)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            fh.seek(max(size - 1, 0))
            last = fh.read(1)
    except OSError as exc:
        return [f"cannot be read ({exc.strerror or exc})"]
    if size and last != b"\n":
        return ["its last line is cut (no newline at the end of the file)"]
    return []


def _line(path: str, problems: list[str], config: str) -> str:
    return (
        f"{path}: {'; '.join(problems)}; the table does not hold what {config or 'the config'} plans: restore the "
        f"committed file (git checkout -- {path}) or remake it (rm {path}, then the workflow again)"
    )


def _read_rows(path: str) -> tuple[list[str], list[dict]]:
    """The header and rows of a CSV file (the csv module: the parse has no pandas)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        return header, [dict(zip(header, row)) for row in reader]


def table_error(paths: Mapping[str, str], expected: Mapping[str, Sequence[Mapping]], config: str = "") -> str | None:
    """One line naming the first table of `paths` (kind -> file) that exists and does not hold the rows of
    `expected` (kind -> blocks), or None. Tables that do not exist are left to the workflow, which makes them."""
    for kind, path in paths.items():
        if kind not in expected or not os.path.isfile(path):
            continue
        problems = file_problems(path)
        try:
            header, rows = _read_rows(path)
        except (OSError, csv.Error, UnicodeDecodeError) as exc:
            return _line(path, [*problems, f"not a readable CSV table ({exc})"], config)
        problems += table_problems(kind, rows, expected[kind], header)
        problems += value_problems(kind, rows, header)
        if problems:
            return _line(path, problems, config)
    return None


def _frame_rows(kind: str, frame) -> tuple[list[str], list[dict]]:
    """A DataFrame's columns and its rows as dicts of the columns the check reads (duck-typed: no pandas import)."""
    columns = [str(c) for c in frame.columns]
    wanted = [
        c
        for c in (*KEY_COLUMNS[kind], *_SELECT.get(kind, ()), *RUN_KEYS, "step", *VALUE_COLUMNS.get(kind, {}))
        if c in columns
    ]
    wanted = list(dict.fromkeys(wanted))
    return columns, frame[wanted].to_dict("records")


def check_tables(
    tables: Mapping[str, tuple[str, object]], expected: Mapping[str, Sequence[Mapping]] | None, config: str = ""
) -> None:
    """UserError (one line) unless each table of `tables` (kind -> (its file, its DataFrame or None)) that
    `expected` names holds exactly the expected rows and its file is whole. `expected` None: nothing to check
    (a notebook run by hand without the plan)."""
    if expected is None:
        return
    unknown = sorted(set(expected) - set(KEY_COLUMNS))
    if unknown:
        raise UserError(
            f"expected tables: unknown table kind(s) {', '.join(unknown)} (known: {', '.join(KEY_COLUMNS)})"
        )
    for kind, blocks in expected.items():
        if kind not in tables:
            continue
        path, frame = tables[kind]
        if frame is None:
            raise UserError(f"{path}: the plan expects this {kind} table but it was not read")
        problems = file_problems(path) if path and os.path.isfile(path) else []
        columns, rows = _frame_rows(kind, frame)
        problems += table_problems(kind, rows, blocks, columns)
        problems += value_problems(kind, rows, columns)
        if problems:
            raise UserError(_line(path, problems, config))


# analysis.claims.ClaimTables field -> the table kind its values are checked as
CLAIM_TABLE_KINDS = {
    "training": "training_scores",
    "loss": "training_loss",
    "updates": "update_scores",
    "null": "null_scores",
    "pretrained": "pretrained_scores",
}


def check_claim_values(tables) -> None:
    """UserError (one line) when a table the claims read (a ClaimTables: fields of CLAIM_TABLE_KINDS, DataFrames or
    None) holds a value a claim cannot use (value_problems): the claims never decide on a table with a hole."""
    for field, kind in CLAIM_TABLE_KINDS.items():
        frame = getattr(tables, field, None)
        if frame is None:
            continue
        columns = [str(c) for c in frame.columns]
        wanted = [c for c in (*KEY_COLUMNS.get(kind, ("model", "component", "layer")), "head", "step") if c in columns]
        wanted = list(dict.fromkeys([*wanted, *(c for c in VALUE_COLUMNS[kind] if c in columns)]))
        problems = value_problems(kind, frame[wanted].to_dict("records"), columns)
        if problems:
            raise UserError(f"claims: the {field} table ({kind}): {problems[0]}")


def check_design_claims(claims, design: Sequence[str] | None, config: str = "") -> None:
    """UserError (one line) when a claim of the config's design (`design`: claim ids) came out "not tested" in
    `claims` (claims.csv's rows: id, verdict, note), or is absent: such a verdict would be dropped silently and
    Holm would adjust over fewer claims."""
    if design is None:
        return
    rows = {str(r["id"]): r for r in claims.to_dict("records")}
    absent = [c for c in design if c not in rows]
    if absent:
        raise UserError(f"claims: {', '.join(absent)} of the design of {config or 'the config'} are not claims")
    untested = [c for c in design if rows[c]["verdict"] == "not tested"]
    if untested:
        why = " ".join(str(rows[untested[0]].get("note") or "").split()).removeprefix("Not tested: ")
        raise UserError(
            f"claims: {len(untested)} claim(s) of the design of {config or 'the config'} came out not tested "
            f"({', '.join(untested)}; {untested[0]}: {why}): the tables lack what they need; remake them "
            "(docs/workflow.md)"
        )
