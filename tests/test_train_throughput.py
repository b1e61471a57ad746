"""benchmarks/train_throughput.py's GPU measurement (the training loop's own update under the paper's recipe, the
figures behind docs/experiment-design.md's GPU-hours), rehearsed on the CPU at the tiny size, and its FLOP count
against a hand computation."""

from __future__ import annotations

import json

import paper_cost
import pytest
import torch
import yaml
from helpers import REPO

from attention_geometry.training.loop import Trainer
from attention_geometry.training.measure import Timing, recipe_rows


def _tiny_paper_config(tmp_path):
    """A config of config/paper.yaml's recipe (group paper's overrides, the vision group's run overrides) at the
    tiny sizes and a batch of 2 micro-batches of 2; and the recipe as the paper config has it."""
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["training"]["groups"]
    recipe = paper["paper"]["settings"]["overrides"]
    tiny = {**recipe, "batch_size": 4, "per_device_batch_size": 2, "grad_accum": 2}
    vit = {**paper["vision"]["runs"][0]["overrides"], "num_layers": 1, "hidden_size": 32, "num_heads": 2}
    vit.update(intermediate_size=64, batch_size=4)
    groups = {
        "paper": {"settings": {"overrides": tiny}, "runs": [{"size": "tiny"}]},
        "vision": {"settings": {}, "runs": [{"size": "vit-tiny", "overrides": vit}]},
    }
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump({"training": {"groups": groups}}))
    return path, recipe


