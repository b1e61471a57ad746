"""The workflow's logic (attention_geometry.workflow.plan) without Snakemake: run expansion and names, settings,
snapshot steps, group selection, pretrained sources, notebook I/O. The dry runs in tests/test_workflow.py
check that the rules use it."""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
import yaml
from helpers import REPO, config_plan, validated_config

from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats import rundir
from attention_geometry.formats.checkout import code_version
from attention_geometry.formats.columns import RUN_KEYS
from attention_geometry.formats.files import csv_text
from attention_geometry.training import launch
from attention_geometry.workflow import plan as workflow
from attention_geometry.workflow.jobs import (
    JOB_DISTRIBUTIONS,
    ONLINE_ENV,
    rule_python_error,
    shell_prefix,
    slurm_resources,
)
from attention_geometry.workflow.pretrained import resolve_pretrained
from attention_geometry.workflow.runs import CONFIG_KEY, expand_runs

GROUPS = {
    "main": {
        "settings": {"max_steps": 100, "snapshot_every": 50, "eval_every": 50},
        "runs": [
            {"size": "tiny", "corpus": "c1", "objective": ["encoder", "decoder"], "init": "standard", "seed": [1, 0]},
            {
                "size": "tiny",
                "corpus": "c1",
                "objective": "encoder",
                "init": "fresh",
                "seed": 0,
                "overrides": {"mlm_probability": 0.3},
                "max_steps": 60,
            },
        ],
    },
    "other": {
        "settings": {"max_steps": 100, "snapshot_every": 50, "eval_every": 50},
        "runs": [{"size": "tiny", "corpus": "c1", "objective": "encoder", "init": "standard", "seed": 0}],
    },
}


VISION = {
    "settings": {"max_steps": 40, "snapshot_every": 20, "eval_every": 10},
    "runs": [
        {"size": "vit-tiny", "corpus": "digits", "objective": "classifier", "init": ["standard", "fresh"], "seed": 0}
    ],
}


def test_image_runs_train_on_an_image_set_and_text_runs_on_a_corpus():
    runs, groups = expand_runs({**GROUPS, "vision": VISION}, ["c1"], ["digits"])
    assert groups["vision"] == ["vit-tiny-digits-classifier-standard-s0", "vit-tiny-digits-classifier-fresh-s0"]
    cfg = validated_config("smoke.yaml")
    cfg["training"]["groups"]["vision"] = VISION
    p = config_plan(cfg)
    vit = "vit-tiny-digits-classifier-fresh-s0"
    assert p.is_image_run(vit) and not p.is_image_run(p.emergence_runs()["encoder"][0])
    assert p.run_corpus(vit) == "results-smoke/images/digits"
    assert p.run_corpus(p.emergence_runs()["encoder"][0]) == "results-smoke/corpora/wiki_offline"
    assert p.images == {"digits": {"dataset": "digits", "name": "digits"}}
    assert vit in p.vision_runs() and not any(p.is_image_run(r) for r in p.update_runs)
    assert p.notebook_param("vision_runs", "reproduction_report") == p.vision_runs()


@pytest.mark.parametrize(
    ("entry", "images", "message"),
    [
        ({"corpus": "c1"}, ["digits"], "corpus 'c1' is not a key of config images"),
        ({"corpus": "nope"}, ["digits"], "corpus 'nope' is not a key of config images"),
        ({"size": "tiny"}, ["digits"], "objective 'classifier' needs an image size"),
        ({"objective": "encoder"}, ["digits"], "objective 'encoder' needs a text size, not 'vit-tiny'"),
        ({}, [], "is not a key of config images"),
    ],
)
def test_image_runs_refuse_the_wrong_data_or_size(entry, images, message):
    run = {**VISION["runs"][0], **entry}
    with pytest.raises(ConfigError, match=message):
        expand_runs({"vision": {**VISION, "runs": [run]}}, ["c1"], images)


def test_a_vision_group_of_text_runs_is_refused():
    cfg = validated_config("smoke.yaml")
    cfg["figures"]["vision_group"] = "main"
    with pytest.raises(ConfigError, match="is not an image classifier run"):
        config_plan(cfg).vision_runs()
    cfg["figures"]["vision_group"] = "nope"
    with pytest.raises(ConfigError, match="group 'nope' is not a key of training.groups"):
        config_plan(cfg)


def test_config_key_maps_dataset_to_the_config_corpus_key():
    assert list(CONFIG_KEY) == list(RUN_KEYS)
    assert CONFIG_KEY["dataset"] == "corpus"
    assert all(CONFIG_KEY[k] == k for k in RUN_KEYS if k != "dataset")


def test_expand_runs_products_names_settings_and_groups():
    runs, groups = expand_runs(GROUPS, ["c1"])
    assert groups["main"] == [
        "tiny-c1-encoder-standard-s1",
        "tiny-c1-encoder-standard-s0",
        "tiny-c1-decoder-standard-s1",
        "tiny-c1-decoder-standard-s0",
        "tiny-c1-encoder-fresh-s0",
    ]
    assert groups["other"] == ["tiny-c1-encoder-standard-s0"]
    for name, r in runs.items():
        assert name == rundir.run_name(r.size, r.dataset, r.objective, r.init, r.seed) == r.name
        assert r.spec == {"size": "tiny", "dataset": "c1", "objective": r.objective, "init": r.init, "seed": r.seed}
    assert runs["tiny-c1-encoder-standard-s0"].groups == ["main", "other"]
    fresh = runs["tiny-c1-encoder-fresh-s0"]
    # the entry's extra keys override the group's settings; identity keys are not settings
    assert fresh.settings == {
        "max_steps": 60,
        "snapshot_every": 50,
        "eval_every": 50,
        "overrides": {"mlm_probability": 0.3},
    }
    assert fresh.snapshot_steps == [0, 50, 60]
    assert fresh.run_config() == {
        "run": "tiny-c1-encoder-fresh-s0",
        "size": "tiny",
        "objective": "encoder",
        "init": "fresh",
        "seed": 0,
        **fresh.settings,
    }
    # the longest jobs first; a decoder step costs 1.5 encoder steps
    assert runs["tiny-c1-decoder-standard-s0"].priority == 300
    assert runs["tiny-c1-encoder-standard-s0"].priority == 200


