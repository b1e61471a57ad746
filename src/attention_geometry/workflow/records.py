"""The config that made each committed result, recorded beside the results: never draw a table made with
another config (docs/workflow.md, "Committed results and config changes").

A committed result is a tidy table, the corpus record, a Figure 1 matrix or a notebook's outputs. Each has a
*config record*, `{results}/config/KEY.yaml`: the YAML of the parts of the config that feed it, and only
those (`records`), so that editing a notebook's constant does not touch the training tables' records:

    pretrained_scores, pretrained_models   config `pretrained`
    training_scores, training_loss         every run's RUN.yaml settings and its corpus config
    update_scores                          the update runs' settings and corpora, config `updates`
    null_scores                            the null's source run and corpus, figures.null_samples
    symmetry_speedup                       the ablation runs, figures.baseline_init / ci_level / bootstrap_*
    corpus_CORPUS                          the corpus config of the corpus the report cites
    wqk_run_RUN, wqk_pretrained_MODEL      Figure 1's run settings and corpus / pretrained entry
    gqa_paper_method                       the pretrained entries of figures.gqa_models
    make_NOTEBOOK                          the notebook's papermill parameters (not the code version nor the
                                           whole-config hash, which are provenance; the config file's name is
                                           kept but not compared: configs are compared by content)

Rule record_config writes a record from the config alone. At parse time, `stale_error`
compares every record with the current config: where results exist and their record differs, the workflow
stops with one line naming them and the `rm` that makes the next run remake them (a fresh clone has no run
folders, so Snakemake would otherwise draw the committed tables as they are). A missing record is written by
the next run (a results folder from before records existed is taken as made with the current config).

The small jobs that write such records are its subcommands: `input-sums` (rule tabulate_symmetry_speedup's
record of the tables it read) and `record-corpus` (rule record_corpus: formats.corpus.write_corpus_record).

Torch-free: rules/common.smk calls it at parse time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats.rundir import is_complete_snapshot
from attention_geometry.workflow.plan import yaml_text

if TYPE_CHECKING:
    from attention_geometry.workflow.plan import Plan

__all__ = [
    "RECORD_DIR",
    "records",
    "record_path",
    "record_text",
    "same_record",
    "stale_error",
    "input_sums_path",
    "write_input_sums",
    "read_input_sums",
    "drawn_entries",
    "content_entries",
    "TABLE_SUMS",
    "tidy_tables",
    "table_sums_path",
    "table_log",
    "made_by_its_job",
    "table_edits",
    "table_edit_error",
    "table_sources",
    "table_sums_error",
    "content_current",
    "drop_unfinished_markers",
    "RunMode",
    "NO_JOB_OPTIONS",
    "run_mode",
    "run_input_sums",
    "run_record_corpus",
]

RECORD_DIR = "config"
# notebook parameters that are provenance, not inputs of the science (they change with every commit or with
# any config key, e.g. a new schema default)
_PROVENANCE_PARAMS = ("code_version", "config_hash")
# notebook parameters derived from config parts other records hold (the runs' settings: the training tables'
# records), which check the inputs without changing what is computed from them
_DERIVED_PARAMS = ("expected_tables", "design_claims")


def _run_parts(plan: Plan, run: str) -> dict:
    """What trains a run: its RUN.yaml settings and its corpus (or image set) config (not the machine: device,
    threads)."""
    r = plan.runs[run]
    data = plan.images if plan.is_image_run(run) else plan.corpora
    return {"corpus": data[r.dataset], **r.run_config()}


def records(plan: Plan) -> dict[str, tuple[list[str], dict]]:
    """KEY -> (the committed result files it describes, the config parts that feed them), for this plan."""
    cfg, f = plan.config, plan.config["figures"]
    runs = {r: _run_parts(plan, r) for r in plan.runs}
    table = plan.res("tables", "{}").format
    out: dict[str, tuple[list[str], dict]] = {
        "pretrained_scores": ([table("pretrained_scores.csv")], {"pretrained": cfg["pretrained"]}),
        "pretrained_models": ([table("pretrained_models.csv")], {"pretrained": cfg["pretrained"]}),
        "training_scores": ([table("training_scores.csv")], {"runs": runs}),
        "training_loss": ([table("training_loss.csv")], {"runs": runs}),
        "update_scores": (
            [table("update_scores.csv")],
            {"runs": {r: runs[r] for r in plan.update_runs}, "updates": cfg["updates"]},
        ),
        "null_scores": (
            [table("null_scores.csv")],
            {"run": runs[plan.null_source_run()], "null_samples": f.get("null_samples")},
        ),
        "symmetry_speedup": (
            [table("symmetry_speedup_runs.csv"), table("symmetry_speedup_correlations.csv")],
            {
                "ablation_runs": plan.ablation_runs(),
                **{k: f[k] for k in ("baseline_init", "ci_level", "bootstrap_resamples", "bootstrap_seed")},
            },
        ),
    }
    if gqa := plan.gqa_models():
        out["gqa_paper_method"] = ([plan.gqa_table()], {"pretrained": {k: cfg["pretrained"][k] for k in gqa}})
    corpus = report_corpus(plan)
    out[f"corpus_{corpus}"] = ([plan.corpus_record(corpus)], {"corpus": plan.corpora[corpus]})
    for role in ("encoder", "decoder"):
        run, model = plan.emergence_runs()[role][0], plan.fig1_model(role)
        out[f"wqk_run_{run}"] = ([plan.run_wqk(run)], {"run": runs[run]})
        out[f"wqk_pretrained_{model}"] = ([plan.pretrained_wqk(model)], {"pretrained": cfg["pretrained"][model]})
    for nb in plan.notebooks:
        parameters, _, outputs = plan.notebook_io(nb)
        params = {k: v for k, v in parameters["params"].items() if k not in _PROVENANCE_PARAMS + _DERIVED_PARAMS}
        out[f"make_{nb}"] = (list(outputs.values()), {"notebook": {**parameters, "params": params}})
    return out


def record_path(plan: Plan, key: str) -> str:
    return plan.res(RECORD_DIR, f"{key}.yaml")


def record_text(parts: dict) -> str:
    """The record's YAML (a JSON round trip first: no YAML anchors where runs share a corpus config)."""
    return yaml_text(json.loads(json.dumps(parts)))


