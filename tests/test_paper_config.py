"""config/paper.yaml carries the same science as the embedded default, checked on the
parsed config and its run expansion (attention_geometry.workflow.runs'), not by grepping: >= 3 seeds per
bert-mini / bert-base contrast, the `fresh` control, decoder `symmetric-fresh`, runs with the symmetry
regularizer, held-out evaluation at the rebuttal's bert-large checkpoints, one group for Figure 3, Figure S4
and Table 1, and a RUN.yaml per run that the training CLI accepts. The dry run itself is in
tests/test_workflow.py (test_dry_run_paper_config). Also the rebuttal's numbers in resources/paper/."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from attention_geometry.formats import rundir
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.run_config import run_config_from_dict
from attention_geometry.workflow import runs as workflow_runs

REPO = Path(__file__).resolve().parents[1]
REBUTTAL_STEPS = {"wikipedia": 123000, "red_pajama": 140000, "jigsaw": 184000}
# the authors' train.py and the Trainer's defaults (transformers 4.39.1, their pin), as named settings
AUTHORS = {
    "recipe": "authors",
    "batch_size": 256,  # per_device_train_batch_size 32 x gradient_accumulation_steps 8 x 1 GPU
    "per_device_batch_size": 32,
    "grad_accum": 8,
    "precision": "fp16",
    "loss_mean": "micro_batches",
    "lr": 5e-5,
    "betas": [0.9, 0.999],
    "eps": 1e-8,
    "grad_clip": 1.0,
    "weight_decay": 0.01,
    "weight_decay_params": "trainer",
    "warmup_steps": 200,
    "schedule": "trainer-linear",
    "mlm_probability": 0.15,
    "mask_token_fraction": 0.8,
    "random_token_fraction": 0.1,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
}


def expand_runs(cfg: dict) -> dict[str, dict]:
    """run name -> {spec (keys as in the config: `corpus`), settings, groups}: the workflow's own expansion
    (attention_geometry.workflow.runs.expand_runs; entry keys override the group's settings)."""
    runs, _ = workflow_runs.expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    return {
        n: {
            "spec": {workflow_runs.CONFIG_KEY[k]: v for k, v in r.spec.items()},
            "settings": r.settings,
            "groups": r.groups,
        }
        for n, r in runs.items()
    }


def steps(settings: dict, kind: str) -> list[int]:
    """The snapshot or eval steps the training CLI and the workflow resolve (rundir.snapshot_steps)."""
    return rundir.snapshot_steps(
        settings.get(f"{kind}_steps"), settings.get(f"{kind}_every"), settings["max_steps"], key=f"{kind}_steps"
    )


def lam(settings: dict) -> float:
    return float((settings.get("regularizer") or {}).get("lambda", 0.0))


@pytest.fixture(scope="module")
def cfg():
    return yaml.safe_load((REPO / "config" / "paper.yaml").read_text())


@pytest.fixture(scope="module")
def runs(cfg):
    return expand_runs(cfg)


def seeds_by_cell(runs, names):
    """(size, corpus, objective, init, regularized) -> set of seeds."""
    out = defaultdict(set)
    for n in names:
        s = runs[n]["spec"]
        out[(s["size"], s["corpus"], s["objective"], s["init"], lam(runs[n]["settings"]) > 0)].add(s["seed"])
    return out


def test_one_group_serves_fig3_figS4_and_table1(cfg, runs):
    f = cfg["figures"]
    assert f["emergence_group"] == f["ablation_group"] == cfg["updates"]["group"]
    assert f["emergence_group"] in cfg["training"]["groups"]
    # the SPEC's figure keys, as in the default config
    assert set(f["margins"]) == {"symmetry", "directionality", "loss", "speedup"}
    assert all(v > 0 for v in f["margins"].values())
    assert f["horizon_snapshots"] >= 1
    # the main group has no regularized run (those would be pooled with its standard runs)
    main = [n for n, r in runs.items() if f["emergence_group"] in r["groups"]]
    assert main and all(lam(runs[n]["settings"]) == 0 for n in main)


def test_three_seeds_per_contrast_the_fresh_control_and_decoder_symmetric_fresh(cfg, runs):
    main = [n for n, r in runs.items() if cfg["figures"]["emergence_group"] in r["groups"]]
    cells = seeds_by_cell(runs, main)
    corpora = list(cfg["corpora"])
    assert set(corpora) == {"jigsaw", "wikipedia", "red_pajama"}  # the paper's datasets
    wanted = [("encoder", i) for i in ("standard", "symmetric-fresh", "fresh")]
    wanted += [("decoder", i) for i in ("standard", "symmetric-fresh")]
    for size in ("bert-mini", "bert-base"):
        for corpus in corpora:
            for objective, init in wanted:
                got = cells[(size, corpus, objective, init, False)]
                assert len(got) >= 3, (size, corpus, objective, init, got)
            # encoder and decoder of one seed share their initial weights: the same seeds on both sides
            enc = cells[(size, corpus, "encoder", "standard", False)]
            dec = cells[(size, corpus, "decoder", "standard", False)]
            assert len(enc & dec) >= 3
    for corpus in corpora:  # bert-large: seed 0 for every contrast
        for objective, init in wanted:
            assert 0 in cells[("bert-large", corpus, objective, init, False)], (corpus, objective, init)
    # the paper's sizes, sequence 512 and 200k steps for every text run, overridden by the authors' recipe only
    for n in runs:
        r = runs[n]
        if r["spec"]["objective"] == "classifier":  # the rebuttal's ViTs: test_vision_runs_on_cifar10
            continue
        assert r["spec"]["size"] in ("bert-mini", "bert-base", "bert-large"), n
        assert r["settings"]["max_steps"] == 200000 and r["settings"]["overrides"] == AUTHORS, n
    assert all(c["block_len"] == 512 for c in cfg["corpora"].values())


def test_regularizer_runs(cfg, runs):
    reg = [n for n, r in runs.items() if lam(r["settings"]) > 0]
    cells = seeds_by_cell(runs, reg)
    for size in ("bert-mini", "bert-base"):
        for corpus in cfg["corpora"]:
            assert len(cells[(size, corpus, "encoder", "standard", True)]) >= 3, (size, corpus)
    # apart from the regularizer, the same settings as the main group's runs of the same size
    for n in reg:
        s = {k: v for k, v in runs[n]["settings"].items() if k != "regularizer"}
        size = runs[n]["spec"]["size"]
        assert any(r["settings"] == s for r in runs.values() if r["spec"]["size"] == size), n


def test_heldout_evaluation_includes_the_rebuttal_checkpoints(runs):
    for n, r in runs.items():
        s = r["settings"]
        assert s["eval_blocks"] >= 512, n
        assert not ("snapshot_steps" in s and "snapshot_every" in s), n  # the training CLI refuses both
        assert not ("eval_steps" in s and "eval_every" in s), n
        if r["spec"]["size"] == "bert-large":
            step = REBUTTAL_STEPS[r["spec"]["corpus"]]
            assert step in steps(s, "eval") and step in steps(s, "snapshot"), (n, step)


def test_update_steps_have_equal_applied_intervals(cfg, runs):
    """The applied update at step s spans s -> the run's next snapshot: the same length for every step and run."""
    upd = cfg["updates"]
    sel = [n for n, r in runs.items() if upd["group"] in r["groups"] and r["spec"]["init"] in upd["inits"]]
    assert {runs[n]["spec"]["size"] for n in sel} == {"bert-mini", "bert-base", "bert-large"}
    gaps = set()
    for n in sel:
        snaps = steps(runs[n]["settings"], "snapshot")
        for s in upd["steps"]:
            assert s in snaps, (n, s)
            nxt = [x for x in snaps if x > s]
            if nxt:
                gaps.add(nxt[0] - s)
    assert len(gaps) == 1, gaps


def test_every_run_config_is_read_by_the_trainers_reader_unchanged(runs, tmp_path):
    """Each run's RUN.yaml content (what rule write_run_config writes) passes the trainer's own reader with every
    key kept, and its size and overrides resolve to hyperparameters within their bounds."""
    for n, r in runs.items():
        raw = {
            "corpus": str(tmp_path),
            "run": n,
            **{k: r["spec"][k] for k in ("size", "objective", "init", "seed")},
            **r["settings"],
        }
        rc = run_config_from_dict(raw, where=n)
        assert {k: getattr(rc, k) for k in raw} == raw, n
        h = resolve_hyper(rc.size, rc.overrides, where=n)
        assert h.num_layers >= 1 and h.hidden_size % h.num_heads == 0, n


def test_rebuttal_checkpoints_are_recorded_with_their_source():
    path = REPO / "resources" / "paper" / "paper_rebuttal_checkpoints.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["model", "dataset", "step", "init", "eval_loss", "speedup_percent", "source"]
    got = {(r["dataset"], int(r["step"]), r["init"]): (float(r["eval_loss"]), r["speedup_percent"]) for r in rows}
    assert got == {
        ("wikipedia", 123000, "standard"): (0.2151, ""),
        ("wikipedia", 123000, "symmetric"): (0.1874, "56.5"),
        ("jigsaw", 184000, "standard"): (0.8113, ""),
        ("jigsaw", 184000, "symmetric"): (0.7612, "11.0"),
        ("red_pajama", 140000, "standard"): (0.2261, ""),
        ("red_pajama", 140000, "symmetric"): (0.2058, "37.8"),
    }
    assert all(r["model"] == "bert-large" and "rebuttal" in r["source"] for r in rows)
    assert "paper_rebuttal_checkpoints.csv" in (REPO / "resources" / "paper" / "README.md").read_text()


def test_vision_runs_on_cifar10(cfg, runs):
    vision = [n for n, r in runs.items() if cfg["figures"]["vision_group"] in r["groups"]]
    assert vision and all(runs[n]["spec"]["objective"] == "classifier" for n in vision)
    assert all(runs[n]["spec"]["corpus"] == "cifar10" for n in vision)
    hub = cfg["images"]["cifar10"]["hub"]
    assert hub["path"] == "uoft-cs/cifar10" and len(hub["revision"]) == 40  # a pinned commit
    cells = seeds_by_cell(runs, vision)
    by_init = {init: seeds for (size, corpus, objective, init, _r), seeds in cells.items()}
    assert set(by_init) == {"standard", "symmetric", "symmetric-fresh", "fresh"}
    assert all(len(s) >= 6 for s in by_init.values()) and len(set(map(frozenset, by_init.values()))) == 1
    for n in vision:  # 4x4 patches divide the 32x32 images
        assert 32 % runs[n]["settings"]["overrides"]["patch_size"] == 0


def test_every_text_run_is_planned_under_the_authors_recipe(cfg):
    """Each planned text run's RUN.yaml (the workflow's Run.run_config) carries every value of the authors'
    recipe, the training CLI accepts it and resolves it to them; the corpora are one document per row, the
    decoders both the authors' (decoder-paper) and ours, and training runs on the 1 GPU the batch assumes."""
    planned, _ = workflow_runs.expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    text = {n: r for n, r in planned.items() if r.objective != "classifier"}
    assert {r.objective for r in text.values()} == {"encoder", "decoder", "decoder-paper"}
    for name, r in text.items():
        raw = r.run_config()
        assert raw["overrides"] == AUTHORS, name
        rc = run_config_from_dict({**raw, "corpus": "x"}, where=name)
        h = resolve_hyper(rc.size, rc.overrides)
        assert (h.recipe, h.batch_size, h.grad_accum, h.per_device_batch_size, h.precision) == (
            "authors",
            256,
            8,
            32,
            "fp16",
        ), name
        assert h.batch_size == h.per_device_batch_size * h.grad_accum * cfg["training"]["gpus"]
    assert all(c["layout"] == "documents" for c in cfg["corpora"].values())
    assert cfg["corpora"]["wikipedia"]["split_characters"] and cfg["corpora"]["red_pajama"]["split_characters"]
    assert not cfg["corpora"]["jigsaw"].get("split_characters", False)