def test_expand_runs_errors_name_the_entry():
    with pytest.raises(ConfigError, match=r"training.groups.main.runs\[0\]: corpus 'c1' is not a key"):
        expand_runs(GROUPS, ["c2"])
    clash = copy.deepcopy(GROUPS)
    clash["other"]["settings"]["max_steps"] = 80
    with pytest.raises(ConfigError, match="tiny-c1-encoder-standard-s0 is also in group.*different settings"):
        expand_runs(clash, ["c1"])
    beyond = copy.deepcopy(GROUPS)
    beyond["main"]["runs"][1]["snapshot_steps"] = [0, 30, 70]
    del beyond["main"]["settings"]["snapshot_every"]
    with pytest.raises(ConfigError, match=r"runs\[1\]: snapshot_steps: step\(s\) \[70\] outside"):
        expand_runs(beyond, ["c1"])


def test_snapshot_steps_are_the_trainers_resolver():
    groups = copy.deepcopy(GROUPS)
    groups["main"]["runs"][1]["snapshot_steps"] = [10, 30]
    for g in groups.values():
        del g["settings"]["snapshot_every"]
    runs, _ = expand_runs(groups, ["c1"])
    assert (
        runs["tiny-c1-encoder-fresh-s0"].snapshot_steps == rundir.snapshot_steps([10, 30], None, 60) == [0, 10, 30, 60]
    )
    assert runs["tiny-c1-encoder-standard-s0"].snapshot_steps == [0, 100]  # neither given: 0 and the last step


def test_the_null_tables_design_is_the_plans():
    """Rule score_null_inits draws what the plan names (Plan.null_inits, Plan.null_samples), which is what the
    completeness check expects in null_scores: the null's design is in one place."""
    from attention_geometry.training.hyper import INITS

    for name in ("config.yaml", "smoke.yaml"):
        cfg = validated_config(name)
        p = config_plan(cfg)
        (block,) = p.expected_tables()["null_scores"]
        assert p.null_inits() == block["init"] and p.null_samples() == block["sample"]
        assert p.null_samples() == cfg["figures"]["null_samples"]
        assert len(p.null_inits()) == len(set(p.null_inits())) >= 2 and set(p.null_inits()) <= set(INITS)
    cfg = validated_config()
    del cfg["figures"]["null_samples"]
    assert config_plan(cfg).null_samples() == 100
    # the rule passes the plan's values, not a copy of them
    rule = (REPO / "rules" / "score.smk").read_text().split("\nrule score_null_inits:", 1)[1].split("\nrule ", 1)[0]
    assert 'inits=" ".join(PLAN.null_inits())' in rule and "samples=PLAN.null_samples()" in rule
    assert "--inits {params.inits}" in rule and "--samples {params.samples}" in rule


def test_update_runs_and_group_checks():
    cfg = validated_config()
    p = config_plan(cfg)
    # read from the config: the text runs of updates.group with an init of updates.inits, in the group's order
    runs, groups = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    updates = cfg["updates"]
    expected = [
        r for r in groups[updates["group"]] if runs[r].init in updates["inits"] and runs[r].objective != "classifier"
    ]
    assert p.update_runs == expected and expected
    bad = validated_config()
    bad["updates"]["steps"] = [0, 7]
    with pytest.raises(ConfigError, match=r"updates.steps: \[7\] are not snapshot steps"):
        config_plan(bad)
    bad = validated_config()
    bad["updates"]["inits"] = ["symmetric"]
    with pytest.raises(ConfigError, match="has no run with init"):
        config_plan(bad)
    bad = validated_config()
    bad["figures"]["ablation_group"] = "nope"
    with pytest.raises(ConfigError, match="group 'nope' is not a key of training.groups"):
        config_plan(bad)
    bad = validated_config()
    bad["figures"]["skip"] = ["no_such_notebook"]
    with pytest.raises(ConfigError, match="figures.skip"):
        config_plan(bad)


def test_resolve_pretrained_sources_and_arguments():
    digest = "ab" * 32
    models = {
        "pkg": {"package": "some_pkg", "subdir": "model", "name": "org/model", "sha256": {"model.safetensors": digest}},
        "gguf": {"package": "llm", "gguf_file": "m.gguf", "name": "org/llm"},
        "local": {"path": "/data/m/"},
        "hub": {"hub_id": "org/hub", "revision": "main"},
        "pinned": {"hub_id": "org/pinned", "revision": "abc123", "trust_remote_code": True},
    }
    m = resolve_pretrained(models)
    # a package is a pkg: spec, resolved in the job: no file input (no mtime decides a re-run), nothing installed
    assert (m["pkg"].source, m["pkg"].inputs, m["pkg"].args) == ("pkg:some_pkg/model", [], ["--name", "org/model"])
    assert m["pkg"].packaged and m["pkg"].recorded == {"model.safetensors": digest}
    assert m["pkg"].origin == "pip:some_pkg/model" and m["pkg"].weight_files() == []
    assert m["pkg"].check_command() == (
        f"python -m attention_geometry locate-package pkg:some_pkg/model --sha256 model.safetensors={digest}"
    )
    assert m["gguf"].file == m["gguf"].path == "pkg:llm/m.gguf" and m["gguf"].inputs == []
    assert m["gguf"].args == ["--gguf-file", "m.gguf", "--name", "org/llm"]
    assert m["gguf"].check_command() == "python -m attention_geometry locate-package pkg:llm/m.gguf"
    assert m["local"].source == "/data/m" and m["local"].name == "/data/m" and m["local"].pinned
    assert m["local"].inputs == ["/data/m"] and m["local"].check_command() == ":"
    assert (
        m["hub"].inputs == [] and not m["hub"].pinned and m["hub"].args == ["--revision", "main", "--name", "org/hub"]
    )
    assert m["pinned"].pinned and m["pinned"].args == [
        "--revision",
        "abc123",
        "--trust-remote-code",
        "--name",
        "org/pinned",
    ]
    with pytest.raises(ConfigError, match="exactly one of package, path, hub_id"):
        resolve_pretrained({"x": {"path": "/a", "hub_id": "b"}})
    with pytest.raises(ConfigError, match="recorded hashes are for package sources"):
        resolve_pretrained({"x": {"path": "/a", "sha256": {"m.bin": digest}}})
    with pytest.raises(ConfigError, match="WEIGHT_FILE: SHA256"):
        resolve_pretrained({"x": {"package": "p", "sha256": digest}})