# notebook parameters a record keeps but does not compare: the name of the config file, which the report cites. A
# byte-identical copy of the config under another name (`--configfile /tmp/c.yaml`) is the same config: configs
# are compared by content (issue 41.10)
_NAME_PARAMS = ("config_name",)


def _content(text: str):
    """A record's YAML as data, without _NAME_PARAMS."""
    import yaml

    data = yaml.safe_load(text)
    params = data.get("notebook", {}).get("params") if isinstance(data, dict) else None
    if isinstance(params, dict):
        for name in _NAME_PARAMS:
            params.pop(name, None)
    return data


def same_record(text: str, parts: dict) -> bool:
    """Whether a record's text (a file written by rule record_config) says the same config as `parts`: the same
    text, or the same data but for the config file's name (_NAME_PARAMS)."""
    import yaml

    expected = record_text(parts)
    if text == expected:
        return True
    try:
        return _content(text) == _content(expected)
    except yaml.YAMLError:  # a record that is not YAML is another config's, not a traceback
        return False


STALE_LIST = "stale-results.txt"  # {results}/logs/: the files stale_error asks to remove, one per line


def stale_files(plan: Plan, table: dict[str, tuple[list[str], dict]] | None = None) -> tuple[list[str], list[str]]:
    """(the committed results whose record differs from the current config, those results and their records):
    what remaking them from this config removes. Results without a record are not stale (the next run records
    them)."""
    stale, remove = [], []
    for key, (results, parts) in (table if table is not None else records(plan)).items():
        present = [p for p in results if os.path.isfile(p)]
        path = record_path(plan, key)
        if not present or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            if same_record(fh.read(), parts):
                continue
        stale += present
        remove += [*present, path]
    return stale, remove


def stale_error(
    plan: Plan, table: dict[str, tuple[list[str], dict]] | None = None, forceall: bool = False
) -> str | None:
    """One short line when committed results were made with another config than the current one: their count, their
    folder, this config, and how to go on deliberately: the config that made them, a fresh results folder for this
    one, or one command that removes them (and their records) from a list written to
    {results}/logs/stale-results.txt; None when every existing result's record matches (or is missing).
    `forceall`: the command line asks for --forceall, which does not pass this check (issue 41.4: with a mistyped
    results folder it would rewrite another study's whole record), and the line says so."""
    from attention_geometry.formats.files import atomic_write_text

    stale, remove = stale_files(plan, table)
    if not stale:
        return None
    listing = plan.res("logs", STALE_LIST)
    os.makedirs(os.path.dirname(listing), exist_ok=True)
    atomic_write_text(listing, "".join(f"{p}\n" for p in remove))
    here = plan.notebook_param("config_name", "reproduction_report")
    forced = " (--forceall would rewrite them: it does not pass this)" if forceall else ""
    return (
        f"config: {len(stale)} result(s) in {plan.res()} were made with another config than {here}{forced}: run "
        "with that config (--configfile), give this one a fresh folder (--config results=NEW), or remake them: "
        f"`xargs rm -f -- < {listing}` (the {len(remove)} files listed there: results and records), then the workflow"
    )


