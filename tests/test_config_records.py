"""Config records (attention_geometry.workflow.records): each committed result's record holds only the config
parts that feed it, and committed results whose record differs from the current config stop the workflow
with one line; so do committed tidy tables that no longer have their recorded sha256 where they cannot be remade.
The workflow-level checks, in a copy of the repository as a clone has it, are in tests/test_report.py."""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path

from helpers import REPO, config_plan, validated_config

from attention_geometry.formats.files import atomic_write_text
from attention_geometry.workflow.records import (
    NO_JOB_OPTIONS,
    content_current,
    input_sums_path,
    read_input_sums,
    record_path,
    record_text,
    records,
    run_mode,
    stale_error,
    stale_files,
    table_sums_error,
    table_sums_path,
    tidy_tables,
    write_input_sums,
)
from attention_geometry.workflow.runs import expand_runs


def _changed(a: dict, b: dict) -> set[str]:
    return {k for k in a if record_text(a[k][1]) != record_text(b[k][1])}


def _default():
    return validated_config("config.yaml")


def _longer_emergence_runs(cfg: dict) -> dict:
    """A copy of `cfg` whose emergence group's runs train twice as long: a run setting, which every snapshot step
    and updates.steps stay valid under."""
    cfg = copy.deepcopy(cfg)
    group = cfg["training"]["groups"][cfg["figures"]["emergence_group"]]
    for settings in (group["settings"], *group["runs"]):
        if "max_steps" in settings:
            settings["max_steps"] = 2 * settings["max_steps"]
    return cfg


def test_each_record_holds_only_the_config_that_feeds_its_results():
    base = _default()
    rec = records(config_plan(base))
    # Figure 1 draws the lowest-seed baseline-init encoder and decoder of the emergence group and the configured
    # pretrained models, and the report cites the corpus of that encoder (read here from the config itself)
    f = base["figures"]
    runs, groups = expand_runs(base["training"]["groups"], base["corpora"], base.get("images") or {})
    group = groups[f["emergence_group"]]
    first = {
        role: min(
            (r for r in group if (runs[r].objective, runs[r].init) == (role, f["baseline_init"])),
            key=lambda r: runs[r].seed,
        )
        for role in ("encoder", "decoder")
    }
    fig1_runs = set(first.values())
    corpus = f"corpus_{runs[first['encoder']].dataset}"
    model = f["fig1_models"]["encoder"]
    assert {
        "training_scores",
        "training_loss",
        "update_scores",
        "null_scores",
        "pretrained_scores",
        "pretrained_models",
        "symmetry_speedup",
        corpus,
    } <= set(rec)
    assert {k for k in rec if k.startswith("wqk_")} == {f"wqk_run_{r}" for r in fig1_runs} | {
        f"wqk_pretrained_{m}" for m in base["figures"]["fig1_models"].values()
    }
    notebooks = {k for k in rec if k.startswith("make_")}
    assert len(notebooks) == len(config_plan(base).notebooks) >= 10

    # a notebook constant: the records of what draws with it, never a training or scoring table's
    cfg = copy.deepcopy(base)
    cfg["figures"]["ci_level"] = 0.9
    changed = _changed(rec, records(config_plan(cfg)))
    assert "symmetry_speedup" in changed and changed - {"symmetry_speedup"} <= notebooks
    assert "make_fig3_emergence" in changed and "make_fig1_wqk_examples" not in changed

    # a run setting: the tables made from the runs (the update table where its runs are among them: the null's
    # source run always is), and Figure 1's matrix of that run
    changed = _changed(rec, records(config_plan(_longer_emergence_runs(base))))
    assert {
        "training_scores",
        "training_loss",
        "null_scores",
        *(["update_scores"] if set(config_plan(base).update_runs) & set(group) else []),
        *(f"wqk_run_{r}" for r in fig1_runs),
    } <= changed
    assert not changed & {"pretrained_scores", "pretrained_models", corpus, f"wqk_pretrained_{model}"}

    # a pretrained entry: its tables and its Figure 1 matrix only (and the grouped-query table where it is in it)
    cfg = copy.deepcopy(base)
    cfg["pretrained"][model]["revision"] = "0" * 40
    assert _changed(rec, records(config_plan(cfg))) == {
        "pretrained_scores",
        "pretrained_models",
        f"wqk_pretrained_{model}",
        *(["gqa_paper_method"] if model in f.get("gqa_models", []) else []),
    }

    # machine settings (threads, device, GPUs) and provenance (the commit, the whole-config hash) are not parts
    cfg = copy.deepcopy(base)
    cfg["training"].update(threads=8, device="cuda", gpus=2)
    cfg["scoring"]["threads"] = 4
    assert _changed(rec, records(config_plan(cfg))) == set()
    assert "code_version" not in record_text(rec["make_reproduction_report"][1])
    assert "config_hash" not in record_text(rec["make_reproduction_report"][1])


