"""The workflow: lint, dry runs of every config, the parse-time wiring of config errors, concat-tables, and the
smoke config run end to end once per session (tests/conftest.py: smoke_workflow), with its incremental
behaviour, a hard kill mid-training resumed by the README's command, edited run settings, and DDP through the
rule. The logic behind the rules is unit-tested without Snakemake in tests/test_workflow_logic.py.

Workflow runs happen in a copy of the workflow files under a temporary folder, so they never touch results/
or the repository's .snakemake/ (no lock shared with a user's run)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import (
    BIN,
    REPO,
    SNAKEMAKE,
    assert_has_content,
    config_plan,
    copy_workflow,
    dry_run_shell_commands,
    env,
    job_counts,
    job_files,
    run_names,
    snakemake,
    validated_config,
)

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import TABLE_COLUMNS
from attention_geometry.workflow.concat import concat_tables
from attention_geometry.workflow.jobs import shell_prefix
from attention_geometry.workflow.runs import expand_runs


def _run_name(cfg: dict, objective: str, init: str) -> str:
    """The first run of `cfg` with this objective and init (names come from the config, not from here)."""
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    return next(n for n, r in sorted(runs.items()) if r.objective == objective and r.init == init)


# ------------------------------------------------------------------------------------------ lint, dry runs


@pytest.mark.workflow
def test_lint_is_clean():
    proc = snakemake("--lint")
    assert "Lints for" not in proc.stdout + proc.stderr, proc.stdout
    assert "Congratulations" in proc.stdout + proc.stderr


@pytest.mark.workflow
def test_a_python_without_the_dependencies_stops_the_parse_with_one_line(tmp_path):
    """`.venv/bin/snakemake` run without the venv activated: the rules' `python` (the first on PATH; here the
    interpreter under this venv without site-packages) lacks what the jobs import. A command that runs jobs stops at
    the parse with one line naming it and the fix, where the first job used to fail with a traceback from
    prepare-corpus; a dry run and --lint print the line and go on (no job runs under them). The run asks for the
    corpus config alone, in a copy of the workflow: without the guard it would write that file and exit 0."""
    from helpers import copy_workflow

    wf = copy_workflow(tmp_path / "wf")
    bare = tmp_path / "bin"
    bare.mkdir()
    base = getattr(sys, "_base_executable", sys.executable)
    (bare / "python").write_text(f'#!/bin/sh\nexec "{base}" -S "$@"\n')
    (bare / "python").chmod(0o755)
    env_ = {**env(), "PATH": f"{bare}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(*args):
        return subprocess.run([SNAKEMAKE, *args], cwd=wf, env=env_, capture_output=True, text=True, timeout=600)

    target = (
        yaml.safe_load((REPO / "config" / "config.yaml").read_text())["results"] + "/configs/corpora/wiki_offline.yaml"
    )
    stopped = run("--cores", "1", target)
    lines = [ln for ln in (stopped.stdout + stopped.stderr).splitlines() if ln.startswith("workflow: the rules run")]
    assert stopped.returncode != 0 and len(lines) == 1, stopped.stderr[-3000:]
    assert f"{bare / 'python'}, which lacks torch, " in lines[0] and ". .venv/bin/activate" in lines[0], lines[0]
    assert not (wf / target).exists()
    dry = run("-n", "--cores", "1", target)
    assert dry.returncode == 0 and "no job runs now, so this goes on" in dry.stderr, dry.stderr[-3000:]
    lint = run("--lint")
    assert lint.returncode == 0 and "Congratulations" in lint.stdout + lint.stderr, lint.stderr[-3000:]
    assert "no job runs now, so this goes on" in lint.stderr, lint.stderr[-3000:]


@pytest.mark.workflow
def test_dry_run_of_the_default_plans_its_runs_and_every_figure_it_does_not_skip():
    """The default (study 3: standard encoders and decoders only) plans each of its runs once and every catalog
    entry but those its figures.skip names (the ablation's and the ViTs'); --forceall: the whole DAG."""
    proc = snakemake("-n", "--forceall")
    counts = job_counts(proc.stdout)
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    names = set(expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})[0])
    assert counts["train_model"] == counts["score_checkpoints"] == len(names) == 20
    catalog = yaml.safe_load((REPO / "notebooks" / "catalog.yaml").read_text())
    skipped = set(cfg["figures"]["skip"])
    assert skipped and skipped < set(catalog)
    for nb in catalog:
        assert counts.get(f"make_{nb}") == (None if nb in skipped else 1), nb


@pytest.mark.workflow
def test_dry_run_of_study2_has_every_run_and_figure():
    # study 2's design has every kind of run (the ablation, the ViTs); --forceall: the whole DAG, whatever a
    # previous run left in its results folder
    proc = snakemake("-n", "--forceall", "--configfile", "config/study2.yaml")
    counts = job_counts(proc.stdout)
    cfg = yaml.safe_load((REPO / "config" / "study2.yaml").read_text())
    # runs: product of each entry's lists, de-duplicated by name (the expansion: tests/test_workflow_logic.py)
    names = set(expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})[0])
    assert counts["train_model"] == len(names) >= 15
    assert counts["score_checkpoints"] == len(names)
    assert counts["score_null_inits"] == 1
    assert counts["score_pretrained"] == len(cfg["pretrained"])
    assert "prefetch_qk" not in counts  # the default's models are local files (pip packages): nothing to fetch
    catalog = yaml.safe_load((REPO / "notebooks" / "catalog.yaml").read_text())
    for nb in catalog:
        assert counts.get(f"make_{nb}") == 1, nb
    # Figure 1's matrices come from rules (our two emergence runs, the two pretrained models drawn)
    assert counts["extract_run_wqk"] == 2 and counts["extract_pretrained_wqk"] == 2
    assert counts["tabulate_symmetry_speedup"] == 1
    # no rule and no other notebook reads what a notebook writes
    jobs = job_files(proc.stdout + proc.stderr)
    written = {f: rule for rule, _, outs in jobs if rule.startswith("make_") for f in outs}
    assert len(written) >= 2 * len(catalog)
    for rule, ins, _ in jobs:
        if rule != "all":
            assert not set(ins) & set(written), (rule, sorted(set(ins) & set(written)))
    # seeds are the unit: >= 3 seeds of each contrast, encoder and decoder paired by seed, one horizon
    seeds = {}
    for n in names:
        variant, seed = n.rsplit("-s", 1)
        seeds.setdefault(variant.split("-", 2)[2], set()).add(int(seed))
    for variant in (
        "encoder-standard",
        "encoder-symmetric-fresh",
        "encoder-fresh",
        "decoder-standard",
        "decoder-symmetric-fresh",
    ):
        assert len(seeds[variant]) >= 3, variant
    # contrasts are paired by seed: at least 3 seeds shared by each claim's two arms (a seed without its
    # partner, such as a fourth standard encoder, serves only the claims whose arms it has)
    for a, b in (
        ("encoder-standard", "decoder-standard"),
        ("encoder-symmetric-fresh", "encoder-standard"),
        ("encoder-symmetric-fresh", "encoder-fresh"),
        ("decoder-symmetric-fresh", "decoder-standard"),
        ("decoder-symmetric-fresh", "encoder-symmetric-fresh"),
    ):
        assert len(seeds[a] & seeds[b]) >= 3, (a, b)
    assert seeds["decoder-standard"] <= seeds["encoder-standard"]  # every decoder has its encoder
    main = cfg["training"]["groups"][cfg["figures"]["emergence_group"]]
    assert cfg["figures"]["emergence_group"] == cfg["figures"]["ablation_group"]
    assert main["settings"]["eval_blocks"] >= 512


@pytest.mark.workflow
def test_dry_run_paper_config():
    proc = snakemake("-n", "-p", "--configfile", "config/paper.yaml")
    counts = job_counts(proc.stdout)
    # every run of the config's expansion is trained and scored (its content: tests/test_paper_config.py)
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    runs, groups = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    names = set(runs)
    update_runs = {r for r in groups[cfg["updates"]["group"]] if runs[r].init in cfg["updates"]["inits"]}
    assert counts["train_model"] == counts["score_checkpoints"] == len(names) >= 150
    assert counts["score_updates"] == len(update_runs)
    assert counts["prepare_corpus"] == 3
    assert counts["score_pretrained"] > 100
    # the default config is not merged into the paper config
    assert "wiki_offline" not in proc.stdout
    # each hub model (not a GGUF file) is prefetched once, on the submitting host (the very large ones by a
    # cluster job), and scored from that folder
    hub = {k for k, m in cfg["pretrained"].items() if "hub_id" in m and "gguf_file" not in m}
    big = {k for k in hub if cfg["pretrained"][k].get("qk_gb", 0) > cfg["scoring"]["prefetch_local_max_gb"]}
    assert "meta-llama--Llama-3.1-405B" in big
    jobs = job_files(proc.stdout + proc.stderr)
    prefetches = ("prefetch_qk", "prefetch_qk_on_cluster")
    fetched = {os.path.basename(outs[0]): outs[0] for rule, _, outs in jobs if rule in prefetches}
    assert counts["prefetch_qk"] + counts["prefetch_qk_on_cluster"] == len(fetched) == len(hub) > 100
    assert set(fetched) == hub and counts["prefetch_qk_on_cluster"] == len(big)
    assert all(f == os.path.join(cfg["results"], "hub-qk", k) for k, f in fetched.items())
    # No compute-node job reads the network: every job runs with the hub offline (the shell prefix), and the
    # only commands that switch it on are local rules' (on the submitting host) or the large prefetches'; every
    # hub id and hub dataset of the config is named only by such a job.
    shells = dry_run_shell_commands(proc.stdout)
    online = {(rule, local) for rule, local, cmd in shells if "HF_HUB_OFFLINE=0" in cmd}
    assert ("prefetch_qk", True) in online and all(local or rule == "prefetch_qk_on_cluster" for rule, local in online)
    assert all(local for rule, local, _ in shells if rule == "prefetch_qk")
    hub_ids = {m["hub_id"] for m in cfg["pretrained"].values() if "hub_id" in m and "gguf_file" not in m}
    read_from = {}  # hub id -> the jobs whose command reads it (the source right after --no-progress)
    for rule, local, cmd in shells:
        for source in re.findall(r"--no-progress (\S+)", cmd):
            if source in hub_ids:
                read_from.setdefault(source, set()).add((rule, local))
    assert set(read_from) == hub_ids and all(jobs <= online for jobs in read_from.values())
    assert "HF_HUB_OFFLINE=1" in shell_prefix(str(REPO))
    scored = {os.path.basename(outs[0])[:-4]: ins for rule, ins, outs in jobs if rule == "score_pretrained"}
    assert all(scored[k] == [fetched[k]] for k in hub)
    # the paper's grouped-query models are also scored by its expansion, from the same prefetched q/k subsets
    compared = {os.path.basename(outs[0])[:-4]: ins for rule, ins, outs in jobs if rule == "compare_gqa"}
    assert set(compared) == set(cfg["figures"]["gqa_models"]) and len(compared) >= 10
    assert all(compared[k] == [fetched[k]] for k in compared if k in hub)
    assert all(fetched.keys().isdisjoint(ins) for k, ins in scored.items() if k not in hub)


def test_paper_training_asks_for_gpus_and_pretrained_revisions_are_listed():
    cfg = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    assert cfg["training"]["gpus"] >= 1 and cfg["training"]["device"] == "cuda"
    hub = [m for m in cfg["pretrained"].values() if "hub_id" in m]
    assert hub and all(m.get("revision") for m in hub)
    # the reference's short names map to hub ids via the same_as pairs: the pairs' hub ids are all present
    ref = REPO / "resources" / "paper" / "paper_pretrained_scores.csv"
    with open(ref, newline="") as f:
        pairs = {(r["model"], r["same_as"]) for r in csv.DictReader(f) if r["same_as"]}
    ids = {m["hub_id"] for m in hub}
    for model, short in pairs:
        if model.startswith("google/bert_uncased") or model in ("bert-base-uncased", "distilbert-base-uncased"):
            assert model in ids, (model, short)


@pytest.mark.workflow
def test_smoke_config_dry_run_writes_only_under_its_results_root(tmp_path):
    proc = snakemake("-n", "--configfile", "config/smoke.yaml", "--config", f"results={tmp_path}/r")
    counts = job_counts(proc.stdout)
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    assert counts["train_model"] == len(run_names(cfg)) and counts["score_pretrained"] == len(cfg["pretrained"])
    for line in proc.stdout.splitlines():
        if line.strip().startswith("output:"):
            for path in line.split(":", 1)[1].split(","):
                assert path.strip().startswith(f"{tmp_path}/r/"), line


@pytest.mark.workflow
def test_hub_model_is_prefetched_then_scored_offline(tmp_path):
    # rule prefetch_qk fetches the hub model's q/k (from a local stand-in for the hub) and score_pretrained
    # scores that folder with the hub switched off; the rows equal those of scoring the checkpoint itself
    import fakehub

    from attention_geometry.scoring.scorer import score_model

    ckpt = fakehub.tiny_llama(tmp_path / "tiny-llama")
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg.update(offline=False, results=str(tmp_path / "r"))
    cfg["pretrained"]["tiny"] = {"hub_id": "org/tiny-llama", "revision": "main", "name": "org/tiny-llama"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    with fakehub.serve({"org/tiny-llama": ckpt}) as (hub, url):
        online = dict(
            env(), HF_HUB_OFFLINE="0", TRANSFORMERS_OFFLINE="0", HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf")
        )
        proc = subprocess.run(
            [
                SNAKEMAKE,
                "--cores",
                "1",
                "--nolock",
                "--configfile",
                str(tmp_path / "c.yaml"),
                "--",
                str(tmp_path / "r" / "pretrained" / "tiny.csv"),
            ],
            cwd=REPO,
            env=online,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert job_counts(proc.stdout + proc.stderr) == {"prefetch_qk": 1, "score_pretrained": 1}
    fetched = sorted(p.name for p in (tmp_path / "r" / "hub-qk" / "tiny").iterdir() if p.name != ".snakemake_timestamp")
    assert fetched == [".prefetch-qk.json", "config.json", "model.safetensors"]  # the marker of a prefetch
    assert [p for m, p, r in hub.requests if "/revision/" in p] == ["api/models/org/tiny-llama/revision/main"]  # once
    assert (
        sum(v for k, v in hub.sent.items() if k.endswith(".safetensors"))
        < sum(f.stat().st_size for f in ckpt.glob("*.safetensors")) / 10
    )

    got = pd.read_csv(tmp_path / "r" / "pretrained" / "tiny.csv")
    ref = score_model(ckpt, progress=False, name="org/tiny-llama")
    assert (
        got[["layer", "n_params", "n_heads", "n_kv_heads"]].values
        == ref[["layer", "n_params", "n_heads", "n_kv_heads"]].values
    ).all()
    assert (got[["symmetry", "directionality"]] - ref[["symmetry", "directionality"]]).abs().max().max() <= 1e-6


@pytest.mark.workflow
def test_training_resources_follow_the_config(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg["training"].update(threads=2, gpus=3, mem_mb=1234, runtime=77)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "-p", "--cores", "4", "--configfile", str(path), "--config", f"results={tmp_path}/r")
    block = proc.stdout[proc.stdout.index("rule train_model:") :]
    block = block[: block.index("\n\n")]
    assert "threads: 2" in block
    assert "gpu=3" in block and "mem_mb=1234" in block and "runtime=77" in block
    # three processes under torchrun (one per GPU) share the job's two threads
    assert (
        "torchrun --standalone --nnodes 1 --nproc-per-node 3 --no-python python -m attention_geometry train"
        in proc.stdout
    )
    assert "--threads 1" in proc.stdout
    assert "slurm_partition" not in proc.stdout  # unset: the profile's default-resources decide

    # a SLURM partition and account for the training jobs only (a GPU partition), none for the other rules
    cfg["training"].update(slurm_partition="gpu-a100", slurm_account="lab42")
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--cores", "4", "--configfile", str(path), "--config", f"results={tmp_path}/r")
    blocks = [b for b in re.split(r"\n(?=\[\w{3} \w{3} )", proc.stdout) if "rule " in b]  # one per job
    train = [b for b in blocks if "rule train_model:" in b]
    other = [b for b in blocks if "rule train_model:" not in b]
    assert len(train) == len(run_names(cfg)) and all(
        "slurm_partition=gpu-a100" in b and "slurm_account=lab42" in b for b in train
    )
    assert other and not any("slurm_" in b for b in other)


@pytest.mark.workflow
def test_a_bad_config_stops_the_parse_with_one_line(tmp_path):
    """The wiring: the Snakefile stops a config that fails the schema with the one line of schema_error, and
    one that the plan refuses with the plan's message (the cases themselves: tests/test_workflow_logic.py)."""
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg["training"]["groups"]["main"]["settings"]["max_stpes"] = 3
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--configfile", str(tmp_path / "bad.yaml"), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config training.groups.main.settings: " in out and "max_stpes" in out
    assert "additionalProperties" not in out  # not Snakemake's message with the whole schema after it
    # the line alone, without Snakemake's `WorkflowError in file ..., line N:` frame and stack (issue 59, LOW)
    assert [ln for ln in proc.stderr.splitlines() if "max_stpes" in ln][0].startswith("config training.")
    assert "WorkflowError" not in out and 'File "' not in out, out[-2000:]

    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg["updates"]["steps"] = [0, 7]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--configfile", str(tmp_path / "bad.yaml"), check=False)
    assert proc.returncode != 0 and "updates.steps" in proc.stdout + proc.stderr
    assert "WorkflowError" not in proc.stdout + proc.stderr and 'File "' not in proc.stderr, proc.stderr[-2000:]