# ------------------------------------------------------------------ what made a notebook's outputs, by content
def input_sums_path(plan: Plan, notebook: str) -> str:
    """{results}/config/make_NOTEBOOK.inputs.sha256: the sha256 of the notebook and of each input its last
    successful run read (`sha256sum` lines), written by run-notebook and committed with the outputs."""
    return plan.res(RECORD_DIR, f"make_{notebook}.inputs.sha256")


def _sums(files) -> dict[str, str]:
    from attention_geometry.formats.files import file_sha256

    return {os.path.normpath(f): file_sha256(f) for f in files}


def write_input_sums(path: str, files) -> None:
    """`sha256sum`-format lines (`HEX  PATH`, sorted by path) of `files`, written atomically."""
    from attention_geometry.formats.files import atomic_write_text

    sums = _sums(files)
    atomic_write_text(path, "".join(f"{h}  {f}\n" for f, h in sorted(sums.items())))


def read_input_sums(path: str) -> dict[str, str]:
    """path -> sha256 of a file written by write_input_sums; {} when it is missing or not in that format."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            return {}
        out[os.path.normpath(name)] = digest
    return out


# ------------------------------------------------------------------------ the committed tables, by content
TABLE_SUMS = "tables.sha256"  # {results}/config/: the sha256 of each committed tidy table (rule record_table_sums)
# tidy table kind -> its file under {results}/tables (the data the figures and claims are drawn from)
_TIDY_TABLES = ("pretrained_scores", "training_scores", "training_loss", "update_scores", "null_scores")


def report_corpus(plan: Plan) -> str:
    """The corpus whose record (rule record_corpus: {results}/tables/corpus_{corpus}.csv) the report cites: the
    first emergence encoder's."""
    return plan.runs[plan.emergence_runs()["encoder"][0]].dataset


def tidy_tables(plan: Plan) -> dict[str, str]:
    """Table kind -> file of the committed tables this config makes from what is not committed (rules/score.smk,
    rule record_corpus): the scores, losses, updates and null, the grouped-query table with figures.gqa_models, the
    run provenance with training.provenance_table, and the record of the report's corpus (kind corpus_{corpus}).
    Every one is listed in {results}/config/tables.sha256 (issue 59: a table outside it could be edited and drawn)."""
    out = {kind: plan.res("tables", f"{kind}.csv") for kind in _TIDY_TABLES}
    if plan.gqa_models():
        out["gqa_paper_method"] = plan.gqa_table()
    if plan.provenance_table:
        out["run_provenance"] = plan.res("tables", "run_provenance.csv")
    corpus = report_corpus(plan)
    out[f"corpus_{corpus}"] = plan.corpus_record(corpus)
    return out


def table_sums_path(plan: Plan) -> str:
    """{results}/config/tables.sha256: `sha256sum` lines of the tidy tables (write_input_sums' format), written by
    rule record_table_sums whenever a table is made and committed with them."""
    return plan.res(RECORD_DIR, TABLE_SUMS)


def table_log(record: str, table: str) -> str:
    """The log of the job that makes tidy table `table` ({results}/tables/KIND.csv): {results}/logs/tables/KIND.log,
    {results} read off the record's own path ({results}/config/tables.sha256). Each table rule ends its log with the
    `sha256sum` line of the table it wrote (rules/score.smk)."""
    results = os.path.dirname(os.path.dirname(os.path.abspath(record)))
    kind = os.path.splitext(os.path.basename(table))[0]
    return os.path.join(results, "logs", "tables", f"{kind}.log")