def test_run_mode_reads_forceall_and_dry_run_from_snakemakes_arguments():
    """The parse-time checks stop unless Snakemake is asked for --forceall (the table checks are skipped; the
    stale-config check is not) or a dry run (print and go on): the long options and their short letters, alone or
    bundled, and nothing else."""
    cases = {
        (): (False, False),
        ("--cores", "1"): (False, False),
        ("-n",): (False, True),
        ("--dry-run",): (False, True),
        ("--dryrun", "--cores", "all"): (False, True),
        ("-pn", "--cores", "2"): (False, True),
        ("--forceall",): (True, False),
        ("-F", "-j", "4"): (True, False),
        ("-nF",): (True, True),
        ("--forceall", "-n"): (True, True),
        # long options that merely contain the letters, and values, are neither
        ("--notemp", "--printshellcmds", "--rerun-incomplete", "--configfile", "config/smoke.yaml"): (False, False),
        ("--forcerun", "make_fig3_emergence", "--force"): (False, False),
        ("make_fig3_emergence", "results/figures/fig3_emergence.pdf"): (False, False),
        # short options with attached values (issue 41.4): a Snakefile and a config value, not -n or -F
        ("--cores", "2", "-sSnakefile", "--config", "results=results/study1"): (False, False),
        ("-Coffline=False", "--cores", "2"): (False, False),
        ("-snSnakefile",): (False, False),  # -s takes "nSnakefile" as its value
    }
    for argv, (forceall, dry_run) in cases.items():
        mode = run_mode(argv)
        assert (mode.forceall, mode.dry_run) == (forceall, dry_run), argv


def test_run_mode_says_whether_the_command_runs_jobs():
    """A dry run and the options under which Snakemake runs no job (lint, listings, graphs, reports, touch, unlock,
    cleanups) do not run jobs; a plain run, --forceall, targets and --printshellcmds do. Every name in
    NO_JOB_OPTIONS is an option of Snakemake's own parser, so a renamed one fails here instead of being ignored."""
    from snakemake.cli import get_argument_parser

    dests = {a.dest for a in get_argument_parser()._actions}
    assert set(NO_JOB_OPTIONS) <= dests, sorted(set(NO_JOB_OPTIONS) - dests)
    runs = [(), ("--cores", "1"), ("-F", "-j", "4"), ("--cores", "2", "results/x.csv", "--printshellcmds")]
    no_jobs = [
        ("-n",), ("--lint",), ("--lint", "json"), ("--list-rules",), ("--list-target-rules",), ("--dag",),
        ("--rulegraph",), ("--summary",), ("--report", "r.html"), ("--touch", "--cores", "1"), ("--unlock",),
        ("--delete-all-output",), ("--cleanup-metadata", "results/x.csv"),
    ]  # fmt: skip
    for argv in runs:
        assert run_mode(argv).runs_jobs, argv
    for argv in no_jobs:
        assert not run_mode(argv).runs_jobs, argv