def test_every_path_in_a_shell_command_is_quoted():
    # every input, output, log and folder that a rule puts into its shell command goes through :q, so a
    # path with a space or a ';' stays one argument (the train rule's error message, inside single quotes,
    # is the one exception: `results` has a safe pattern in the schema)
    field = re.compile(r"\{((?:input|output|log)(?:\.\w+)?|params\.(?:run_dir|out|source|path|snapshot|files))(:q)?\}")
    bare = []
    for smk in sorted((REPO / "rules").glob("*.smk")):
        for string in re.findall(r'"([^"\n]*)"', smk.read_text()):
            bare += [f"{smk.name}: {{{name}}}" for name, quoted in field.findall(string) if not quoted]
    assert not bare, bare
    # and the check itself sees the rules' fields (it would pass vacuously otherwise)
    assert len(field.findall((REPO / "rules" / "score.smk").read_text())) > 10


# ------------------------------------------------------------------------------------------ concat-tables


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


def test_concat_tables_pads_an_image_runs_accuracy_into_the_text_rows(tmp_path):
    cols = TABLE_COLUMNS["training_loss"]
    text = _write(
        tmp_path / "text.csv", cols, [["t", "tiny", "w", "encoder", "standard", "1", "250", "7.5", "7.4", "0.001"]]
    )
    image_cols = ["eval_accuracy", *cols]  # an image run's loss.csv, its accuracy column first
    image_row = ["0.96", "v", "vit-tiny", "digits", "classifier", "fresh", "2", "50", "0.4", "0.3", "0.001"]
    image = _write(tmp_path / "image.csv", image_cols, [image_row])
    for order in ([text, image], [image, text]):
        out = tmp_path / f"{order[0].stem}-first.csv"
        assert concat_tables(order, out, kind="training_loss") == 2
        table = pd.read_csv(out, dtype=str, keep_default_na=False).set_index("run")
        assert set(table.columns) == set(cols[1:]) | {"eval_accuracy"}
        assert table.loc["t", "eval_accuracy"] == "" and table.loc["v", "eval_accuracy"] == "0.96"
        assert table.loc["v", "eval_loss"] == "0.3" and table.loc["t", "eval_loss"] == "7.4"
    # only the kind's optional column may be missing: any other difference is still refused
    other = _write(tmp_path / "other.csv", [*cols, "surprise"], [["x"] * (len(cols) + 1)])
    with pytest.raises(UserError, match="other.csv: columns differ"):
        concat_tables([text, other], tmp_path / "o.csv", kind="training_loss")
    with pytest.raises(UserError, match="other.csv: columns differ"):
        concat_tables([image, other], tmp_path / "o.csv", kind="training_loss")