def test_the_recipe_measurement_runs_the_loops_update_on_the_cpu(tmp_path, monkeypatch):
    config, recipe = _tiny_paper_config(tmp_path)
    calls = []
    update = Trainer.update

    def counted(run, order, step, lam=0.0):
        calls.append((run.cfg.objective, step, run.h.grad_accum, run.h.precision, run.scaler is not None))
        return update(run, order, step, lam)

    monkeypatch.setattr(Trainer, "update", counted)
    timing = Timing(steps=2, warmup=1, block_len=32, pad_rows=0.5)
    rows = recipe_rows(
        ["tiny", "vit-tiny"],
        ["encoder", "decoder-paper", "decoder"],
        config,
        "paper",
        timing,
        torch.device("cpu"),
        1e12,
    )
    assert [(r["size"], r["objective"]) for r in rows] == [
        ("tiny", "encoder"),
        ("tiny", "decoder-paper"),
        ("tiny", "decoder"),
        ("vit-tiny", "classifier"),
    ]
    # three updates per run, the first untimed; the text runs under the recipe: fp16 with loss scaling, 2 x 2
    assert [c[:2] for c in calls] == [
        (o, s) for o in ("encoder", "decoder-paper", "decoder", "classifier") for s in (1, 2, 3)
    ]
    assert {c[2:] for c in calls[:9]} == {(2, "fp16", True)}
    for r in rows[:3]:
        assert r["recipe"].endswith("group paper") and r["precision"] == "fp16"
        assert (r["micro_batch"], r["grad_accum"], r["seq"]) == (2, 2, 32)
    assert rows[3]["recipe"].endswith("group vision") and rows[3]["seq"] == (32 // 4) ** 2 + 1
    for r in rows:
        assert len(r["ms_per_update_all"]) == 2 and r["ms_per_update"] > 0
        n_tokens = 4 * r["seq"]
        assert r["tokens_per_s"] == pytest.approx(n_tokens / r["ms_per_update"] * 1e3)
        assert r["mfu"] == pytest.approx(r["tflop_per_update"] / r["ms_per_update"] * 1e3)  # peak 1 TFLOP/s
    assert (recipe["precision"], recipe["grad_accum"], recipe["batch_size"]) == ("fp16", 8, 256)  # what was scaled


def test_paper_cost_counts_with_the_cost_model_and_keeps_the_measured_ms(capsys):
    """benchmarks/paper_cost.py's FLOPs are training.cost's (by hand here for bert-base at the paper's 256 x 512),
    and by default its ms per step are the measured ones (MS_PER_UPDATE), whatever the count."""
    d, i, L, V, n, B = 768, 3072, 12, 30522, 512, 256
    paper_cost.main([])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| bert-base | encoder |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    predicted = 0.15 * (n - 2) * B
    by_hand = 3 * (B * n * L * (2 * (4 * d * d + 2 * d * i) + 4 * n * d) + predicted * 2 * (d * d + d * V))
    assert float(cells[4]) == pytest.approx(by_hand / 1e12, abs=0.005)
    assert float(cells[6]) == paper_cost.MS_PER_UPDATE[("bert-base", "encoder")]
    assert float(cells[5].rstrip("%")) / 100 == pytest.approx(by_hand / 0.4118 / 989e12, abs=5e-4)


AGREES = {"one_run_vs_eager_row": {"one_run_ms": 10.5, "eager_row_ms": 10.0, "ratio": 1.05, "agrees": True}}


def _row(size: str, objective: str, path: str, capture: str, **values) -> dict:
    return {"size": size, "objective": objective, "batch_path": path, "capture": capture, **values}


def test_paper_cost_takes_the_best_measured_row_and_the_gain_of_packed_runs(tmp_path, capsys):
    doc = {
        "device": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0",
        "rows": [
            _row("bert-mini", "encoder", "host", "eager", mfu=0.02),
            _row("bert-mini", "encoder", "device", "eager", mfu=0.10),
            _row("bert-mini", "encoder", "device", "cuda-graphs", error="x"),
            _row("bert-mini", "encoder", "device", "compile", mfu=0.12),
            _row("vit-tiny", "classifier", "host", "eager", mfu=0.006),
            _row("vit-tiny", "classifier", "device", "eager", mfu=0.01),
            _row("bert-base", "encoder", "host", "eager", skipped="budget"),
        ],
        "shared_summary": [
            {"size": "vit-tiny", "objective": "classifier", "gain_over_one_run": {"4": 3.0, "8": 5.0}, **AGREES},
            {"size": "bert-mini", "objective": "encoder", "gain_over_one_run": {"8": 1.5}, **AGREES},
        ],
    }
    alone = paper_cost.measured_mfu(doc)
    assert alone == {
        ("bert-mini", "encoder"): (0.12, "device/compile"),
        ("vit-tiny", "classifier"): (0.01, "device/eager"),
    }
    packed = paper_cost.measured_mfu(doc, {"vit-tiny": 6, "bert-mini": 1})
    assert packed[("vit-tiny", "classifier")] == (pytest.approx(0.03), "device/eager, 4 runs at once x3")
    assert packed[("bert-mini", "encoder")] == alone[("bert-mini", "encoder")]
    assert paper_cost.measured_mfu(doc, {"vit-tiny": 8})[("vit-tiny", "classifier")][0] == pytest.approx(0.05)
    # issue 57.6: a round of one run that disagrees with its eager row (or was not compared) gives no gain
    for agreement in ({"one_run_ms": 389.7, "eager_row_ms": 15.5, "ratio": 25.1, "agrees": False}, None):
        summary = [{**doc["shared_summary"][0], "one_run_vs_eager_row": agreement}]
        refused = paper_cost.measured_mfu({**doc, "shared_summary": summary}, {"vit-tiny": 8})
        assert refused[("vit-tiny", "classifier")][0] == 0.01 and "refused" in refused[("vit-tiny", "classifier")][1]
    # a varlen row counts only where the document's check of the varlen kernel passed
    faster = _row("bert-mini", "encoder", "device", "eager", padded_attention="varlen", mfu=0.2)
    for check, want in (({"ok": False}, (0.12, "device/compile")), ({"ok": True}, (0.2, "device/eager/varlen"))):
        with_varlen = {**doc, "rows": [*doc["rows"], faster], "varlen_check": check}
        assert paper_cost.measured_mfu(with_varlen)[("bert-mini", "encoder")] == want
    assert paper_cost.measured_mfu({**doc, "rows": [*doc["rows"], faster]}) == alone

    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    paper_cost.main(["--measured", str(path)])
    out = capsys.readouterr().out
    assert "bert-mini encoder: 12.0% (device/compile)" in out and "vit-tiny classifier: 1.0% (device/eager)" in out
    # a run's GPU-hours at 12 %: its FLOPs (steps x (batch x n x per-token + evaluation)) over 12 % of the peak
    line = next(x for x in out.splitlines() if x.startswith("| bert-mini | encoder |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[5] == "12.0%" and float(cells[6]) == pytest.approx(float(cells[4]) / 0.12 / 989 * 1e3, rel=2e-3)