def test_results_made_with_another_config_stop_with_one_line(tmp_path):
    base = _default()
    base["results"] = str(tmp_path / "r")
    made = config_plan(base)
    rec = records(made)
    for key, (files, parts) in rec.items():
        for f in files:
            atomic_write_text(f, "made\n")
        atomic_write_text(record_path(made, key), record_text(parts))
    assert stale_error(made) is None

    edited = config_plan(_longer_emergence_runs(base))
    msg = stale_error(edited)
    # one short line (it listed every result and an rm command naming each: thousands of characters); never
    # --forceall, which with a mistyped results folder would rewrite another study's record
    assert msg is not None and "\n" not in msg and "--forceall" not in msg, msg
    assert len(msg.replace(made.res(), "R")) < 300, msg
    assert made.res() in msg and "config/config.yaml" in msg
    listing = made.res("logs", "stale-results.txt")
    assert f"xargs rm -f -- < {listing}" in msg
    rm = open(listing).read().split()
    scores, loss = (made.res("tables", f"{t}.csv") for t in ("training_scores", "training_loss"))
    assert scores in rm and loss in rm and made.res("tables", "pretrained_scores.csv") not in rm
    assert record_path(made, "training_scores") in rm and record_path(made, "pretrained_scores") not in rm
    assert f"{len(rm)} files listed there" in msg
    # what the message says to remove, removed: nothing left to stop for (the next run remakes and records it)
    for path in rm:
        os.remove(path)
    assert stale_error(edited) is None
    # a result without its record (a results folder from before records): the next run records it
    os.remove(record_path(made, "pretrained_models"))
    assert stale_error(made) is None
    # a notebook constant edited: only notebook outputs and the symmetry/speed-up tables are named
    cfg = copy.deepcopy(base)
    cfg["figures"]["ci_level"] = 0.9
    assert stale_error(config_plan(cfg)) is not None
    listed = open(made.res("logs", "stale-results.txt")).read()
    assert "symmetry_speedup_runs.csv" in listed and "fig3_emergence.pdf" in listed
    assert "training_scores.csv" not in listed and "null_scores.csv" not in listed


def _entry_files(plan, nb):
    from attention_geometry.workflow.plan import notebook_file

    parameters, _, outputs = plan.notebook_io(nb)
    inputs = [notebook_file(plan.catalog, nb), *parameters["inputs"].values()]
    return inputs, [*outputs.values(), input_sums_path(plan, nb)]


def test_content_current_marks_only_outputs_whose_inputs_are_unchanged(tmp_path, monkeypatch):
    """A checkout that leaves an input newer than its outputs: the outputs are marked current (mtime moved past
    the inputs) only when the notebook and every input have the sha256 the last run recorded; an edited input,
    a missing record or a record of other files leave them stale for Snakemake."""
    import hashlib

    monkeypatch.chdir(tmp_path)
    cfg = validated_config()
    cfg["results"] = "res"
    plan = config_plan(cfg)
    nb = plan.notebooks[0]
    plan.notebooks = [nb]
    inputs, made = _entry_files(plan, nb)
    for i, f in enumerate(inputs + made[:-1]):
        os.makedirs(os.path.dirname(f) or ".", exist_ok=True)
        with open(f, "w") as fh:
            fh.write(f"content {i}\n")
    write_input_sums(made[-1], inputs)
    # the record is sha256sum's format, checked against hashlib
    lines = open(made[-1]).read().splitlines()
    names = [line.split("  ")[1] for line in lines]
    assert names == sorted(names) and len(names) == len(set(inputs))
    for line in lines:
        digest, name = line.split("  ")
        assert digest == hashlib.sha256(open(name, "rb").read()).hexdigest()

    def age(files, t):
        for f in files:
            os.utime(f, (t, t))

    age(made, 1_000_000)
    age(inputs, 2_000_000)  # every input "newer" than the outputs, as a checkout may leave them
    assert content_current(plan) == made
    assert all(os.stat(o).st_mtime >= os.stat(i).st_mtime for o in made for i in inputs)
    assert content_current(plan) == []  # nothing looks stale any more

    age(made, 1_000_000)
    with open(inputs[-1], "a") as fh:
        fh.write("an edit\n")
    age(inputs, 2_000_000)
    assert content_current(plan) == []  # changed content: left to Snakemake, which redraws
    assert os.stat(made[0]).st_mtime == 1_000_000

    write_input_sums(made[-1], [f for f in inputs if f != inputs[-1]])  # a record of other files
    age(made, 1_000_000)
    assert content_current(plan) == []
    os.remove(made[-1])  # no record at all
    assert content_current(plan) == [] and read_input_sums(made[-1]) == {}