def test_concat_tables_keeps_text_reorders_columns_and_checks_contract(tmp_path):
    cols = TABLE_COLUMNS["training_loss"]
    a = _write(tmp_path / "a.csv", cols, [["r1", "tiny", "w", "encoder", "standard", "1", "0", "7.5", "", "0.001"]])
    # same columns, other order; a value with many digits must be copied unchanged
    b_cols = list(reversed(cols))
    b_row = ["r2", "tiny", "w", "decoder", "fresh", "2", "10", "6.123456789012345", "6.0", "1e-05"]
    b = _write(tmp_path / "b.csv", b_cols, [list(reversed(b_row))])
    out = tmp_path / "t" / "loss.csv"
    assert concat_tables([a, b], out, kind="training_loss") == 2
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == cols
    assert rows[1] == ["r1", "tiny", "w", "encoder", "standard", "1", "0", "7.5", "", "0.001"]
    assert rows[2] == b_row

    c = _write(tmp_path / "c.csv", cols[:-1], [["x"] * (len(cols) - 1)])
    with pytest.raises(UserError, match="c.csv: columns differ"):
        concat_tables([a, c], tmp_path / "o.csv")
    with pytest.raises(UserError, match="missing column"):
        concat_tables([c], tmp_path / "o.csv", kind="training_loss")
    with pytest.raises(UserError, match="no such file"):
        concat_tables([tmp_path / "nope.csv"], tmp_path / "o.csv")
    ragged = tmp_path / "r.csv"
    ragged.write_text("a,b\n1,2,3\n")
    with pytest.raises(UserError, match=r"r.csv:2: 3 fields"):
        concat_tables([ragged], tmp_path / "o.csv")