def test_hub_models_are_scored_offline_from_their_prefetched_qk_subset():
    cfg = validated_config()
    cfg["pretrained"] = {
        **cfg["pretrained"],
        "hub": {"hub_id": "org/hub", "revision": "main", "name": "org/hub"},
        "code": {"hub_id": "org/code", "revision": "a" * 40, "trust_remote_code": True},
        "hubgguf": {"hub_id": "org/q", "gguf_file": "m.gguf"},
    }
    p = config_plan(cfg)
    assert p.prefetched == ["hub", "code"]  # hub models with safetensors/.bin weights; not packages, not GGUF
    hub, code, gguf = (p.pretrained[k] for k in ("hub", "code", "hubgguf"))
    assert hub.source == p.res("hub-qk", "hub") and hub.inputs == [hub.source] == [hub.path]
    assert (hub.hub_id, hub.fetch_args, hub.args) == ("org/hub", ["--revision", "main"], ["--name", "org/hub"])
    assert code.fetch_args == ["--revision", "a" * 40, "--trust-remote-code"]
    assert code.args == ["--trust-remote-code", "--name", "org/code"]
    assert hub.origin == "hub:org/hub@main" and not hub.pinned and hub.weight_files() == []
    # the scoring job of a model read from local files runs offline; a hub GGUF file is still read online
    assert (
        hub.offline_env
        == code.offline_env
        == p.pretrained["minilm"].offline_env
        == "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
    )
    assert gguf.offline_env == "" and not gguf.hub_id and gguf.inputs == [] and gguf.source == "org/q"


def test_resolve_pretrained_joined_gguf(tmp_path):
    import hashlib

    from attention_geometry.formats.files import join_files
    from attention_geometry.workflow.pretrained import pretrained_rows

    digest = hashlib.sha256(b"abcdef").hexdigest()
    m = {
        "package": "whole",
        "gguf_file": "m.gguf",
        "gguf_parts": ["p1/data/m.part0", "p2/data/m.part1"],
        "sha256": digest,
        "name": "org/m",
    }
    r = resolve_pretrained({"g": m}, joined_dir="/res/pretrained/files")["g"]
    assert r.parts == ["pkg:p1/data/m.part0", "pkg:p2/data/m.part1"]  # resolved by join-parts, in the job
    assert r.file == r.path == "/res/pretrained/files/g/m.gguf" and r.inputs == [r.file] and r.pinned
    assert r.args == ["--gguf-file", "m.gguf", "--name", "org/m"] and r.sha256 == digest
    assert r.origin == "pip:whole/m.gguf (joined: pip:p1/data/m.part0 + pip:p2/data/m.part1)"
    assert pretrained_rows({"g": r})[0]["sha256"] == f"m.gguf:{digest}"  # recorded, before any join
    with pytest.raises(ConfigError, match="needs package, gguf_file and sha256"):
        resolve_pretrained({"g": {k: v for k, v in m.items() if k != "sha256"}}, joined_dir="/x")
    with pytest.raises(ConfigError, match="is not PACKAGE/PATH"):
        resolve_pretrained({"g": {**m, "gguf_parts": ["nofolder"]}}, joined_dir="/x")
    # the workflow's plan joins into {results}/pretrained/files: the config's joined models, and one more
    cfg = validated_config("config.yaml")
    cfg["pretrained"]["joined"] = m
    p = config_plan(cfg)
    for key, entry in cfg["pretrained"].items():
        if entry.get("gguf_parts"):
            assert p.pretrained[key].file == f"{cfg['results']}/pretrained/files/{key}/{entry['gguf_file']}", key

    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "b").write_bytes(b"def")
    out = join_files([tmp_path / "a", tmp_path / "b"], tmp_path / "j" / "m.gguf", digest)
    assert out.read_bytes() == b"abcdef"
    with pytest.raises(UserError, match="have sha256 .* not the recorded"):
        join_files([tmp_path / "b", tmp_path / "a"], tmp_path / "k.gguf", digest)  # the wrong order
    with pytest.raises(UserError, match="cannot read part"):
        join_files([tmp_path / "a", tmp_path / "missing"], tmp_path / "k.gguf", digest)
    assert not (tmp_path / "k.gguf").exists() and not list(tmp_path.glob(".k.gguf*"))


def _packaged_row(key: str, m: dict) -> str:
    """The pretrained_models.csv row of a packaged model, from its config entry alone: the package's path as the
    origin (a joined file names its parts), pinned, and the config's recorded sha256 of each file."""
    if m.get("gguf_parts"):
        origin = f"pip:{m['package']}/{m['gguf_file']} (joined: {' + '.join(f'pip:{p}' for p in m['gguf_parts'])})"
        return f"{key},{m['name']},{origin},,True,{m['gguf_file']}:{m['sha256']}"
    origin = "/".join(x for x in (f"pip:{m['package']}", m.get("subdir"), m.get("gguf_file")) if x)
    sums = " ".join(f"{f}:{h}" for f, h in sorted(m["sha256"].items()))
    return f"{key},{m['name']},{origin},,True,{sums}"


@pytest.mark.parametrize("name", ["smoke.yaml", "config.yaml"])
def test_pretrained_models_csv(name):
    # no machine path in the committed table, and nothing read at parse time: the package and the config's
    # recorded sha256 (the same table whether or not the package is installed where Snakemake parses)
    cfg = validated_config(name)
    cfg["pretrained"]["extra"] = {
        "package": "some_pkg",
        "subdir": "model",
        "sha256": {"model.safetensors": "cd" * 32, "config.json": "ef" * 32},
        "name": "org/extra",
    }
    lines = config_plan(cfg).pretrained_models_csv().splitlines()
    assert lines[0] == "key,name,origin,revision,pinned,sha256"
    assert [line.split(",", 1)[0] for line in lines[1:]] == list(cfg["pretrained"])  # one row each, in order
    rows = dict(zip(cfg["pretrained"], lines[1:]))
    packaged = {k: m for k, m in cfg["pretrained"].items() if "package" in m and "name" in m}
    for key, m in packaged.items():
        assert rows[key] == _packaged_row(key, m), key
    assert str(REPO) not in "\n".join(lines)


