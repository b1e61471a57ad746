"""Tables that prove they are whole (analysis.completeness, workflow.plan's expected_tables and design_claims) and
committed results that survive a failed job (workflow.keep).

A small complete table set stands for what a plan expects: every damage (dropped, repeated or cut rows, another
run, key columns swapped) is one error line naming the table, and a table whose keyed rows are intact (columns in
another order, a non-keyed row dropped) passes with the same rows. Hypothesis draws random truncations, dropped
and repeated rows and column orders. The workflow test truncates a table of the smoke run: the parse stops with one
line and no committed file changes; a notebook that fails leaves its committed figure as it was, and one killed
outright gets its committed outputs back at the next parse."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import SNAKEMAKE, config_plan, copy_workflow, env, job_counts, snakemake, validated_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attention_geometry.analysis.completeness import (
    KEY_COLUMNS,
    check_design_claims,
    check_tables,
    table_error,
    value_problems,
)
from attention_geometry.analysis.summaries import read_table
from attention_geometry.errors import UserError
from attention_geometry.workflow.keep import RESTORED_MTIME, keep_committed, keep_outputs, restore_missing
from attention_geometry.workflow.plan import NULL_INITS

REPO = Path(__file__).resolve().parents[1]
RUNS = {"tiny-w-encoder-standard-s0": "encoder", "tiny-w-decoder-standard-s0": "decoder"}
STEPS = [0, 10, 20]
# a plan's expected rows of the small table set (workflow.plan.Plan.expected_tables's form)
EXPECTED = {
    "training_scores": [{"run": list(RUNS), "step": STEPS, "layer": [0, 1]}],
    "training_loss": [{"run": list(RUNS), "step": STEPS}],
    "update_scores": [
        {"run": list(RUNS), "step": [0, 20], "layer": [0, 1], "kind": ["gradient"]},
        {"run": list(RUNS), "step": [0], "layer": [0, 1], "kind": ["applied"]},
    ],
    "null_scores": [{"size": ["tiny"], "init": ["standard", "fresh"], "sample": 3, "layer": [0, 1]}],
}
INPUT = {"training_scores": "training", "training_loss": "loss", "update_scores": "updates", "null_scores": "null"}


def _frames() -> dict[str, pd.DataFrame]:
    """A complete table set: per-head rows beside the keyed `all` rows, train-only loss rows between evaluations."""
    ts, tl, us = [], [], []
    for run, objective in RUNS.items():
        keys = dict(run=run, size="tiny", dataset="w", objective=objective, init="standard", seed=0)
        for step in STEPS:
            for layer in (0, 1):
                for head in ("all", "0"):
                    ts.append(dict(model=run, layer=layer, head=head, symmetry=0.01 * step, directionality=-0.01 * layer,  # noqa: E501
                                   **keys, step=step))  # fmt: skip
            tl.append(
                dict(**keys, step=step, train_loss=7.0 - step / 10, eval_loss=7.1 - step / 10, learning_rate=1e-3)
            )
            if step < STEPS[-1]:
                tl.append(dict(**keys, step=step + 5, train_loss=6.9 - step / 10, eval_loss=None, learning_rate=1e-3))
        for step in (0, 20):
            for layer in (0, 1):
                for kind in ("gradient", "applied") if step == 0 else ("gradient",):
                    us.append(dict(**keys, step=step, layer=layer, kind=kind, symmetry=0.2, directionality=-0.3))
    null = [
        dict(size="tiny", init=init, sample=100000 + i, layer=layer, symmetry=0.01 * i, directionality=0.02)
        for init in ("standard", "fresh")
        for i in range(3)
        for layer in (0, 1)
    ]
    return {
        "training_scores": pd.DataFrame(ts),
        "training_loss": pd.DataFrame(tl),
        "update_scores": pd.DataFrame(us),
        "null_scores": pd.DataFrame(null),
    }


FRAMES = _frames()
TEXT = {kind: frame.to_csv(index=False, lineterminator="\n") for kind, frame in FRAMES.items()}


def _write(folder: Path, texts: dict[str, str | bytes]) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for kind, text in texts.items():
        path = folder / f"{kind}.csv"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        paths[kind] = str(path)
    return paths


def _check(paths: dict[str, str]) -> str | None:
    """The one error line of both readers (the parse's csv check and the notebook's, on read_table's frames), which
    must agree; None when the tables are whole."""
    parse = table_error(paths, EXPECTED, "config/test.yaml")
    try:
        frames = {k: (p, read_table(p, INPUT[k], KEY_COLUMNS[k])) for k, p in paths.items()}
        check_tables(frames, EXPECTED, "config/test.yaml")
        notebook = None
    except UserError as exc:
        notebook = str(exc)
    assert (parse is None) == (notebook is None), (parse, notebook)
    for line in (parse, notebook):
        assert line is None or "\n" not in line, line
    return notebook


def _damaged(tmp_path, kind: str, text: str | bytes) -> str:
    line = _check(_write(tmp_path, {**TEXT, kind: text}))
    assert line is not None
    assert str(tmp_path / f"{kind}.csv") in line and "\n" not in line, line
    return line


def _drop(kind: str, rows) -> str:
    return FRAMES[kind].drop(index=rows).to_csv(index=False, lineterminator="\n")


# ------------------------------------------------------------------------------------------------ unit tests
def test_a_complete_table_set_passes(tmp_path):
    assert _check(_write(tmp_path, TEXT)) is None


def test_a_dropped_row_is_one_line_naming_it(tmp_path):
    f = FRAMES["training_scores"]
    row = f.index[
        (f["run"] == "tiny-w-decoder-standard-s0") & (f["step"] == 10) & (f["layer"] == 1) & (f["head"] == "all")
    ]
    line = _damaged(tmp_path, "training_scores", _drop("training_scores", row))
    assert "1 row(s) missing, e.g. run tiny-w-decoder-standard-s0 step 10 layer 1;" in line
    assert "does not hold what config/test.yaml plans" in line and "rm " in line


def test_a_dropped_evaluation_is_missing_but_a_train_only_row_is_not_keyed(tmp_path):
    loss = FRAMES["training_loss"]
    line = _damaged(tmp_path, "training_loss", _drop("training_loss", loss.index[loss["eval_loss"].notna()][:1]))
    assert "1 row(s) missing, e.g. run tiny-w-encoder-standard-s0 step 0" in line
    assert (
        _check(
            _write(tmp_path, {**TEXT, "training_loss": _drop("training_loss", loss.index[loss["eval_loss"].isna()])})
        )
        is None
    )


def test_a_repeated_row_is_one_line(tmp_path):
    u = FRAMES["update_scores"]
    text = pd.concat([u, u.iloc[[3]]]).to_csv(index=False, lineterminator="\n")
    assert "1 row(s) repeated, e.g. run tiny-w-encoder-standard-s0" in _damaged(tmp_path, "update_scores", text)


def test_a_truncated_file_is_one_line(tmp_path):
    text = TEXT["training_scores"].encode()
    line = _damaged(tmp_path, "training_scores", text[: len(text) // 2])
    assert "its last line is cut" in line and "row(s) missing" in line
    # cut at a row's end, or only the last newline: the rows left may be whole, the file is not
    assert "row(s) missing" in _damaged(tmp_path, "training_scores", b"\n".join(text.split(b"\n")[:-3]) + b"\n")
    assert "its last line is cut" in _damaged(tmp_path, "training_scores", text[:-1])
    assert "is empty" in _damaged(tmp_path, "training_scores", b"")


def test_reordered_columns_pass_but_swapped_key_names_do_not(tmp_path):
    f = FRAMES["training_scores"]
    assert _check(_write(tmp_path, {**TEXT, "training_scores": f[f.columns[::-1]].to_csv(index=False)})) is None
    swapped = f.rename(columns={"step": "layer", "layer": "step"}).to_csv(index=False, lineterminator="\n")
    assert "row(s) missing" in _damaged(tmp_path, "training_scores", swapped)


def test_a_run_the_plan_does_not_have_is_named(tmp_path):
    f = FRAMES["training_scores"]
    other = f[f["run"] == "tiny-w-encoder-standard-s0"].assign(run="tiny-w-encoder-standard-s9")
    text = pd.concat([f, other]).to_csv(index=False, lineterminator="\n")
    assert "rows of 1 run(s) the plan does not have (tiny-w-encoder-standard-s9)" in _damaged(
        tmp_path, "training_scores", text
    )


def test_null_samples_are_counted_and_an_applied_update_at_the_last_snapshot_is_extra(tmp_path):
    n = FRAMES["null_scores"]
    line = _damaged(tmp_path, "null_scores", _drop("null_scores", n.index[n["sample"] == 100001]))
    assert "2 distinct sample values where the plan has 3" in line
    u = FRAMES["update_scores"]
    extra = u[u["step"] == 20].assign(kind="applied")
    line = _damaged(tmp_path, "update_scores", pd.concat([u, extra]).to_csv(index=False, lineterminator="\n"))
    assert "4 row(s) the plan does not have, e.g. run tiny-w-decoder-standard-s0 step 20 layer 0 kind applied" in line


def test_a_missing_key_column_is_one_line(tmp_path):
    text = FRAMES["training_scores"].drop(columns=["head"]).to_csv(index=False, lineterminator="\n")
    assert "no column(s) head" in _damaged(tmp_path, "training_scores", text)


def test_without_a_plan_nothing_is_checked():
    check_tables({"training_scores": ("x.csv", FRAMES["training_scores"].iloc[:1])}, None)


def test_a_design_claim_not_tested_stops_with_one_line():
    claims = pd.DataFrame(
        {
            "id": ["a", "b", "a_paper"],
            "verdict": ["holds", "not tested", "not tested"],
            "note": ["", "Not tested: no decoder\nemergence runs given", "Not tested: no decoder-paper emergence runs"],
        }
    )
    check_design_claims(claims, ["a"])
    check_design_claims(claims, None)
    with pytest.raises(UserError) as exc:
        check_design_claims(claims, ["a", "b"], "config/config.yaml")
    assert "1 claim(s) of the design of config/config.yaml came out not tested (b; b: no decoder emergence" in str(
        exc.value
    )
    assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match="not claims"):
        check_design_claims(claims, ["zz"])


# ------------------------------------------------------------------------------------ the plan's expectations
def test_the_plan_expects_what_the_trainer_and_scorers_write():
    from attention_geometry.scoring import random_init_null

    assert NULL_INITS == random_init_null.NULL_INITS
    assert 'inits=" ".join(PLAN.null_inits())' in (REPO / "rules" / "score.smk").read_text()  # the plan's
    p = config_plan(validated_config("smoke.yaml"))
    e = p.expected_tables()
    scored = {r: b for b in e["training_scores"] for r in b["run"]}
    assert set(scored) == set(p.runs) and all(scored[r]["step"] == p.runs[r].snapshot_steps for r in p.runs)
    assert all(b["layer"] == [0, 1] for b in e["training_scores"])
    kinds = {(r, b["kind"][0]): b["step"] for b in e["update_scores"] for r in b["run"]}
    for r in p.update_runs:  # updates.steps [0, 40]: no applied update at the last snapshot
        assert kinds[(r, "gradient")] == [0, 40] and kinds[(r, "applied")] == (
            [0] if p.runs[r].max_steps == 40 else [0, 40]
        )
    assert e["null_scores"][0]["sample"] == p.config["figures"]["null_samples"]
    assert json.loads(json.dumps(e)) == e  # a papermill parameter


def test_design_claims_follow_the_groups():
    study1 = config_plan(validated_config("study1.yaml")).design_claims()
    assert {"a", "b", "c1", "c2", "d1", "d2", "e", "f", "f2", "v1", "v2", "v3", "v4", "h_applied_1"} <= set(study1)
    assert not {"a_paper", "e_paper", "p_tie", "g1", "g3"} & set(study1)
    assert {"a_paper", "b_paper", "p_sym", "p_dir", "e_paper", "p_tie"} <= set(
        config_plan(validated_config("study2.yaml")).design_claims()
    )
    smoke = config_plan(validated_config("smoke.yaml")).design_claims()
    assert "v_symmetric" not in smoke and "v4" in smoke  # its vision group has no symmetric (untied) run


def test_the_committed_tables_hold_what_the_default_plans():
    p = config_plan(validated_config("config.yaml"))
    paths = {k: os.path.join(str(REPO), p.res("tables", f"{k}.csv")) for k in KEY_COLUMNS}
    assert table_error(paths, p.expected_tables(), "config/config.yaml") is None


def test_the_derived_params_are_not_part_of_the_notebook_record():
    from attention_geometry.workflow.records import records

    p = config_plan(validated_config("config.yaml"))
    params = records(p)["make_reproduction_report"][1]["notebook"]["params"]
    assert "expected_tables" not in params and "design_claims" not in params
    assert set(p.notebook_io("reproduction_report")[0]["params"]) >= {"expected_tables", "design_claims"}


# ------------------------------------------------------------------------------------------ kept outputs
def test_kept_outputs_are_restored_where_missing_and_out_of_date(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results/figures").mkdir(parents=True)
    for name in ("a.png", "b.pdf", "gone.png"):
        Path("results/figures", name).write_text(name)
    keep_outputs(["results/figures/gone.png"])
    os.remove("results/figures/gone.png")  # removed on purpose before the next parse: never put back
    kept = keep_outputs(["results/figures/a.png", "results/figures/b.pdf", "results/figures/gone.png"])
    assert kept == ["results/figures/a.png", "results/figures/b.pdf"]
    assert not Path(".snakemake/committed-outputs/results/figures/gone.png").exists()
    assert keep_outputs(kept) == kept  # a second parse: nothing to do
    os.remove("results/figures/a.png")  # what Snakemake does to a failed job's outputs
    Path("results/figures/b.pdf").write_text("new")  # a job that succeeded: not touched
    assert restore_missing(kept) == ["results/figures/a.png"]
    assert Path("results/figures/a.png").read_text() == "a.png"
    assert os.stat("results/figures/a.png").st_mtime == RESTORED_MTIME
    assert Path("results/figures/b.pdf").read_text() == "new" and not Path("results/figures/gone.png").exists()


def test_a_killed_job_leaves_its_kept_outputs_to_be_restored_by_the_next_parse(tmp_path, monkeypatch):
    """A SIGKILL while a notebook job runs (issue 41.6): Snakemake had removed the job's outputs, its input-sums
    record among them, and `onerror` never ran. The next parse (any command, --unlock too) puts the whole kept set
    back, older than any input, instead of discarding it; an output removed on purpose (its entry's input-sums record
    still there) is never put back."""
    monkeypatch.chdir(tmp_path)
    report = ["results/tables/claims.csv", "results/reproduction_report.md", "results/config/make_report.inputs.sha256"]
    figure = ["results/figures/f.png", "results/config/make_f.inputs.sha256"]
    for path in report + figure:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(f"good {path}")
    kept, restored = keep_committed([report, figure])  # the parse of the run that is killed
    assert kept == report + figure and restored == []
    for path in report:  # Snakemake removes a job's outputs before it runs ...
        os.remove(path)
    Path(report[0]).write_text("half a table")  # ... and the notebook had begun to write one when it was killed
    os.remove(figure[0])  # a figure removed on purpose (its input-sums record stays)

    kept, restored = keep_committed([report, figure])  # the next parse
    assert sorted(restored) == sorted(report)
    for path in report:
        assert Path(path).read_text() == f"good {path}" and os.stat(path).st_mtime == RESTORED_MTIME, path
    assert not Path(figure[0]).exists() and kept == report + figure[1:]
    assert not Path(".snakemake/committed-outputs", figure[0]).exists()
    # the kept copies stay until the outputs are remade: a third parse restores nothing and keeps the set
    assert keep_committed([report, figure]) == (kept, [])
    assert all(Path(".snakemake/committed-outputs", p).is_file() for p in report)


# --------------------------------------------------------------------------------------- property tests
FUZZ = dict(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def _keyed(kind: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The rows the claims are computed from, in a fixed order (the check's keyed rows, every column)."""
    if kind == "training_scores":
        frame = frame[frame["head"].astype(str) == "all"]
    if kind == "training_loss":
        frame = frame[frame["eval_loss"].notna()]
    cols = sorted(frame.columns)
    return frame[cols].sort_values(list(KEY_COLUMNS[kind])).reset_index(drop=True)


@st.composite
def damage(draw):
    kind = draw(st.sampled_from(sorted(FRAMES)))
    frame = FRAMES[kind]
    how = draw(st.sampled_from(["truncate", "drop", "repeat", "reorder"]))
    if how == "truncate":
        data = TEXT[kind].encode()
        return kind, data[: draw(st.integers(0, len(data)))]
    if how == "drop":
        rows = draw(st.lists(st.sampled_from(list(frame.index)), min_size=1, max_size=4, unique=True))
        return kind, frame.drop(index=rows).to_csv(index=False, lineterminator="\n")
    if how == "repeat":
        rows = draw(st.lists(st.sampled_from(list(frame.index)), min_size=1, max_size=3))
        return kind, pd.concat([frame, frame.loc[rows]]).to_csv(index=False, lineterminator="\n")
    order = draw(st.permutations(list(frame.columns)))
    return kind, frame[order].to_csv(index=False, lineterminator="\n")


@settings(max_examples=60, **FUZZ)
@given(case=damage())
def test_a_damaged_table_gives_the_right_rows_or_one_error_line(case, tmp_path_factory):
    kind, text = case
    folder = tmp_path_factory.mktemp("fuzz")
    paths = _write(folder, {**TEXT, kind: text})
    line = _check(paths)
    if line is None:  # whole: the claims read exactly the rows of the complete table
        got = pd.read_csv(io.BytesIO(text if isinstance(text, bytes) else text.encode()))
        pd.testing.assert_frame_equal(_keyed(kind, got), _keyed(kind, FRAMES[kind]), check_dtype=False)
    else:
        assert f"error: {line}".count("\n") == 0 and paths[kind] in line, line


# ------------------------------------------------------------------------------------------- the workflow
def _committed(results: Path) -> dict[str, str]:
    """sha256 of every committed kind of result (tables, figures, figure data, config records, the report)."""
    files = [p for d in ("tables", "figures", "figdata", "config") for p in (results / d).rglob("*") if p.is_file()]
    files += list(results.glob("*.md"))
    return {str(p.relative_to(results)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.workflow
def test_a_truncated_table_stops_the_workflow_and_no_committed_file_changes(smoke_workflow, tmp_path):
    wf = tmp_path / "wf"
    shutil.copytree(smoke_workflow, wf, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    results = wf / yaml.safe_load((wf / "config" / "smoke.yaml").read_text())["results"]
    table = results / "tables" / "training_scores.csv"
    whole = table.read_bytes()
    table.write_bytes(whole[: len(whole) // 2])
    before = _committed(results)
    proc = snakemake("--configfile", "config/smoke.yaml", "--cores", "1", cwd=wf, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    lines = [ln for ln in out.splitlines() if "does not hold what" in ln]
    assert len(lines) == 1 and lines[0].startswith(f"{table.relative_to(wf)}: its last line is cut"), out[-3000:]
    assert _committed(results) == before

    # a notebook job that fails: its committed figure stays as it was, and the next run retries it
    table.write_bytes(whole)
    nb = wf / "notebooks" / "fig3_emergence.ipynb"
    notebook = json.loads(nb.read_text())
    code = next(
        c for c in notebook["cells"] if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", [])
    )
    code["source"] = ['raise ValueError("a cell that fails on purpose")\n']
    nb.write_text(json.dumps(notebook, indent=1))
    before = _committed(results)
    proc = snakemake("--configfile", "config/smoke.yaml", "--cores", "1", cwd=wf, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "a cell that fails on purpose" in out
    restored = [ln for ln in out.splitlines() if ln.startswith("restored ")]
    assert len(restored) == 1 and "figures/fig3_emergence.png" in restored[0], out[-3000:]
    assert _committed(results) == before
    assert job_counts(snakemake("--configfile", "config/smoke.yaml", "-n", cwd=wf).stdout) == {
        "make_fig3_emergence": 1,
        "all": 1,
    }


@pytest.mark.workflow
def test_a_notebook_job_killed_outright_gets_its_committed_outputs_back_at_the_next_parse(tmp_path):
    """SIGKILL of the workflow while a notebook job runs (issue 41.6): the job's committed outputs (claims.csv, the
    report, their input sums) were removed by Snakemake and no `onerror` ran; `snakemake --unlock`, the next command
    after a hard kill, parses the workflow and puts them back byte for byte, with one line, out of date against
    their inputs. In a copy of the workflow with study 3's committed record (the default's results)."""
    wf = copy_workflow(tmp_path / "wf")
    results = validated_config("config.yaml")["results"]
    tracked = subprocess.run(["git", "ls-files", "-z", results], cwd=REPO, capture_output=True, text=True, check=True)
    for rel in filter(None, tracked.stdout.split("\0")):
        (wf / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, wf / rel)
    report = [f"{results}/tables/claims.csv", f"{results}/reproduction_report.md"]
    outputs = [*report, f"{results}/config/make_reproduction_report.inputs.sha256"]
    before = {p: (wf / p).read_bytes() for p in outputs}
    nb = wf / "notebooks" / "reproduction_report.ipynb"  # an edit: the report's job runs
    notebook = json.loads(nb.read_text())
    notebook["metadata"]["edited_by_test"] = 1
    nb.write_text(json.dumps(notebook, indent=1))

    proc = subprocess.Popen(
        [SNAKEMAKE, "--cores", "1", "--until", "make_reproduction_report"],
        cwd=wf, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 120
        while (wf / outputs[-1]).exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)  # Snakemake removes the job's outputs before it starts it
        assert not (wf / outputs[-1]).exists() and proc.poll() is None, "the report's job did not start"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not any((wf / p).exists() for p in report)

    unlock = snakemake("--unlock", "--cores", "1", cwd=wf)
    lines = [ln for ln in unlock.stderr.splitlines() if ln.startswith("restored ")]
    assert len(lines) == 1 and all(p in lines[0] for p in outputs), unlock.stderr[-3000:]
    assert {p: (wf / p).read_bytes() for p in outputs} == before
    assert all(os.stat(wf / p).st_mtime == RESTORED_MTIME for p in outputs)


# ------------------------------------------------------------------------------ values a claim cannot use
def _set_cell(kind: str, row: int, column: str, value: str) -> str:
    """TEXT[kind] with one cell (data row `row`, 0-based) replaced by the literal `value`."""
    frame = FRAMES[kind].astype(object).copy()
    frame.loc[row, column] = value
    return frame.to_csv(index=False, lineterminator="\n")


@pytest.mark.parametrize(
    "kind, row, column, value, why",
    [
        ("training_scores", 0, "symmetry", "nan", "not finite"),
        ("training_scores", 2, "symmetry", "", "empty"),
        ("training_scores", 4, "directionality", "inf", "not finite"),
        ("training_scores", 1, "symmetry", "1.5", "outside [-1, 1]"),  # a per-head row
        ("training_scores", 0, "directionality", "abc", "not a number"),
        ("training_loss", 1, "train_loss", "nan", "not finite"),
        ("training_loss", 1, "train_loss", "", "empty"),
        ("training_loss", 2, "eval_loss", "1e999", "not finite"),
        ("training_loss", 0, "learning_rate", "-inf", "not finite"),
        ("update_scores", 0, "directionality", "-inf", "not finite"),
        ("null_scores", 3, "symmetry", "nan", "not finite"),
    ],
)
def test_a_value_a_claim_cannot_use_stops_with_one_line_naming_row_and_column(tmp_path, kind, row, column, value, why):
    parse = table_error(_write(tmp_path, {**TEXT, kind: _set_cell(kind, row, column, value)}), EXPECTED, "c.yaml")
    assert parse is not None and "\n" not in parse, parse
    assert f"{kind}.csv" in parse and f"e.g. {column} " in parse and f"(data row {row + 1})" in parse, parse
    keys = FRAMES[kind].iloc[row]
    assert (f"run {keys['run']}" if "run" in keys else f"init {keys['init']}") in parse, parse
    if value != "":  # the notebook's frame reads an empty cell as nan, the parse names it "empty"
        assert why in parse, parse
    notebook = _check(_write(tmp_path / "nb", {**TEXT, kind: _set_cell(kind, row, column, value)}))
    assert notebook is not None and f"e.g. {column} " in notebook


@pytest.mark.parametrize(
    "kind, row, column, value",
    [
        ("training_scores", 2, "seed", "9"),  # seed 9 in a run named ...-s0 (issue 41.5: it flipped b_paper)
        ("training_scores", 1, "size", "base"),  # a per-head row
        ("training_loss", 2, "objective", "decoder"),  # an encoder's run
        ("training_loss", 1, "dataset", "x"),  # a train-only row
        ("update_scores", 0, "init", "fresh"),
    ],
)
def test_a_run_key_that_disagrees_with_its_run_name_stops_with_one_line(tmp_path, kind, row, column, value):
    """A run-key cell (size, dataset, objective, init, seed) that disagrees with the run's name
    ({size}-{dataset}-{objective}-{init}-s{seed}) is one line naming the cell, its run and its data row, at parse
    time and in the notebook's check; the rows' keys (run, step, layer) are all there, so nothing else is wrong."""
    keys = FRAMES[kind].iloc[row]
    assert str(keys[column]) != value and keys["run"].startswith("tiny-w-")
    line = _damaged(tmp_path, kind, _set_cell(kind, row, column, value))
    assert f"{column} {value} in run {keys['run']}" in line and f"(data row {row + 1})" in line, line
    assert "1 row(s) whose run keys disagree with their run name" in line, line


def test_train_loss_may_be_empty_at_step_0_and_eval_loss_between_evaluations():
    # the complete set has both (step 0's train_loss is a number here; make it empty) and passes
    text = _set_cell("training_loss", 0, "train_loss", "")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert value_problems("training_loss", rows, list(rows[0])) == []
    rows[1]["eval_loss"] = "nan"  # a train-only row: empty, never a literal nan
    assert "eval_loss not finite" in value_problems("training_loss", rows, list(rows[0]))[0]


def test_the_claims_refuse_a_non_finite_input():
    from attention_geometry.analysis.claims import ClaimTables, reproduction_claims

    training = FRAMES["training_scores"].copy()
    training.loc[3, "symmetry"] = float("nan")
    with pytest.raises(UserError, match=r"claims: the training table \(training_scores\): 1 value\(s\).*symmetry"):
        reproduction_claims(ClaimTables(training=training))
    loss = FRAMES["training_loss"].copy()
    loss.loc[1, "train_loss"] = float("inf")
    with pytest.raises(UserError, match=r"the loss table \(training_loss\).*train_loss not finite"):
        reproduction_claims(ClaimTables(loss=loss))