def test_concat_tables_cli_one_line_error(tmp_path):
    proc = subprocess.run(
        [
            str(BIN / "attention-geometry"),
            "concat-tables",
            str(tmp_path / "missing.csv"),
            "--out",
            str(tmp_path / "o.csv"),
        ],
        capture_output=True,
        text=True,
        env=env(),
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "missing.csv" in proc.stderr


# ------------------------------------------------------------------------------------------ the smoke run


def _csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.workflow
def test_smoke_workflow_end_to_end(smoke_workflow):
    """Every table holds the rows its config implies (runs, steps, layers, models; scores within [-1, 1]),
    every notebook ran without an error cell, and every figure and table it writes has content."""
    wf = smoke_workflow
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    results = wf / cfg["results"]
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    tables = {kind: pd.read_csv(results / "tables" / f"{kind}.csv") for kind in TABLE_COLUMNS}
    for kind, cols in TABLE_COLUMNS.items():
        assert len(tables[kind]) and set(cols) <= set(tables[kind].columns), kind

    loss = tables["training_loss"]
    assert set(loss["run"]) == set(runs)
    for name, run in runs.items():
        steps = loss.loc[loss["run"] == name, "step"].tolist()
        assert steps == list(range(run.max_steps + 1)), name  # every step once, in order
    scores = tables["training_scores"]
    assert set(scores["run"]) == set(runs)
    n_layers = scores["layer"].nunique()
    for name, run in runs.items():
        mine = scores[(scores["run"] == name) & (scores["head"] == "all")]
        assert sorted(mine["step"].unique()) == run.snapshot_steps, name
        assert len(mine) == len(run.snapshot_steps) * n_layers, name
    for col in ("symmetry", "directionality"):
        assert scores[col].between(-1, 1).all() and tables["pretrained_scores"][col].between(-1, 1).all()
    assert tables["pretrained_scores"]["model"].nunique() == len(cfg["pretrained"])

    catalog = yaml.safe_load((wf / "notebooks" / "catalog.yaml").read_text())
    made = config_plan(validated_config("smoke.yaml")).notebooks  # the smoke config scores no grouped-query model
    assert "fig_gqa_paper_method" not in made and not (results / "notebooks" / "fig_gqa_paper_method.ipynb").exists()
    for nb, entry in catalog.items():
        if nb not in made:
            continue
        executed = json.loads((results / "notebooks" / f"{nb}.ipynb").read_text())
        errors = [o for c in executed["cells"] for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, nb
        for out in entry["outputs"].values():
            assert_has_content(Path(wf, out.replace("{results}", cfg["results"])))


@pytest.mark.workflow
def test_a_failing_notebook_shows_its_traceback_not_its_json(smoke_workflow, tmp_path):
    """A cell that raises: the job fails with the cell's own error in what Snakemake prints (the log of
    papermill's lines), not the executed notebook's JSON; the executed copy is kept for reading."""
    wf = tmp_path / "wf"
    shutil.copytree(smoke_workflow, wf, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    nb = wf / "notebooks" / "table_scores.ipynb"
    notebook = json.loads(nb.read_text())
    code = next(
        c for c in notebook["cells"] if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", [])
    )
    code["source"] = ['raise ValueError("a cell that fails on purpose")\n']
    nb.write_text(json.dumps(notebook, indent=1))
    proc = snakemake("--configfile", "config/smoke.yaml", "--cores", "1", cwd=wf, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ValueError: a cell that fails on purpose" in out
    assert '"cell_type"' not in out and "nbformat" not in out  # no notebook JSON on the console
    executed = wf / "results-smoke" / "notebooks" / "table_scores.ipynb"
    assert "a cell that fails on purpose" in executed.read_text()


@pytest.mark.workflow
def test_smoke_workflow_is_incremental(smoke_workflow):
    """After the run nothing is left to do; editing one notebook re-runs only its rule (Snakemake compares
    the content of small inputs, so a bare `touch` that changes nothing is not an edit)."""
    wf = smoke_workflow
    base = ["--configfile", "config/smoke.yaml", "--cores", "2"]
    proc = snakemake(*base, "-n", cwd=wf)
    assert "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    nb = wf / "notebooks" / "table_scores.ipynb"
    notebook = json.loads(nb.read_text())
    notebook["metadata"]["edited_by_test"] = True
    nb.write_text(json.dumps(notebook, indent=1))
    counts = job_counts(snakemake(*base, "-n", cwd=wf).stdout)
    assert counts == {"make_table_scores": 1, "all": 1}, counts
    snakemake(*base, cwd=wf)
    assert "Nothing to be done" in snakemake(*base, "-n", cwd=wf).stdout


@pytest.mark.workflow
def test_hard_kill_mid_training_resumes_with_the_readme_command(tmp_path):
    """SIGKILL to snakemake's whole process group while a run trains, then the README's resume command
    (`snakemake --unlock`, then the same command; profiles/default sets rerun-incomplete): the run resumes
    from its newest state, not from step 0, its loss log has every step once, and its final weights equal
    those of an uninterrupted run bit for bit."""
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    cfg["results"] = "results-kill"
    for group in cfg["training"]["groups"].values():
        group["settings"].update(max_steps=300, snapshot_every=150, state_every=20)
        for entry in group["runs"]:
            entry.pop("max_steps", None)
    cfg["updates"]["steps"] = [0, 150]
    (wf / "config" / "kill.yaml").write_text(yaml.safe_dump(cfg))
    run = _run_name(cfg, "encoder", "standard")
    target = f"results-kill/runs/{run}/train.done"
    cmd = [SNAKEMAKE, "--configfile", "config/kill.yaml", "--cores", "1", target]
    run_dir = wf / "results-kill" / "runs" / run
    state = run_dir / "state" / "state.json"

    proc = subprocess.Popen(
        cmd, cwd=wf, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline, step = time.time() + 600, 0
    try:
        while time.time() < deadline and proc.poll() is None:
            try:
                step = json.loads(state.read_text())["step"]
            except (ValueError, KeyError, OSError):
                step = 0
            if step >= 20:
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert step >= 20, "no training state within the time limit"
    killed_at = json.loads(state.read_text())["step"]
    assert 0 < killed_at < 300 and not (wf / target).exists()

    snakemake("--configfile", "config/kill.yaml", "--unlock", cwd=wf)
    snakemake(*cmd[1:], cwd=wf, timeout=900)  # the same command
    assert (wf / target).exists()
    resumed = [int(m) for m in re.findall(r"resuming .*? at step (\d+)", (run_dir / "train.log").read_text())]
    assert resumed == [killed_at]
    loss_steps = [int(r["step"]) for r in _csv_rows(run_dir / "loss.csv")]
    assert loss_steps == list(range(301))

    fresh = tmp_path / "fresh"
    config = wf / "results-kill" / "configs" / "runs" / f"{run}.yaml"
    cli = [str(BIN / "attention-geometry"), "train", "--config", str(config), "--out", str(fresh), "--no-progress"]
    r = subprocess.run(cli, cwd=wf, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    final = "checkpoints/step-0000300/model.safetensors"
    assert (run_dir / final).read_bytes() == (fresh / final).read_bytes()


@pytest.mark.workflow
def test_edited_run_settings_rerun_the_run(tmp_path):
    """Edit a finished run's settings in the config and run the same command: more steps under a constant
    schedule extend the run; another lr starts it afresh with the old run kept aside."""
    wf = copy_workflow(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    cfg["results"] = "results-edit"
    for group in cfg["training"]["groups"].values():
        group["settings"].update(max_steps=20, snapshot_every=10, eval_every=10)
        for entry in group["runs"]:
            entry["overrides"] = {**entry.get("overrides", {}), "schedule": "constant"}
    cfg["updates"]["steps"] = [0]
    run = _run_name(cfg, "encoder", "standard")
    target = f"results-edit/runs/{run}/train.done"
    run_dir = wf / "results-edit" / "runs" / run

    def rerun(edit=None):
        if edit:
            edit(cfg)
        (wf / "config" / "edit.yaml").write_text(yaml.safe_dump(cfg))
        snakemake("--configfile", "config/edit.yaml", "--cores", "1", target, cwd=wf)
        return (run_dir / "train.log").read_text()

    rerun()
    assert (run_dir / "checkpoints" / "step-0000020").is_dir()

    def more_steps(c):
        for group in c["training"]["groups"].values():
            group["settings"]["max_steps"] = 30

    log = rerun(more_steps)
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["max_steps"] == 30
    assert "continuing from the newest state" in log and (run_dir / "checkpoints" / "step-0000030").is_dir()
    assert not run_dir.with_name(run + ".old-1").exists()

    def other_lr(c):
        for group in c["training"]["groups"].values():
            for entry in group["runs"]:
                entry["overrides"]["lr"] = 5e-4

    log = rerun(other_lr)
    aside = run_dir.with_name(run + ".old-1")
    assert "settings changed (hyper)" in log and (aside / "checkpoints" / "step-0000030").is_dir()
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["hyper"]["lr"] == 5e-4
    assert (run_dir / "checkpoints" / "step-0000030").is_dir() and (wf / target).exists()


def _two_tiny_runs(wf: Path, name: str, training: dict, overrides: dict) -> dict:
    """smoke.yaml with `training` set and one group of two 8-step tiny runs (encoder and decoder, standard, seed 0,
    `overrides`), text only, results in results-{name}/: written to wf/config/{name}.yaml and returned."""
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    cfg["results"] = f"results-{name}"
    cfg["training"].update(training)
    run = {"size": "tiny", "corpus": "wiki_offline", "objective": ["encoder", "decoder"], "init": "standard"}
    settings = {"max_steps": 8, "snapshot_every": 4, "eval_every": 4, "eval_blocks": 8}
    cfg["training"]["groups"] = {"main": {"settings": settings, "runs": [{**run, "seed": 0, "overrides": overrides}]}}
    cfg["updates"]["steps"] = [0]
    cfg["figures"].pop("vision_group")  # text runs only
    (wf / "config" / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    return cfg


@pytest.mark.workflow
def test_two_gpus_train_as_two_ddp_processes_through_the_rule(tmp_path, monkeypatch):
    """`training.gpus: 2` on CPU: rule train_model starts the trainer under torchrun with two gloo processes;
    their loss log equals a one-process run of the same RUN.yaml (the same global batch, split in two), and
    run.yaml records both processes."""
    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config

    wf = copy_workflow(tmp_path / "wf")
    cfg = _two_tiny_runs(wf, "ddp", {"gpus": 2, "threads": 2}, {"batch_size": 8, "grad_accum": 2})
    run = _run_name(cfg, "encoder", "standard")
    proc = snakemake(
        "--configfile", "config/ddp.yaml", "--cores", "2", "-p", f"results-ddp/runs/{run}/train.done", cwd=wf
    )
    assert "torchrun --standalone --nnodes 1 --nproc-per-node 2 --no-python python -m attention_geometry train" in (
        proc.stdout + proc.stderr
    )
    two = wf / "results-ddp" / "runs" / run
    assert yaml.safe_load((two / "run.yaml").read_text())["runtime"] == {"threads": 1, "device": "cpu", "world_size": 2}
    one = tmp_path / "one"
    monkeypatch.chdir(wf)  # RUN.yaml names the corpus relative to the workflow
    train(load_run_config(wf / "results-ddp" / "configs" / "runs" / f"{run}.yaml"), one, threads=1, progress=False)
    r1, r2 = _csv_rows(one / "loss.csv"), _csv_rows(two / "loss.csv")
    assert [r["step"] for r in r1] == [r["step"] for r in r2] == [str(s) for s in range(9)]
    for a, b in zip(r1, r2):
        for col in ("train_loss", "eval_loss"):
            assert (a[col] == "") == (b[col] == "")
            if a[col]:
                assert float(b[col]) == pytest.approx(float(a[col]), rel=1e-4), (a["step"], col)


@pytest.mark.workflow
def test_a_pack_of_runs_trains_in_one_job_each_run_as_alone(tmp_path, monkeypatch):
    """`training.runs_per_job: {tiny: 2}`: one job of rule train_pack_tiny_pack0 trains the encoder and the
    decoder at once (train-shared, one thread each), and each run's loss.csv is byte for byte that of the same
    RUN.yaml trained alone; a removed train.done (drop_unfinished_markers' case) runs the pack's job again, whose
    trainers find their runs finished."""
    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config

    wf = copy_workflow(tmp_path / "wf")
    cfg = _two_tiny_runs(wf, "pack", {"threads": 2, "runs_per_job": {"tiny": 2}}, {"batch_size": 8})
    runs = [_run_name(cfg, o, "standard") for o in ("encoder", "decoder")]
    targets = [f"results-pack/runs/{r}/train.done" for r in runs]
    proc = snakemake("--configfile", "config/pack.yaml", "--cores", "2", "-p", *targets, cwd=wf)
    out = proc.stdout + proc.stderr
    assert "rule train_pack_tiny_pack0:" in out and "rule train_model:" not in out
    assert "python -m attention_geometry train-shared --no-progress --config" in out
    monkeypatch.chdir(wf)  # RUN.yaml names the corpus relative to the workflow
    for run in runs:
        packed = wf / "results-pack" / "runs" / run
        assert yaml.safe_load((packed / "run.yaml").read_text())["runtime"]["threads"] == 1
        alone = tmp_path / "alone" / run
        train(
            load_run_config(wf / "results-pack" / "configs" / "runs" / f"{run}.yaml"), alone, threads=1, progress=False
        )
        assert (packed / "loss.csv").read_bytes() == (alone / "loss.csv").read_bytes()
    (wf / targets[0]).unlink()
    proc = snakemake("--configfile", "config/pack.yaml", "--cores", "2", *targets, cwd=wf)
    assert "rule train_pack_tiny_pack0:" in proc.stdout + proc.stderr
    assert all((wf / t).is_file() for t in targets)
    assert (wf / "results-pack" / "runs" / runs[0] / "loss.csv").read_bytes() == (
        tmp_path / "alone" / runs[0] / "loss.csv"
    ).read_bytes()


@pytest.mark.workflow
def test_gpu_check_script_without_cuda_and_its_config(tmp_path):
    """benchmarks/gpu_check.sh parses; without CUDA it prints one line, runs nothing and exits 0; its config
    is a valid workflow config that trains the two bert-mini runs on cuda in bf16 through train_model."""
    script = REPO / "benchmarks" / "gpu_check.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    import torch

    if not torch.cuda.is_available():
        work = tmp_path / "work"
        proc = subprocess.run(
            ["bash", str(script), str(work)], cwd=REPO, env=env(), capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and proc.stderr == ""
        assert proc.stdout.splitlines() == [
            "gpu_check: no CUDA device here (torch.cuda.is_available() is not True): nothing run"
        ]
        assert not work.exists()
    runs = [f"{tmp_path}/r/runs/bert-mini-wiki_offline-{o}-standard-s0/train.done" for o in ("encoder", "decoder")]
    proc = snakemake(
        *runs, "-n", "-p", "--configfile", "benchmarks/gpu_check.yaml", "--config", f"results={tmp_path}/r"
    )
    assert job_counts(proc.stdout)["train_model"] == 2
    assert proc.stdout.count("--device cuda") == 2 and "torchrun" not in proc.stdout
    cfg = yaml.safe_load((REPO / "benchmarks" / "gpu_check.yaml").read_text())
    assert cfg["training"]["groups"]["main"]["runs"][0]["overrides"]["precision"] == "bf16"