def test_pretrained_origin_and_hashes_of_the_files_read(tmp_path):
    import hashlib

    from attention_geometry.workflow.pretrained import pretrained_rows

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "x.gguf").write_bytes(b"gguf bytes")
    models = resolve_pretrained(
        {
            "a": {"path": str(tmp_path / "m"), "name": "A"},
            "b": {"path": str(tmp_path), "gguf_file": "x.gguf", "name": "B"},
            "c": {"hub_id": "org/c", "revision": "0" * 40, "name": "C"},
        }
    )
    rows = {r["key"]: r for r in pretrained_rows(models)}
    assert rows["a"]["sha256"] == "model.safetensors:" + hashlib.sha256(b"weights").hexdigest()
    assert rows["b"]["sha256"] == "x.gguf:" + hashlib.sha256(b"gguf bytes").hexdigest()
    assert rows["b"]["origin"] == f"{tmp_path}/x.gguf" and rows["c"]["origin"] == "hub:org/c@" + "0" * 40
    assert rows["c"]["sha256"] == ""


def test_emergence_runs_null_source_and_paths():
    # a hand-written group (not today's design): the standard runs longest, an ablation entry shorter by its
    # own max_steps; a fourth encoder seed without a decoder partner
    cfg = validated_config("config.yaml")
    corpus = next(iter(cfg["corpora"]))
    entry = {"size": "tiny", "corpus": corpus, "overrides": {"schedule": "constant"}}
    cfg["training"]["groups"] = {
        "g": {
            "settings": {"max_steps": 300, "snapshot_every": 100, "eval_every": 100},
            "runs": [
                {**entry, "objective": ["encoder", "decoder"], "init": "standard", "seed": [2, 0]},
                {**entry, "objective": "encoder", "init": "standard", "seed": 7},
                {**entry, "objective": "encoder", "init": "fresh", "seed": 0, "max_steps": 200},
            ],
        }
    }
    cfg["figures"].update(emergence_group="g", ablation_group="g")
    cfg["figures"].pop("vision_group", None)  # no vision runs in this config
    cfg["updates"].update(group="g", steps=[0, 100])
    p = config_plan(cfg)
    assert p.vision_runs() == []
    em = p.emergence_runs()
    assert em["encoder"] == [f"tiny-{corpus}-encoder-standard-s{s}" for s in (0, 2, 7)]  # ordered by seed
    assert em["decoder"] == [f"tiny-{corpus}-decoder-standard-s{s}" for s in (0, 2)]
    assert p.null_source_run() == em["encoder"][0]
    assert p.ablation_runs() == p.groups["g"]
    run = em["encoder"][0]
    assert p.final_snapshot(run) == f"{cfg['results']}/runs/{run}/checkpoints/step-0000300"
    # an entry's own max_steps overrides its group's
    assert p.final_snapshot(f"tiny-{corpus}-encoder-fresh-s0").endswith("step-0000200")
    assert p.train_done(run) == f"{cfg['results']}/runs/{run}/train.done"
    # the figures' tokens axes: batch x seq_len per emergence run; tiny's batch 32, the corpus's block_len
    block = cfg["corpora"][corpus].get("block_len", 64)
    assert p.tokens_per_step() == {r: 32 * block for rs in em.values() for r in rs}
    assert p.notebook_param("tokens_per_step", "fig3_emergence") == p.tokens_per_step()
    assert p.run_corpus(run) == f"{cfg['results']}/corpora/{corpus}"
    cfg["training"]["groups"]["g"]["runs"] = [{**entry, "objective": "encoder", "init": "standard", "seed": 0}]
    with pytest.raises(ConfigError, match="has no decoder run with init 'standard'"):
        config_plan(cfg).emergence_runs()


def test_notebook_io_fills_every_catalog_entry():
    cfg = validated_config("config.yaml")
    p = config_plan(cfg, configfiles=[str(REPO / "config" / "paper.yaml")])
    for nb, entry in p.catalog.items():
        parameters, deps, outputs = p.notebook_io(nb)
        assert outputs == {k: v.replace("{results}", cfg["results"]) for k, v in entry["outputs"].items()}
        assert set(parameters["params"]) == set(entry["params"]) | set(entry.get("constants", {}))
        assert set(deps) == set(parameters["inputs"])
    params, deps, _ = p.notebook_io("fig1_wqk_examples")
    # Figure 1's run: the lowest-seed baseline-init encoder of the emergence group, read from the config
    f = cfg["figures"]
    runs, groups = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    first = min(
        (
            r
            for r in groups[f["emergence_group"]]
            if (runs[r].objective, runs[r].init) == ("encoder", f["baseline_init"])
        ),
        key=lambda r: runs[r].seed,
    )
    assert params["inputs"]["ours_encoder"] == f"{cfg['results']}/figdata/wqk/runs/{first}.npz"
    decoder = f"{cfg['results']}/figdata/wqk/pretrained/{f['fig1_models']['decoder']}.npz"
    assert params["inputs"]["smollm2"] == deps["smollm2"] == decoder  # the catalog's slot of the decoder model
    params, deps, _ = p.notebook_io("reproduction_report")
    # the committed record of the corpus (rule record_corpus), never the ignored corpus folder
    record = f"{cfg['results']}/tables/corpus_{runs[first].dataset}.csv"
    assert params["inputs"]["corpus_manifest"] == deps["corpus_manifest"] == record
    assert params["params"]["config_name"] == "config/paper.yaml"
    assert len(params["params"]["config_hash"]) == 16
    params, _, _ = p.notebook_io("figS2_encoder_decoder")
    assert params["params"]["title"] == "Encoder-decoder models"
    assert workflow.notebook_file(p.catalog, "figS1_vision_audio") == "notebooks/pretrained_scores_vs_params.ipynb"
    assert workflow.notebook_file(p.catalog, "fig3_emergence") == "notebooks/fig3_emergence.ipynb"


def test_notebook_io_errors():
    p = config_plan(validated_config())
    p.catalog = copy.deepcopy(p.catalog)
    p.catalog["table_scores"]["inputs"]["x"] = "{nope}/x.csv"
    with pytest.raises(ConfigError, match="unknown placeholder"):
        p.notebook_io("table_scores")
    p.catalog["fig3_emergence"]["params"] = ["skip"]
    with pytest.raises(ConfigError, match="unknown param 'skip'"):
        p.notebook_io("fig3_emergence")
    cfg = validated_config()
    cfg["figures"]["fig1_models"]["decoder"] = "nope"
    with pytest.raises(ConfigError, match="fig1_models.decoder: 'nope'"):
        config_plan(cfg).notebook_io("fig1_wqk_examples")
    config_plan(cfg).notebook_io("fig3_emergence")  # an entry that does not draw Figure 1 does not look it up