def made_by_its_job(record: str, table: str, digest: str) -> bool:
    """Whether the table's own job wrote the content of sha256 `digest`: its log (table_log) ends a line with
    `digest  ...{table's name}` (the job's `sha256sum` of its output). A hand edit after the job, or a table no job
    of this checkout made (a clone's logs are not committed), is not."""
    try:
        with open(table_log(record, table), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    name = os.path.basename(table)
    for line in reversed(lines):
        got, sep, path = line.partition("  ")
        if sep and len(got) == 64 and os.path.basename(path.strip()) == name:
            return got == digest
    return False


def table_edits(record: str, tables) -> list[str]:
    """The tables among `tables` that the record ({results}/config/tables.sha256) lists with another sha256 and that
    their own job did not write (made_by_its_job): edited by hand, or from elsewhere. [] without a record."""
    from attention_geometry.formats.files import file_sha256

    recorded = read_input_sums(record) if os.path.isfile(record) else {}
    out = []
    for table in tables:
        want = recorded.get(os.path.normpath(table))
        if want is None or not os.path.isfile(table):
            continue
        got = file_sha256(table)
        if got != want and not made_by_its_job(record, table, got):
            out.append(table)
    return out


def table_edit_error(record: str, tables, what: str) -> str | None:
    """One line naming the first of table_edits, or None: `what` says who refuses (the report, the record)."""
    edits = table_edits(record, tables)
    if not edits:
        return None
    others = f" ({len(edits) - 1} other table(s) too)" if len(edits) > 1 else ""
    return (
        f"{edits[0]}: its sha256 is not the one recorded in {record}{others}, and no job of this workflow wrote it "
        f"(its log {table_log(record, edits[0])} does not end with its sha256): {what}. Restore it (git checkout -- "
        f"{edits[0]}), remake it from its runs, or, to accept an intended change, rm {record} (the next run records "
        "the tables as they are)"
    )


def table_sources(plan: Plan) -> dict[str, list[str]]:
    """Table kind -> what the workflow remakes that tidy table from (rules/score.smk): the run folders, the null
    source run's prepared corpus, the per-model score files. None of it is committed."""
    runs = [plan.run_dir(r) for r in plan.runs]
    known = {
        "training_scores": runs,
        "training_loss": runs,
        "run_provenance": runs,
        "update_scores": [plan.run_dir(r) for r in plan.update_runs],
        "null_scores": [plan.run_corpus(plan.null_source_run())],
        "pretrained_scores": [plan.res("pretrained", f"{m}.csv") for m in plan.pretrained],
        "gqa_paper_method": [plan.res("gqa", f"{m}.csv") for m in plan.gqa_models()],
        f"corpus_{report_corpus(plan)}": [plan.corpus_dir(report_corpus(plan))],
    }
    return {kind: known[kind] for kind in tidy_tables(plan)}


def table_sums_error(plan: Plan) -> str | None:
    """One line when a committed tidy table no longer has the sha256 its record ({results}/config/tables.sha256)
    names and what it is made from is not all here to remake it (a clone has no run folders: its tables are the
    record, and a hand edit would be drawn into the claims without a word); the line says how to restore it and how to
    accept an intended change (remove the record: the next run records the tables as they are). None when every
    listed table that exists is as recorded or can be remade here, or when there is no record. A record that is not
    `sha256sum` lines is one line too."""
    from attention_geometry.formats.files import file_sha256

    path = table_sums_path(plan)
    if not os.path.isfile(path):
        return None
    recorded = read_input_sums(path)
    if not recorded and os.path.getsize(path):
        return (
            f"{path}: not `sha256sum` lines (the record of the committed tables): restore it (git checkout -- {path}), "
            "or remove it (the next run records the tables as they are)"
        )
    sources = {os.path.normpath(f): table_sources(plan)[kind] for kind, f in tidy_tables(plan).items()}
    changed = []
    for table, digest in sorted(recorded.items()):
        if not os.path.isfile(table) or (table in sources and all(map(os.path.exists, sources[table]))):
            continue  # missing: the workflow makes it; its sources all here: the workflow's to remake
        if file_sha256(table) != digest:
            changed.append(table)
    if not changed:
        return None
    first = changed[0]
    made_from = next((s for s in sources.get(first, []) if not os.path.exists(s)), "its sources")
    others = f" ({len(changed) - 1} other table(s) too)" if len(changed) > 1 else ""
    return (
        f"{first}: its sha256 is not the one recorded in {path}{others}, and what it is made from is not here to "
        f"remake it ({made_from}): restore it (git checkout -- {first}), or, to accept an intended change, "
        f"rm {path} (the next run records the tables as they are)"
    )


def drawn_entries(plan: Plan) -> list[tuple[list[str], list[str]]]:
    """(outputs with the input-sums record last, inputs) of every rule that draws from committed files: each
    notebook rule (its notebook and inputs) and tabulate_symmetry_speedup (the two tidy tables it reads). Their
    outputs are the ones workflow.keep keeps aside."""
    from attention_geometry.workflow.plan import notebook_file

    out = []
    for nb in plan.notebooks:
        parameters, _, outputs = plan.notebook_io(nb)
        out.append(
            (
                [*outputs.values(), input_sums_path(plan, nb)],
                [notebook_file(plan.catalog, nb), *parameters["inputs"].values()],
            )
        )
    results, _ = records(plan)["symmetry_speedup"]
    tables = [plan.res("tables", "training_scores.csv"), plan.res("tables", "training_loss.csv")]
    out.append(([*results, plan.res(RECORD_DIR, "symmetry_speedup.inputs.sha256")], tables))
    return out


def content_entries(plan: Plan) -> list[tuple[list[str], list[str]]]:
    """(outputs with the input-sums record last, inputs) of every rule whose inputs are all committed files: the
    drawing rules (drawn_entries) and rule record_table_sums (the tables' record, made from the tables alone)."""
    return [*drawn_entries(plan), ([table_sums_path(plan)], list(tidy_tables(plan).values()))]


def content_current(plan: Plan) -> list[str]:
    """The outputs of notebook rules that are current by content although an input is newer by mtime, touched
    so that Snakemake's mtime rule agrees (returned). A fresh clone checks files out in an arbitrary order, so
    a committed figure can be older than the committed table it was drawn from; Snakemake would redraw it, and
    a redraw on another host changes bytes (and the report's commit line) although nothing it reads changed.
    An entry counts as current when its outputs and its input-sums record exist and the notebook and every
    input have exactly the recorded sha256; anything else (an edited notebook or table, a missing record) is
    left to Snakemake. Files are hashed only when some input is newer than an output. An output that cannot be
    touched (a read-only results folder) is a ConfigError naming it."""
    import time

    now = time.time_ns()  # one time for every touch: an output touched now is never newer than another
    entries = [(made, inputs) for made, inputs in content_entries(plan) if all(map(os.path.isfile, made + inputs))]
    touched: list[str] = []
    changed = True
    while changed:  # again after a touch: a touched output may be another entry's input
        changed = False
        for made, inputs in entries:
            if made[0] in touched:
                continue
            oldest = min(os.stat(f).st_mtime_ns for f in made)
            if all(os.stat(f).st_mtime_ns <= oldest for f in inputs):
                continue  # nothing looks stale
            recorded = read_input_sums(made[-1])
            if set(recorded) != {os.path.normpath(f) for f in inputs} or _sums(inputs) != recorded:
                continue
            for f in made:
                try:
                    os.utime(f, ns=(now, now))
                except OSError as exc:  # a read-only results folder: say which file, not only the errno
                    raise ConfigError(
                        f"{f}: cannot mark it up to date ({exc.strerror or exc}); the results folder must be "
                        "writable (a workflow writes its results there)"
                    ) from None
            touched += made
            changed = True
    return touched


def drop_unfinished_markers(plan: Plan, dry_run: bool = False) -> list[str]:
    """Remove the `train.done` of every run whose final snapshot is not complete (rundir.is_complete_snapshot),
    and return those markers. The marker is the train rule's only declared output, so a final snapshot deleted
    after the run finished would leave Snakemake with nothing to do while the scoring of that run fails; without
    the marker the train job runs again, and the trainer rewrites the snapshot from the run's final state (or
    says why it cannot). A marker that cannot be removed is one ConfigError line. dry_run: only return them (a
    dry run changes nothing on disk)."""
    removed = []
    for run in plan.runs:
        marker = plan.train_done(run)
        if not os.path.isfile(marker) or is_complete_snapshot(plan.final_snapshot(run)):
            continue
        if dry_run:
            removed.append(marker)
            continue
        try:
            os.remove(marker)
        except OSError as exc:
            raise ConfigError(
                f"{marker}: run {run} has no complete final snapshot {plan.final_snapshot(run)}, but its marker "
                f"cannot be removed ({exc.strerror or exc}): remove it, and run the workflow again"
            ) from None
        removed.append(marker)
    return removed


# Snakemake's options (argparse dests) under which it parses the workflow and runs no job: it lints, lists, draws,
# reports, touches, unlocks, cleans or deletes (tests/test_config_records.py checks each is a dest of its parser)
NO_JOB_OPTIONS = (
    "lint", "list_rules", "list_target_rules", "list_changes", "list_input_changes", "list_params_changes",
    "list_untracked", "list_conda_envs", "dag", "d3dag", "rulegraph", "filegraph", "summary", "detailed_summary",
    "report", "touch", "unlock", "cleanup_metadata", "cleanup_shadow", "delete_all_output", "delete_temp_output",
    "archive", "containerize", "print_compilation", "export_cwl", "generate_unit_tests",
)  # fmt: skip


class RunMode(NamedTuple):
    """What a Snakemake command line asks that the parse-time checks depend on."""

    forceall: bool  # --forceall / -F: every table is remade (not read as it is); stale results still stop the parse
    dry_run: bool  # -n / --dry-run / --dryrun: the checks print their line and the parse goes on
    runs_jobs: bool = True  # neither a dry run nor one of NO_JOB_OPTIONS (--lint, --list-rules, --report, ...)
    # --forceall with no rule filter (RULE_FILTER_OPTIONS): every table is remade, so the parse need not read the
    # committed ones; a filter (--allowed-rules, --omit-from, --until, --batch) can keep them from being remade
    remakes_tables: bool = False


# the options that keep some of --forceall's jobs from running (Snakemake's argument names)
RULE_FILTER_OPTIONS = ("allowed_rules", "omit_from", "until", "batch")


def run_mode(argv: Sequence[str]) -> RunMode:
    """The RunMode of Snakemake's arguments `argv` (sys.argv[1:]), read by Snakemake's own argument parser (long
    options, abbreviations and bundled short flags as Snakemake reads them: `-nF`, `-pn`; `-sSnakefile` and
    `-Coffline=False` are a Snakefile and a config value, not the letters n and F). Snakemake has not read its DAG
    settings yet when it parses the workflow (rules/common.smk), hence its command line. A command line its parser
    refuses is neither (Snakemake stops on it itself)."""
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(list(argv))
    except SystemExit:
        return RunMode(forceall=False, dry_run=False)
    dry_run = bool(getattr(args, "dryrun", False))
    no_jobs = dry_run or any(getattr(args, name, None) for name in NO_JOB_OPTIONS)
    forceall = bool(getattr(args, "forceall", False))
    filtered = any(getattr(args, name, None) for name in RULE_FILTER_OPTIONS)
    return RunMode(forceall=forceall, dry_run=dry_run, runs_jobs=not no_jobs, remakes_tables=forceall and not filtered)


# ------------------------------------------------------------------------------------------------ the CLI
def _check_input_files(files) -> None:
    for f in files:
        if not os.path.isfile(f):
            what = "a folder" if os.path.isdir(f) else "missing" if not os.path.lexists(f) else "not a file"
            raise UserError(f"{f}: is {what}; input-sums records the sha256 of files")


def run_input_sums(args) -> int:
    """CLI `input-sums FILE... --out SUMS`: write_input_sums of the files (what a rule read), checked first: every
    one a file, SUMS none of them. With --tables (rule record_table_sums), SUMS is the record of the committed tidy
    tables: a table whose sha256 differs from the one SUMS records is recorded only where its own job wrote it
    (table_edits); a hand edit is refused with one line, whatever rule filter ran this job."""
    from attention_geometry.formats.files import check_out_location, check_writable

    _check_input_files(args.files)
    check_writable(args.out)
    check_out_location(args.out, args.files)
    if getattr(args, "tables", False):
        error = table_edit_error(args.out, args.files, "its sha256 is not recorded over the committed one")
        if error:
            raise UserError(error)
    write_input_sums(args.out, args.files)
    print(f"{args.out}: the sha256 of {len(set(map(os.path.normpath, args.files)))} file(s)")
    return 0


def run_record_corpus(args) -> int:
    """CLI `record-corpus CORPUS_DIR --corpus KEY --out FILE.csv`: the committed record of a prepared corpus
    (formats.corpus.write_corpus_record: its manifest's sha256 and counts, no machine path)."""
    from attention_geometry.formats.corpus import write_corpus_record
    from attention_geometry.formats.files import check_out_location, check_writable, sha256_line

    check_writable(args.out)
    check_out_location(args.out, [args.corpus_dir])
    write_corpus_record(args.corpus_dir, args.corpus, args.out)
    print(f"{args.out}: the record of corpus {args.corpus} ({args.corpus_dir})")
    print(sha256_line(args.out))  # last: the proof that this job wrote the table (made_by_its_job)
    return 0
