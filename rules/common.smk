# Lookups shared by the rule files, and the wildcard constraints; no rules. Everything is derived from the
# validated config once, at parse time, by attention_geometry.workflow.plan (run expansion and names, snapshot
# steps, group selection, pretrained sources, notebook I/O; unit-tested without Snakemake). What else this file
# does at parse time: it sets the jobs' environment (the offline hub, the shell prefix) and, in the submitting
# process, checks the committed results. Results made with another config (workflow.records.stale_error) and
# damaged tidy tables (analysis.completeness.table_error) stop the parse with one line (a dry run prints it and
# goes on; --forceall skips only the second: workflow.records.run_mode reads the command line), and committed results that
# are current by content get their mtime touched, so that Snakemake does not redraw them
# (workflow.records.content_current).
import json
import os
import shlex
import sys


from attention_geometry.errors import ConfigError
from attention_geometry.workflow.records import (
    content_current,
    input_sums_path,
    record_path,
    record_text,
    records,
    run_mode,
    stale_error,
    table_sums_error,
    table_sums_path,
    tidy_tables,
)
from attention_geometry.workflow.jobs import ONLINE_ENV, rule_python_error, shell_prefix, stop
from attention_geometry.workflow.plan import alternation, notebook_file, plan, yaml_text
from attention_geometry.workflow.pretrained import scoring_mem_mb
from attention_geometry.workflow.provenance import quiet_missing_metadata

# `snakemake --report` in a clone: one line instead of a "Missing metadata" warning per committed result
if workflow.is_main_process:
    quiet_missing_metadata()

# Every shell command runs the checkout's package (src/ on PYTHONPATH) with the `python` of its environment,
# the venv or, under --sdm conda, the env of the rule's envs/*.yaml (workflow.shell_prefix).
shell.prefix(shell_prefix(workflow.basedir))
# ... so outside --sdm conda that `python` (the first on PATH) must have the package's dependencies: one line at
# parse time instead of a traceback from the first job (`.venv/bin/snakemake` run without the venv activated;
# workflow.jobs.rule_python_error). Only a command that runs jobs stops; a dry run, --lint, a listing or a report
# prints the line and goes on (workflow.records.run_mode). Only the submitting process asks.
_MODE = run_mode(sys.argv[1:])
if workflow.is_main_process and not workflow.deployment_settings.deployment_method:
    if (_python := rule_python_error()) is not None:
        if _MODE.runs_jobs:
            stop(_python)
        print(f"{_python} (no job runs now, so this goes on; a run stops here until then)", file=sys.stderr)


def checked(lookup, *args):
    """lookup(*args), a cross-key config error (errors.ConfigError) as one line (workflow.jobs.stop)."""
    try:
        return lookup(*args)
    except ConfigError as exc:
        stop(str(exc))


# The one read of `config` in the rules: everything else they use is looked up in the plan built from it here.
PLAN = checked(plan, config, workflow.basedir, workflow.configfiles)

if PLAN.jobs.offline:
    # Nothing waits on the Hugging Face hub: every job inherits these (local and SLURM jobs alike, since
    # each job re-parses this file).
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")

RESULTS = PLAN.results
CORPORA = PLAN.corpora  # corpus key -> corpus config
IMAGES = PLAN.images  # image set key -> prepare-images config
RUNS = PLAN.runs  # run name -> workflow.Run
GROUPS = PLAN.groups  # group name -> run names
UPDATE_RUNS = PLAN.update_runs
PRETRAINED = PLAN.pretrained  # model key -> workflow.Pretrained
CATALOG = PLAN.catalog  # notebooks/catalog.yaml
NOTEBOOKS = PLAN.notebooks  # the catalog entries made with this config
JOBS = PLAN.jobs  # how the jobs run: resources, SLURM, the trainer's launch and device (workflow.jobs)
TRAIN_SLURM = JOBS.training.slurm  # e.g. a GPU partition for training only
PREFETCH_SLURM = JOBS.prefetch_slurm  # large prefetches: a partition with the network
TRAIN_LAUNCH = JOBS.training.launch  # torchrun / srun for several GPUs or nodes
# Committed result -> (its files, the config parts that made them). A record is the config's own sections as given
# (workflow.records reads them from PLAN.config), not a value derived from them, so it stays out of the plan's typed
# attributes: a typed copy would have to round-trip every key back into the same YAML, and a record must change
# exactly when its part of the config does.
RECORDS = checked(records, PLAN)

res = PLAN.res
corpus_dir = PLAN.corpus_dir
run_corpus = PLAN.run_corpus
train_done = PLAN.train_done
final_snapshot = PLAN.final_snapshot
null_source_run = PLAN.null_source_run


# Small files (configs, the model list) are rendered at parse time and written by a shell
# command: a `run:` job would start a whole Snakemake process per file (~10 s of CPU each).
WRITE_TEXT = "printf '%s' {params.text:q} > {output:q} 2> {log:q}"


def shlex_quote(text):
    return shlex.quote(str(text))


def report_category(path):
    return "Figures" if path.endswith((".pdf", ".png")) else "Tables"