def test_targets_are_every_notebook_output_and_the_tables_they_read():
    cfg = validated_config()
    cfg["figures"]["skip"] = ["fig1_wqk_examples"]
    p = config_plan(cfg)
    targets = p.notebook_targets()
    assert len(targets) == len(set(targets))
    assert "results-smoke/figures/fig3_emergence.pdf" in targets
    assert "results-smoke/tables/symmetry_speedup_runs.csv" in targets
    assert not any("fig1_wqk_examples" in t for t in targets)
    assert not any("/figdata/" in t for t in targets)
    # only committed files: the executed notebooks (logs) and the captions (report/captions/) are not targets
    assert not any(t.endswith((".ipynb", ".rst")) for t in targets)


def test_text_writers():
    assert csv_text([{"a": 1, "b": "x,y", "c": 0}], ["b", "a"]) == 'b,a\n"x,y",1\n'
    assert workflow.yaml_text({"b": 1, "a": [1, 2]}) == "a:\n- 1\n- 2\nb: 1\n"
    assert workflow.alternation([]) == "(?!)"
    assert workflow.alternation(["b.c", "a"]) == r"a|b\.c"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"lr": -1.0}, r"overrides\.lr: must be > 0"),
        ({"lr": float("nan")}, r"overrides\.lr: must be a finite number"),
        ({"hidden_dropout": 1.5}, r"overrides\.hidden_dropout: must be < 1"),
        ({"num_heads": 3}, r"overrides\.num_heads: hidden_size 128 is not a multiple of num_heads 3"),
        ({"betas": [0.9, 1.0]}, r"overrides\.betas: each must be < 1"),
        ({"lrr": 1e-3}, r"overrides\.lrr: unknown hyperparameter"),
    ],
)
def test_bad_overrides_are_refused_at_parse_time(overrides, message):
    # the trainer's own check (hyper.resolve_hyper) runs when the workflow is parsed, so a bad value never
    # reaches a job that would write a run directory first
    groups = copy.deepcopy(GROUPS)
    groups["main"]["runs"][1]["overrides"] = {"mlm_probability": 0.3, **overrides}
    with pytest.raises(ConfigError, match=r"config training\.groups\.main\.runs\[1\]: " + message):
        expand_runs(groups, ["c1"])


@pytest.mark.parametrize("pair", [("snapshot_steps", "snapshot_every"), ("eval_steps", "eval_every")])
def test_explicit_steps_and_every_together_are_refused(pair):
    groups = copy.deepcopy(GROUPS)
    groups["main"]["runs"][1].update({pair[0]: [0, 30, 60], pair[1]: 30})
    with pytest.raises(ConfigError, match=f"give {pair[0]} or {pair[1]}, not both"):
        expand_runs(groups, ["c1"])


def test_slurm_resources_only_what_is_set():
    assert slurm_resources({"gpus": 1}) == {}
    assert slurm_resources({"slurm_partition": "gpu"}) == {"slurm_partition": "gpu"}
    assert slurm_resources({"slurm_partition": "gpu", "slurm_account": "a1", "mem_mb": 5}) == {
        "slurm_partition": "gpu",
        "slurm_account": "a1",
    }


def test_shell_prefix_runs_the_checkouts_package_in_any_python(tmp_path):
    """The rules' shell prefix: the checkout's src/ wins over whatever the job's Python has installed (here this
    venv's attention_geometry), a path with a space, a quote or braces stays one word through Snakemake's
    formatting (str.format), no inherited PYTHONPATH is needed (Snakemake removes it under --sdm conda), and a
    failing command in a pipe still fails the job."""
    repo = tmp_path / "a b'c{x}"
    pkg = repo / "src" / "attention_geometry"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text("import sys; print('checkout', sys.argv[1:])\n")
    prefix = shell_prefix(str(repo)).format()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}

    def bash(cmd):
        return subprocess.run(["bash", "-c", prefix + cmd], env=env, capture_output=True, text=True)

    assert bash("python -m attention_geometry score x").stdout == "checkout ['score', 'x']\n"
    assert bash("false | cat").returncode != 0
    # every job runs with the hub offline; a fetching rule's own command switches it on for itself
    env["HF_HUB_OFFLINE"] = "0"
    assert bash("echo $HF_HUB_OFFLINE $HF_DATASETS_OFFLINE $TRANSFORMERS_OFFLINE").stdout == "1 1 1\n"
    online = bash(f"{ONLINE_ENV} bash -c 'echo $HF_HUB_OFFLINE $HF_DATASETS_OFFLINE $TRANSFORMERS_OFFLINE'")
    assert online.stdout == "0 0 0\n"
    # and the real package runs as `python -m attention_geometry` (its __main__: the console script's CLI)
    prefix = shell_prefix(str(REPO)).format()
    real = bash("python -m attention_geometry --help")
    assert real.returncode == 0 and "prepare-corpus" in real.stdout, real.stderr[-2000:]


def test_job_distributions_are_pyprojects_dependencies():
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.match(r"[A-Za-z0-9._-]+", d).group(0).lower() for d in deps]
    assert sorted(JOB_DISTRIBUTIONS) == sorted(names)


def _fake_python(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True)
    exe = folder / "python"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return folder