# ---------------------------------------------------------------------------- the records' subcommands
def test_input_sums_subcommand_writes_sha256sum_lines(tmp_path, monkeypatch, capsys):
    """`input-sums` (rule tabulate_symmetry_speedup): one `sha256sum` line per file, sorted by path, the digests
    computed here with hashlib; a folder or missing input, and a record over one of its inputs, are one line."""
    import hashlib

    from attention_geometry.cli import main

    monkeypatch.chdir(tmp_path)
    os.makedirs("tables")
    for name, text in (("tables/b.csv", "x,y\n1,2\n"), ("tables/a.csv", "loss\n0.5\n")):
        with open(name, "w") as fh:
            fh.write(text)
    out = os.path.join("config", "t.inputs.sha256")
    assert main(["input-sums", "tables/b.csv", "./tables/a.csv", "tables/b.csv", "--out", out]) == 0
    expected = "".join(
        f"{hashlib.sha256(open(f, 'rb').read()).hexdigest()}  {f}\n" for f in ("tables/a.csv", "tables/b.csv")
    )
    assert open(out).read() == expected
    assert set(read_input_sums(out)) == {"tables/a.csv", "tables/b.csv"}  # what content_current reads back
    capsys.readouterr()
    for argv, why in (
        (["tables", "--out", "s"], "tables: is a folder"),
        (["tables/none.csv", "--out", "s"], "tables/none.csv: is missing"),
        (["tables/a.csv", "--out", "tables/a.csv"], "is the source tables/a.csv"),
    ):
        assert main(["input-sums", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err, err
    assert not os.path.exists("s") and open("tables/a.csv").read() == "loss\n0.5\n"


def test_record_corpus_subcommand_writes_the_manifest_record(tmp_path, capsys):
    """`record-corpus` (rule record_corpus): the corpus key, the manifest's sha256 (hashlib here) and its counts,
    without the manifest's machine paths; an output inside the corpus and a folder that is no corpus are one line."""
    import hashlib
    import json

    from attention_geometry.cli import main

    corpus = tmp_path / "corpora" / "c1"
    corpus.mkdir(parents=True)
    manifest = {
        "block_len": 16,
        "vocab_size": 50,
        "n_train_blocks": 7,
        "n_heldout_blocks": 2,
        "n_documents": 5,
        "n_tokens": 123,
        "documents_sha256": "cd" * 32,
        "sources": [{"path": "/a/machine/path"}],
    }
    (corpus / "manifest.json").write_text(json.dumps(manifest, indent=1))
    out = tmp_path / "tables" / "corpus_c1.csv"
    assert main(["record-corpus", str(corpus), "--corpus", "c1", "--out", str(out)]) == 0
    digest = hashlib.sha256((corpus / "manifest.json").read_bytes()).hexdigest()
    assert out.read_text() == (
        "corpus,manifest_sha256,documents_sha256,n_documents,n_tokens,n_train_blocks,n_heldout_blocks,block_len,"
        f"vocab_size\nc1,{digest},{'cd' * 32},5,123,7,2,16,50\n"
    )
    capsys.readouterr()
    assert main(["record-corpus", str(corpus), "--corpus", "c1", "--out", str(corpus / "r.csv")]) == 2
    assert "lies inside the source" in capsys.readouterr().err and not (corpus / "r.csv").exists()
    assert main(["record-corpus", str(tmp_path / "tables"), "--corpus", "c1", "--out", str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a prepared corpus" in err and not (tmp_path / "r.csv").exists()


def test_a_byte_identical_copy_of_the_config_is_the_same_config(tmp_path, monkeypatch):
    """Configs are compared by content (issue 41.10): `--configfile` naming a byte-identical copy of the config that
    made the results finds nothing stale, neither against records written here nor against study 3's committed
    ones (its config is the default, config/config.yaml); a copy with a run setting changed still is stale."""
    monkeypatch.chdir(REPO)  # the config's results folder is relative to the workflow's directory
    copy_path = tmp_path / "c.yaml"
    copy_path.write_bytes((REPO / "config" / "config.yaml").read_bytes())
    base = _default()
    made = config_plan(base, configfiles=[str(REPO / "config" / "config.yaml")])
    assert made.results == "results/study3"  # the committed record below is study 3's
    copied = config_plan(copy.deepcopy(base), configfiles=[str(copy_path)])
    assert copied.notebook_param("config_name", "reproduction_report") != "config/config.yaml"  # another name

    # the notebooks' committed records, read in place (stale_files writes nothing; the tables' records hold the
    # pretrained entries with defaults this test's schema filling leaves out)
    def notebooks(p):
        return {k: v for k, v in records(p).items() if k.startswith("make_")}

    assert "make_reproduction_report" in notebooks(copied)
    assert stale_files(made, notebooks(made)) == ([], [])
    assert stale_files(copied, notebooks(copied)) == ([], [])

    base["results"] = str(tmp_path / "r")
    made = config_plan(base, configfiles=[str(REPO / "config" / "config.yaml")])
    for key, (files, parts) in records(made).items():
        for f in files:
            atomic_write_text(f, "made\n")
        atomic_write_text(record_path(made, key), record_text(parts))
    assert stale_error(config_plan(copy.deepcopy(base), configfiles=[str(copy_path)])) is None
    edited = config_plan(_longer_emergence_runs(base), configfiles=[str(copy_path)])
    assert stale_error(edited) is not None


def _sha256sum_lines(paths) -> str:
    """`sha256sum` output for `paths` (hashlib, sorted by path): the record format, written here independently."""
    return "".join(f"{hashlib.sha256(open(p, 'rb').read()).hexdigest()}  {p}\n" for p in sorted(paths))


def test_a_committed_table_that_differs_from_its_recorded_sha256_stops_with_one_line(tmp_path):
    """Committed tidy tables are the record (issue 41.5): where one no longer has the sha256 recorded in
    {results}/config/tables.sha256 and what it is made from (its run folders, the per-model scores) is not there to
    remake it, the parse stops with one line naming it, how to restore it and how to accept an intended change."""
    base = _default()
    base["results"] = str(tmp_path / "r")
    p = config_plan(base)
    tables = tidy_tables(p)
    assert {"training_scores", "training_loss", "update_scores", "null_scores", "pretrained_scores"} <= set(tables)
    assert {k for k in tables if k.startswith("corpus_")} == {"corpus_wiki_offline"}  # the report's corpus record
    for kind, path in tables.items():
        atomic_write_text(path, f"kind,value\n{kind},1\n")
    record = table_sums_path(p)
    assert record == p.res("config", "tables.sha256")
    atomic_write_text(record, _sha256sum_lines(tables.values()))
    assert table_sums_error(p) is None

    edited = tables["training_scores"]
    atomic_write_text(edited, "kind,value\ntraining_scores,0.15\n")  # a hand edit, same size and shape
    msg = table_sums_error(p)
    assert msg is not None and "\n" not in msg and msg.startswith(f"{edited}: "), msg
    assert f"git checkout -- {edited}" in msg and f"rm {record}" in msg, msg
    atomic_write_text(tables["pretrained_scores"], "kind,value\npretrained_scores,2\n")
    assert "1 other table(s)" in table_sums_error(p)

    # with every run folder there, the training tables are the workflow's to remake: not stopped for; the
    # pretrained table (no per-model scores here) still is
    for run in p.runs:
        os.makedirs(p.run_dir(run))
    assert table_sums_error(p).startswith(f"{tables['pretrained_scores']}: ")
    atomic_write_text(tables["pretrained_scores"], "kind,value\npretrained_scores,1\n")  # restored
    assert table_sums_error(p) is None
    os.rmdir(p.run_dir(next(iter(p.runs))))  # one run folder gone: the edited table cannot be remade
    assert table_sums_error(p).startswith(f"{edited}: ")

    # the corpus record the report cites is in the record too (issue 59, LOW): edited without its corpus here, one
    # line; with the prepared corpus here, the workflow's to remake
    os.makedirs(p.run_dir(next(iter(p.runs))))  # the run folder back: the training tables are remade, not read
    assert table_sums_error(p) is None
    corpus_table = tables["corpus_wiki_offline"]
    atomic_write_text(corpus_table, "kind,value\ncorpus_wiki_offline,2\n")
    assert table_sums_error(p).startswith(f"{corpus_table}: ")
    os.makedirs(p.corpus_dir("wiki_offline"))
    assert table_sums_error(p) is None
    os.rmdir(p.corpus_dir("wiki_offline"))

    # a record that is not sha256sum lines is one line too, never a check switched off
    atomic_write_text(record, "not a record\n")
    assert record in table_sums_error(p)
    # accepting the change: the record removed, nothing to compare (the next run records the tables as they are)
    os.remove(record)
    assert table_sums_error(p) is None


def test_every_committed_table_folder_has_its_recorded_sha256():
    """The studies' committed tables (each study's tables/, and each part of a study run in parts) have a
    tables.sha256 record that lists every table in the folder and matches it byte for byte (hashlib here)."""
    folders = sorted(REPO.glob("results/study*/tables")) + sorted(REPO.glob("results/study*/parts/*/"))
    folders = [f for f in folders if f.is_dir() and any(f.glob("*.csv"))]
    assert len(folders) >= 4, folders  # study 1, study 2, study 2's part 1, study 3's part 1
    for folder in folders:
        record = folder.parent / "config" / "tables.sha256" if folder.name == "tables" else folder / "tables.sha256"
        assert record.is_file(), f"{folder}: no {record.name} (docs/workflow.md, 'Committed tables')"
        lines = [line.split("  ", 1) for line in record.read_text().splitlines()]
        listed = {name: digest for digest, name in lines}
        for name, digest in listed.items():
            assert hashlib.sha256((REPO / name).read_bytes()).hexdigest() == digest, f"{name}: differs from {record}"
        present = {str(f.relative_to(REPO)) for f in folder.glob("*.csv")}
        if folder.name != "tables":  # a part's tables are all tidy tables
            assert present == set(listed), record
        else:  # a study's: the tidy tables beside what is drawn from them (claims.csv, Table 1, ...)
            tidy = {"pretrained_scores", "training_scores", "training_loss", "update_scores", "null_scores"}
            tidy |= {"gqa_paper_method", "run_provenance"}
            recorded = {f for f in present if Path(f).stem in tidy or Path(f).stem.startswith("corpus_")}
            assert recorded == set(listed), record  # the corpus record too (issue 59, LOW)


def test_forceall_with_a_rule_filter_does_not_skip_the_table_checks():
    """Issue 59.1: --forceall remakes every table only where no rule filter keeps its jobs from running; with
    --allowed-rules (or --omit-from, --until, --batch) the parse still checks the committed tables."""
    assert run_mode(["--forceall", "--cores", "2"]).remakes_tables
    assert run_mode(["-F"]).remakes_tables
    for extra in (
        ["--allowed-rules", "make_reproduction_report"],
        ["--omit-from", "concat_training_scores"],
        ["--until", "make_fig3_emergence"],
        ["--batch", "all=1/2"],
    ):
        mode = run_mode(["--forceall", "--cores", "2", *extra])
        assert mode.forceall and not mode.remakes_tables, extra
    assert not run_mode(["--cores", "2"]).remakes_tables


def _table_job_log(record, table, digest):
    """What a table job's log ends with (concat-tables, score-null): its `sha256sum` line, written here by hand."""
    log = os.path.join(
        os.path.dirname(os.path.dirname(record)), "logs", "tables", os.path.basename(table)[:-4] + ".log"
    )
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as fh:
        fh.write(f"wrote {table}: 1 rows from 1 tables\n{digest}  {table}\n")
    return log


def test_table_edits_are_the_changed_tables_their_own_job_did_not_write(tmp_path):
    """Issue 59.1-2: a job that draws from the committed tables, and the job that records their sums, accept a
    table whose sha256 differs from the record only where the table's own job wrote that content (its log ends with
    the table's sha256sum line); a hand edit is refused whatever the command line."""
    from attention_geometry.workflow.records import table_edit_error, table_edits

    results = tmp_path / "r"
    table = str(results / "tables" / "training_scores.csv")
    other = str(results / "tables" / "training_loss.csv")
    for path, text in ((table, "a,b\n1,2\n"), (other, "a,b\n3,4\n")):
        atomic_write_text(path, text)
    record = str(results / "config" / "tables.sha256")
    atomic_write_text(record, _sha256sum_lines([table, other]))
    assert table_edits(record, [table, other]) == []
    atomic_write_text(table, "a,b\n1,-0.6\n")  # the hand edit
    assert table_edits(record, [table, other]) == [table]
    msg = table_edit_error(record, [table, other], "the report does not draw from it")
    assert msg.startswith(f"{table}: ") and "\n" not in msg and f"rm {record}" in msg
    new = hashlib.sha256(open(table, "rb").read()).hexdigest()
    _table_job_log(record, table, "0" * 64)  # the job wrote another content: still an edit
    assert table_edits(record, [table]) == [table]
    _table_job_log(record, table, new)  # the job wrote exactly this content: remade, not edited
    assert table_edits(record, [table]) == []
    assert table_edits(str(tmp_path / "none.sha256"), [table]) == []  # no record: nothing to compare


def test_input_sums_tables_refuses_to_record_a_hand_edit(tmp_path, capsys):
    """Issue 59.2: rule record_table_sums (input-sums --tables) does not write an edited table's sha256 over the
    committed record, whatever rule filter ran it; a table remade by its job is recorded; the record removed (the
    documented way to accept a change) records the tables as they are."""
    from attention_geometry.cli import main as cli_main

    results = tmp_path / "r"
    table = str(results / "tables" / "training_scores.csv")
    atomic_write_text(table, "a,b\n1,2\n")
    record = str(results / "config" / "tables.sha256")
    atomic_write_text(record, _sha256sum_lines([table]))
    before = open(record).read()
    atomic_write_text(table, "a,b\n1,-0.6\n")
    assert cli_main(["input-sums", "--tables", table, "--out", record]) == 2
    assert "no job of this workflow wrote it" in capsys.readouterr().err
    assert open(record).read() == before
    _table_job_log(record, table, hashlib.sha256(open(table, "rb").read()).hexdigest())
    assert cli_main(["input-sums", "--tables", table, "--out", record]) == 0
    assert open(record).read() == _sha256sum_lines([table])
    os.remove(_table_job_log(record, table, "0" * 64))
    os.remove(record)
    assert cli_main(["input-sums", "--tables", table, "--out", record]) == 0


def test_run_notebook_checks_the_tables_it_draws_from_before_the_kernel_starts(tmp_path, capsys):
    """Issue 59.1: run-notebook --tables-record refuses an input table the record lists with another sha256 that its
    job did not write, before any kernel starts (the notebook file here is never executed)."""
    import json

    from attention_geometry.cli import main as cli_main

    results = tmp_path / "r"
    table = str(results / "tables" / "training_scores.csv")
    atomic_write_text(table, "a,b\n1,2\n")
    record = str(results / "config" / "tables.sha256")
    atomic_write_text(record, _sha256sum_lines([table]))
    atomic_write_text(table, "a,b\n1,-0.6\n")
    nb = tmp_path / "n.ipynb"
    nb.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    argv = ["run-notebook", str(nb), str(tmp_path / "x.ipynb"), "--parameters", json.dumps({"inputs": {"t": table}})]
    assert cli_main([*argv, "--tables-record", record]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {table}: its sha256 is not the one recorded") and "does not draw from it" in err
    assert not (tmp_path / "x.ipynb").exists()