def table_caption(name):
    """The committed report caption of a tidy table (report/tables/NAME.rst): `snakemake --report` lists the
    tables the figures are drawn from beside the figures."""
    return os.path.abspath(os.path.join(workflow.basedir, "report", "tables", f"{name}.rst"))


def caption_file(notebook):
    """The committed report caption of a catalog entry (report/captions/, made by report/make_captions.py)."""
    return os.path.abspath(os.path.join(workflow.basedir, "report", "captions", f"{notebook}.rst"))


# the tidy tables (kind -> file): scores, losses, updates, the null, and the grouped-query and provenance tables where
# the config makes them (workflow.records.tidy_tables); their sha256 are recorded in {results}/config/tables.sha256
TABLES = checked(tidy_tables, PLAN)


# Committed results whose config record differs from this config stop the parse with one line (never drawn
# as if current; workflow.records.stale_error says how to go on). --forceall does not pass it: with a mistyped
# results folder (`--config results=results/study1`) it would rewrite another study's whole record (issue 41.4);
# the deliberate ways are a fresh results folder or the `rm` the line names. A dry run (-n) prints the same
# line and goes on, so that a user can look at the plan after editing the config (Snakemake has not read its
# DAG settings yet when it parses this file, hence the command line: workflow.records.run_mode). Only the
# submitting process decides: a cluster job re-parses this file while the results it remakes are still the old ones.
if workflow.is_main_process and (_stale := stale_error(PLAN, RECORDS, forceall=_MODE.forceall)) is not None:
    if not _MODE.dry_run:
        stop(_stale)
    print(f"{_stale} (a dry run goes on; the workflow itself stops here until then)", file=sys.stderr)

# A committed tidy table whose sha256 is not the one {results}/config/tables.sha256 records, where what it is made
# from (run folders, per-model scores) is not here to remake it, stops the parse with one line that says how to
# restore it or accept the change (workflow.records.table_sums_error): a clone's tables are the record, and a hand
# edit would otherwise redraw the claims without a word. A dry run prints it and goes on; under --forceall with no
# rule filter every table is remade, so none is read as it is (workflow.records.RunMode.remakes_tables; with a filter,
# --allowed-rules among them, the check stays: issue 59.1). Each job that draws from the tables checks them again
# itself (run-notebook --tables-record), whatever the command line.
if workflow.is_main_process and not _MODE.remakes_tables and (_edited := checked(table_sums_error, PLAN)) is not None:
    if not _MODE.dry_run:
        stop(_edited)
    print(f"{_edited} (a dry run goes on; the workflow itself stops here until then)", file=sys.stderr)

# The tidy tables the claims read hold exactly the rows this config plans (runs, snapshot and evaluation steps,
# layers, update steps and kinds, the null's samples: attention_geometry.analysis.completeness): a truncated,
# row-dropped or repeated-row table stops the parse with one line naming it, before any job draws a figure or a
# claim from what is left of it (a dry run prints the line and goes on). Under --forceall with no rule filter every
# table is remade, so none is read as it is.
if workflow.is_main_process and not _MODE.remakes_tables:
    from attention_geometry.analysis.completeness import table_error

    _damaged = table_error(
        {k: TABLES[k] for k in ("training_scores", "training_loss", "update_scores", "null_scores")},
        checked(PLAN.expected_tables),
        PLAN.notebook_param("config_name", "reproduction_report"),
    )
    if _damaged is not None and not _MODE.dry_run:
        stop(_damaged)
    if _damaged is not None:
        print(f"{_damaged} (a dry run goes on; the workflow itself stops here until then)", file=sys.stderr)

# Committed figures and tables whose notebook and inputs have exactly the sha256 their last run recorded
# ({results}/config/make_*.inputs.sha256) are current, whatever order a checkout gave their mtimes: they are
# marked so (their mtime set to now) and Snakemake does not redraw them. An edited notebook or table still
# re-runs its figures (workflow.records.content_current).
if workflow.is_main_process and (_current := checked(content_current, PLAN)):
    print(
        f"{len(_current)} committed result file(s) are current by content (notebook and inputs as recorded in "
        f"{PLAN.res('config')}/make_*.inputs.sha256): marked up to date",
        file=sys.stderr,
    )


def all_targets():
    targets = list(TABLES.values()) + [res("tables", "pretrained_models.csv"), table_sums_path(PLAN)]
    targets += checked(PLAN.notebook_targets)
    targets += [record_path(PLAN, key) for key in RECORDS]
    return list(dict.fromkeys(targets))


# trivial writers run on the submitting host, not as cluster jobs
localrules:
    all,
    write_corpus_config,
    write_image_config,
    write_run_config,
    record_corpus,
    list_pretrained_models,
    prefetch_qk,
    record_config,
    record_table_sums,


wildcard_constraints:
    run=alternation(RUNS),
    corpus=alternation(CORPORA),
    images=alternation(IMAGES),
    model=alternation(PRETRAINED),
    notebook=alternation(CATALOG),
    key=alternation(RECORDS),