def test_the_rules_python_must_have_every_jobs_dependency(tmp_path):
    """rule_python_error names exactly the distributions the rules' `python` (the first on PATH) lacks: all of
    them for the interpreter under this venv without site-packages (-S), tqdm alone where every other one is
    installed (fake dist-info folders, PyYAML under its own spelling), none for this venv's python."""
    base = shlex.quote(getattr(sys, "_base_executable", sys.executable))
    bare = _fake_python(tmp_path / "bare", f'exec {base} -S "$@"')
    line = rule_python_error(str(bare))
    assert line is not None and line.startswith("workflow: ") and "\n" not in line, line
    assert f"from PATH, {bare / 'python'}, which lacks " in line and ". .venv/bin/activate" in line, line
    assert line.split("which lacks ")[1].split(" (Snakemake")[0].split(", ") == list(JOB_DISTRIBUTIONS)

    site = tmp_path / "site"
    for name in JOB_DISTRIBUTIONS:
        if name != "tqdm":
            spelled = "PyYAML" if name == "pyyaml" else name
            info = site / f"{spelled}-1.0.dist-info"
            info.mkdir(parents=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {spelled}\nVersion: 1.0\n")
    one = _fake_python(tmp_path / "one", f'PYTHONPATH={shlex.quote(str(site))} exec {base} -S "$@"')
    assert "which lacks tqdm (Snakemake itself runs from " in rule_python_error(str(one))

    assert rule_python_error(str(Path(sys.executable).parent)) is None
    assert "and none is on PATH" in rule_python_error(str(tmp_path / "nowhere"))
    broken = _fake_python(tmp_path / "broken", "echo cannot start >&2; exit 3")
    assert f"`python` ({broken / 'python'}, the first on PATH) does not run (cannot start)" in rule_python_error(
        str(broken)
    )


def test_train_launch_one_process_torchrun_per_gpu():
    one = launch.train_launch({"gpus": 1, "threads": 4})
    assert (one.prefix, one.processes, one.threads, one.resources) == ("", 1, 4, {"gpu": 1})
    assert launch.train_launch({"gpus": 0, "threads": 2}).prefix == ""
    four = launch.train_launch({"gpus": 4, "threads": 8})
    assert shlex.split(four.prefix) == [
        "torchrun",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "4",
        "--no-python",
    ]
    assert (four.processes, four.threads, four.resources) == (4, 2, {"gpu": 4})  # 8 threads shared by 4
    assert launch.train_launch({"gpus": 3, "threads": 2}).threads == 1


def _fake_bin(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!{sys.executable}\nimport json, os, subprocess, sys\n{body}")
    path.chmod(0o755)


def test_train_launch_several_nodes_runs_one_torchrun_per_node_meeting_on_the_first(tmp_path):
    multi = launch.train_launch({"gpus": 4, "threads": 16, "nodes": 2})
    assert multi.resources == {"nodes": 2, "mpi": "srun", "tasks": 2, "slurm_extra": "--gpus-per-node=4"}
    assert multi.threads == 4 and multi.processes == 4
    # Run the prefix as the rule's shell would, with stand-ins for srun (two tasks, the variables srun sets in
    # each), scontrol (the node names of a nodelist) and torchrun (records its arguments): quoting and the
    # rendezvous endpoint are checked on what torchrun would receive.
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _fake_bin(
        bin_,
        "srun",
        (
            "args = sys.argv[1:]\n"
            "opts = {}\n"
            "while args[0].startswith('--'):\n"
            "    opts[args[0]] = args[1]; args = args[2:]\n"
            "json.dump(opts, open(os.environ['OUT'] + '/srun.json', 'w'))\n"
            "for rank in range(int(opts['--ntasks'])):\n"
            "    env = {**os.environ, 'SLURM_STEP_NODELIST': 'gpu[07-08]', 'SLURM_PROCID': str(rank)}\n"
            "    subprocess.run(args, env=env, check=True)\n"
        ),
    )
    _fake_bin(
        bin_,
        "scontrol",
        "assert sys.argv[1:] == ['show', 'hostnames', 'gpu[07-08]'], sys.argv\nprint('gpu07'); print('gpu08')\n",
    )
    _fake_bin(
        bin_,
        "torchrun",
        "json.dump(sys.argv[1:], open(os.environ['OUT'] + '/torchrun-' + os.environ['SLURM_PROCID'] + '.json', 'w'))\n",
    )
    command = f"{multi.prefix} python -m attention_geometry train --config {shlex.quote(str(tmp_path / 'a b.yaml'))}"
    env = {"PATH": f"{bin_}:/usr/bin:/bin", "OUT": str(tmp_path), "SLURM_JOB_ID": "4242"}
    subprocess.run(["bash", "-c", command], env=env, check=True)
    srun = json.loads((tmp_path / "srun.json").read_text())
    assert srun == {
        "--nodes": "2",
        "--ntasks": "2",
        "--ntasks-per-node": "1",
        "--cpus-per-task": "16",
        "--gpus-per-node": "4",
    }
    for rank in (0, 1):
        assert json.loads((tmp_path / f"torchrun-{rank}.json").read_text()) == [
            "--nnodes",
            "2",
            "--nproc-per-node",
            "4",
            "--rdzv-backend",
            "c10d",
            "--rdzv-id",
            "4242",
            "--rdzv-endpoint",
            "gpu07:29500",
            "--no-python",
            "python",
            "-m",
            "attention_geometry",
            "train",
            "--config",
            str(tmp_path / "a b.yaml"),
        ]
    # CPU nodes: one gloo process per node, no GPU option
    cpu = launch.train_launch({"gpus": 0, "threads": 2, "nodes": 3})
    assert "--nproc-per-node 1" in cpu.prefix and "gpus" not in cpu.prefix
    assert cpu.resources == {"nodes": 3, "mpi": "srun", "tasks": 3}


def test_code_version_is_the_commit_and_flags_changes_outside_results(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    assert code_version(str(tmp_path)).startswith("unknown")  # not a git checkout
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.csv").write_text("a\n1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    assert code_version(str(tmp_path)) == head
    (tmp_path / "results" / "t.csv").write_text("a\n2\n")  # the outputs themselves: not a code change
    (tmp_path / "results" / "new.png").write_text("png")
    assert code_version(str(tmp_path)) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert code_version(str(tmp_path)) == head + " + uncommitted changes outside results/"


# ------------------------------------------------------------------------- configs the workflow refuses
def _refused(mutate) -> str:
    """The one-line message a mutated smoke config stops the workflow with at parse time: the schema's
    (schema_error, as the Snakefile shows it) or else the plan's ConfigError."""
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    mutate(cfg)
    message = workflow.schema_error(cfg, str(REPO / "config" / "schema.yaml"))
    if message is None:
        with pytest.raises(ConfigError) as err:
            config_plan(helpers._defaults(cfg, yaml.safe_load((REPO / "config" / "schema.yaml").read_text())))
        message = str(err.value)
    assert "\n" not in message
    return message


def _unknown_key(cfg):
    cfg["training"]["groups"]["main"]["settings"]["max_stpes"] = 3


def _clash(cfg):  # the same run in two groups with different step counts
    main = cfg["training"]["groups"]["main"]
    cfg["training"]["groups"]["other"] = {
        "settings": {**main["settings"], "max_steps": main["settings"]["max_steps"] * 2},
        "runs": [dict(main["runs"][0], objective="encoder", init="standard")],
    }


def _bad_update_step(cfg):
    cfg["updates"]["steps"] = [0, 7]


def _injected_results(cfg):  # `results` becomes part of shell commands
    cfg["results"] = "out; touch pwned"


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (_unknown_key, ["config training.groups.main.settings", "max_stpes"]),
        (_clash, ["different settings"]),
        (_bad_update_step, ["updates.steps"]),
        (_injected_results, ["config results", "does not match"]),
    ],
    ids=["unknown key", "run clash", "update step", "shell in results"],
)
def test_bad_configs_stop_with_one_line(mutate, expected):
    message = _refused(mutate)
    assert all(e in message for e in expected), message
    if mutate is _clash:
        cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
        assert _run_name_of(cfg, "encoder", "standard") in message


def _typo_top(cfg):
    cfg["reslts"] = cfg.pop("results")


def _typo_settings(cfg):  # the typo hides a required key: named as the typo, not as the missing key
    settings = cfg["training"]["groups"]["main"]["settings"]
    settings["max_step"] = settings.pop("max_steps")


def _typo_run(cfg):
    cfg["training"]["groups"]["main"]["runs"][0]["sed"] = 3


def _typo_overrides(cfg):
    cfg["training"]["groups"]["main"]["settings"]["overrides"] = {"batch_sise": 4}


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (_typo_top, "config (top level): unknown key `reslts` (did you mean `results`?)"),
        (_typo_settings, "config training.groups.main.settings: unknown key `max_step` (did you mean `max_steps`?)"),
        (_typo_run, "config training.groups.main.runs[0]: unknown key `sed` (did you mean `seed`?)"),
        (
            _typo_overrides,
            "config training.groups.main.settings.overrides: unknown key `batch_sise` (did you mean `batch_size`?)",
        ),
    ],
    ids=["top", "settings", "run entry", "overrides"],
)
def test_a_config_typo_at_any_depth_names_the_key_and_the_closest_known_one(mutate, expected):
    """Issue 58.6: a typo at the top and in a group's settings used to say "Additional properties are not allowed"
    and "'max_steps' is a required property"; now one line names the unknown key and the closest known one, as
    RUN.yaml's and show-run's check does."""
    assert _refused(mutate) == expected
    with pytest.raises(UserError, match=r"^run config: unknown key `max_step` \(did you mean `max_steps`\?\)$"):
        from attention_geometry.training.run_config import run_config_from_dict

        run_config_from_dict({"corpus": "c", "max_step": 3})


def _run_name_of(cfg, objective, init):
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    return next(n for n, r in sorted(runs.items()) if r.objective == objective and r.init == init)


def test_gqa_models_are_pretrained_keys():
    cfg = validated_config("config.yaml")
    p = config_plan(cfg)
    assert (
        p.gqa_models() == cfg["figures"]["gqa_models"]
        and p.gqa_table() == f"{cfg['results']}/tables/gqa_paper_method.csv"
    )
    cfg["figures"]["gqa_models"] = ["nope"]
    with pytest.raises(ConfigError, match="figures.gqa_models: 'nope' is not a key of config pretrained"):
        config_plan(cfg).gqa_models()


def test_the_grouped_query_entries_follow_figures_gqa_models(tmp_path):
    """The gqa table ({gqa_table}) exists only with figures.gqa_models: without it its figure is not made and the
    entries that list it as optional (Figure 2, the report) are made without it; with it, they read it."""
    cfg = validated_config("config.yaml")
    table = f"{cfg['results']}/tables/gqa_paper_method.csv"
    p = config_plan(cfg)
    assert "fig_gqa_paper_method" in p.notebooks and p.entry_made("fig_gqa_paper_method")
    for nb in ("fig_gqa_paper_method", "fig2_pretrained_scores", "reproduction_report"):
        params, deps, _ = p.notebook_io(nb)
        assert params["inputs"]["gqa"] == deps["gqa"] == table, nb
    assert (
        table in p.notebook_targets() and f"{cfg['results']}/figures/fig_gqa_paper_method.png" in p.notebook_targets()
    )
    assert "gqa" not in p.notebook_io("figS1_vision_audio")[0]["inputs"]  # only Figure 2 of its notebook reads it

    for cfg in (validated_config("smoke.yaml"), validated_config("config.yaml")):
        cfg["figures"]["gqa_models"] = []
        q = config_plan(cfg)
        assert q.gqa_models() == [] and "fig_gqa_paper_method" not in q.notebooks
        assert set(q.notebooks) == set(q.catalog) - {"fig_gqa_paper_method"} - set(cfg["figures"]["skip"])
        assert q.absent_inputs("reproduction_report") == {
            "gqa": "{gqa_table} is not made (config figures.gqa_models is empty)"
        }
        for nb in ("fig2_pretrained_scores", "reproduction_report"):
            params, deps, _ = q.notebook_io(nb)
            assert "gqa" not in params["inputs"] and "gqa" not in deps, nb
        with pytest.raises(ConfigError, match="fig_gqa_paper_method: not made with this config: input gqa"):
            q.notebook_io("fig_gqa_paper_method")
        assert not any("gqa" in t for t in q.notebook_targets())
    smoke = validated_config("smoke.yaml")  # the smoke config scores no grouped-query model (the schema's default)
    assert smoke["figures"]["gqa_models"] == [] and "fig_gqa_paper_method" not in config_plan(smoke).notebooks

    cfg = validated_config("config.yaml")
    cfg["figures"]["skip"] = ["fig_gqa_paper_method"]
    assert "fig_gqa_paper_method" not in config_plan(cfg).notebooks  # skipped like any entry

    bad = tmp_path / "catalog.yaml"
    bad.write_text(yaml.safe_dump({"x": {"caption": "c", "inputs": {"a": "a.csv"}, "outputs": {}, "optional": ["b"]}}))
    with pytest.raises(ConfigError, match=r"x: optional \['b'\] not among its inputs"):
        workflow.load_catalog(str(bad))


def test_scoring_memory_grows_with_the_widest_w_qk(tmp_path):
    """A scoring job asks for the floor plus 6 float64 width x width matrices (MiB, rounded up) of the widest
    config entry, nested configs included, times the attempt; no readable config.json: the floor."""
    from attention_geometry.workflow.pretrained import scoring_mem_mb

    folder = tmp_path / "qk"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps({"text_config": {"hidden_size": 4096}, "vision_config": {"hidden_size": 1024}, "use_cache": True})
    )
    assert scoring_mem_mb(str(folder), 4000) == 4000 + 768  # 6 * 4096^2 * 8 bytes = 768 MiB
    assert scoring_mem_mb(str(folder), 4000, attempt=2) == 2 * 4768
    (folder / "config.json").write_text(json.dumps({"d_model": 16384}))
    assert scoring_mem_mb(str(folder), 1000) == 1000 + 12 * 1024  # Llama-3.1-405B's width: 12 GiB
    (folder / "config.json").write_text(json.dumps({"n_embd": 100}))
    assert scoring_mem_mb(str(folder), 10) == 10 + 1  # 480 000 bytes: one MiB, rounded up
    assert scoring_mem_mb(str(tmp_path / "absent"), 4000) == scoring_mem_mb(None, 4000) == 4000


def test_large_prefetches_are_cluster_jobs():
    cfg = validated_config("paper.yaml")
    p = config_plan(cfg)
    limit = cfg["scoring"]["prefetch_local_max_gb"]
    big = {k for k, m in cfg["pretrained"].items() if m.get("qk_gb", 0) > limit}
    assert "meta-llama--Llama-3.1-405B" in big and set(p.prefetched_on_cluster) == big
    assert set(p.prefetched_on_cluster) < set(p.prefetched)
    cfg["scoring"]["prefetch_local_max_gb"] = 100
    assert config_plan(cfg).prefetched_on_cluster == []


@pytest.mark.parametrize("name", ["config.yaml", "smoke.yaml", "study1.yaml", "paper.yaml"])
def test_the_plans_typed_sections_hold_the_configs_values(name):
    """What the rules read of the config, they read from the plan (Plan.updates, intervals, provenance_table,
    jobs): the same values, unchanged, for every repository config."""
    cfg = validated_config(name)
    p = config_plan(cfg)
    u, f, s, t = cfg["updates"], cfg["figures"], cfg["scoring"], cfg["training"]
    assert (p.updates.group, list(p.updates.inits), list(p.updates.steps), p.updates.batches) == (
        u["group"],
        u["inits"],
        u["steps"],
        u["batches"],
    )
    assert (p.baseline_init, p.intervals.level, p.intervals.resamples, p.intervals.seed) == (
        f["baseline_init"],
        f["ci_level"],
        f["bootstrap_resamples"],
        f["bootstrap_seed"],
    )
    assert p.provenance_table == t["provenance_table"]
    j = p.jobs
    assert j.offline == cfg["offline"]
    assert (j.data.mem_mb, j.data.runtime) == (cfg["data"]["mem_mb"], cfg["data"]["runtime"])
    assert (j.scoring.threads, j.scoring.mem_mb, j.scoring.runtime) == (s["threads"], s["mem_mb"], s["runtime"])
    assert j.prefetch_slurm == slurm_resources(s, "prefetch_")
    assert (j.training.device, j.training.threads, j.training.runtime, j.training.mem_mb) == (
        t["device"],
        t["threads"],
        t["runtime"],
        t.get("mem_mb"),
    )
    assert j.training.launch == launch.train_launch(t)
    assert j.training.slurm == slurm_resources(t)
    for r in p.runs.values():
        assert j.training.run_mem_mb(r) == launch.train_mem_mb(
            r.size, r.settings.get("overrides"), t["device"], j.training.launch.processes, t.get("mem_mb")
        )


def test_the_rules_read_no_config_key():
    """The rules look up the plan, never the config: the one use of `config` in rules/ is building the plan."""
    for path in sorted((REPO / "rules").glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        assert 'config["' not in text and "config.get(" not in text, path.name


def test_runs_per_job_packs_a_sizes_runs_longest_first():
    """smoke.yaml's five tiny runs: 40-step decoder, 40-step encoder, then the 20-step ones (priority: steps x 3
    for a decoder, x 2 for an encoder; then the name), in packs of 2; the ViTs stay one run per job."""
    cfg = validated_config()
    runs = config_plan(cfg).runs
    tiny = [r for r in runs if runs[r].size == "tiny"]
    by_length = sorted(tiny, key=lambda r: (-runs[r].max_steps * (3 if runs[r].objective == "decoder" else 2), r))
    cfg["training"]["runs_per_job"] = {"tiny": 2, "vit-tiny": 1}
    p = config_plan(cfg)
    assert p.packs == {"tiny-pack0": by_length[:2], "tiny-pack1": by_length[2:4], "tiny-pack2": by_length[4:]}
    assert len(tiny) == 5 and runs[by_length[0]].max_steps == 40 and runs[by_length[-1]].max_steps == 20
    assert set(p.packed) == set(tiny) and p.packed[by_length[3]] == "tiny-pack1"
    assert p.unpacked_runs() == [r for r in runs if runs[r].size == "vit-tiny"]
    cfg["training"]["runs_per_job"] = {"tiny": 8}
    assert config_plan(cfg).packs == {"tiny-pack0": by_length}
    del cfg["training"]["runs_per_job"]
    assert config_plan(cfg).packs == {} and config_plan(cfg).unpacked_runs() == list(runs)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"runs_per_job": {"bert-mini": 4}}, "no run has size 'bert-mini' (the runs' sizes: tiny, vit-tiny)"),
        ({"runs_per_job": {"tiny": 2}, "gpus": 2}, "needs gpus <= 1 and nodes 1 (here gpus 2, nodes 1)"),
        ({"runs_per_job": {"tiny": 2}, "nodes": 2}, "needs gpus <= 1 and nodes 1 (here gpus 0, nodes 2)"),
    ],
)
def test_runs_per_job_refuses_what_it_cannot_pack(change, message):
    cfg = validated_config()
    cfg["training"].update(change)
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_plan(cfg)


def test_runs_per_job_in_the_schema_takes_counts_of_at_least_one():
    schema = str(REPO / "config" / "schema.yaml")
    cfg = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())
    cfg["training"]["runs_per_job"] = {"tiny": 4}
    assert workflow.schema_error(cfg, schema) is None
    for bad in (0, "4", 1.5):
        cfg["training"]["runs_per_job"] = {"tiny": bad}
        assert workflow.schema_error(cfg, schema).startswith("config training.runs_per_job.tiny: ")
