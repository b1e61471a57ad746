"""benchmarks/train_throughput.py's GPU measurement (the training loop's own update under the paper's recipe, the
figures behind docs/experiment-design.md's GPU-hours), rehearsed on the CPU at the tiny size, and its FLOP count
against a hand computation."""

from __future__ import annotations

import json

import paper_cost
import pytest
import torch
import train_throughput as tt
import yaml
from helpers import REPO

from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.loop import Trainer
from attention_geometry.training.models import build_model


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
    timing = tt.Timing(steps=2, warmup=1, block_len=32, pad_rows=0.5)
    rows = tt.recipe_rows(
        ["tiny", "vit-tiny"], ["encoder", "decoder-paper", "decoder"], config, "paper", timing, torch.device("cpu"), 1.0
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
        assert r["mfu_paper_cost"] == pytest.approx(r["tflop_per_update_paper_cost"] / r["ms_per_update"] * 1e3)
        assert 0.9 < r["tflop_per_update"] / r["tflop_per_update_paper_cost"] < 1.1
    assert (recipe["precision"], recipe["grad_accum"], recipe["batch_size"]) == ("fp16", 8, 256)  # what was scaled


@pytest.mark.parametrize("objective", ["encoder", "decoder-paper", "decoder"])
def test_the_flop_count_by_hand(objective):
    """bert-mini at the paper's 32 x 512 x 8: parameters outside the embeddings counted from the architecture, the
    update's model FLOPs from the formula in the module's docstring, and paper_cost's count beside it."""
    h = resolve_hyper("bert-mini", {"vocab_size": 30522, "seq_len": 512, "batch_size": 256, "grad_accum": 8})
    d, i, L, V, n, B = 256, 1024, 4, 30522, 512, 256
    layer = 4 * (d * d + d) + (d * i + i) + (i * d + d) + 2 * 2 * d  # q k v o, FFN in, out, two LayerNorms
    head = (d * d + d) + 2 * d + V  # the MLM transform, its LayerNorm, the vocabulary bias (its weight is tied)
    model = build_model("bert-mini", objective, "standard", 0, _hyper=h)
    n_body = tt.body_params(model)
    assert n_body == L * layer + head
    T = B * n
    n_pred = round(0.15 * B * (n - 2)) if objective != "decoder" else B * (n - 1)
    ours, cost = tt.update_flops(h, objective, n_body, n)
    assert ours == 6 * n_body * T + 12 * L * d * n * T + 6 * d * V * n_pred
    p = 0.15 * (n - 2) / n if objective != "decoder" else (n - 1) / n
    by_hand = T * (6 * L * (4 * d * d + 2 * d * i + 9 * d + i) + 12 * L * n * d + p * 6 * (d * d + d * V))
    assert cost == pytest.approx(by_hand)
    assert cost == pytest.approx(T * sum(paper_cost.flops_per_token(h, objective, n).values()))


def _row(size: str, objective: str, path: str, capture: str, **values) -> dict:
    return {"size": size, "objective": objective, "batch_path": path, "capture": capture, **values}


def test_paper_cost_takes_the_best_measured_row_and_the_gain_of_packed_runs(tmp_path, capsys):
    doc = {
        "device": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0",
        "rows": [
            _row("bert-mini", "encoder", "host", "eager", mfu_paper_cost=0.02),
            _row("bert-mini", "encoder", "device", "eager", mfu_paper_cost=0.10),
            _row("bert-mini", "encoder", "device", "cuda-graphs", error="x"),
            _row("bert-mini", "encoder", "device", "compile", mfu_paper_cost=0.12),
            _row("vit-tiny", "classifier", "host", "eager", mfu_paper_cost=0.006),
            _row("vit-tiny", "classifier", "device", "eager", mfu_paper_cost=0.01),
            _row("bert-base", "encoder", "host", "eager", skipped="budget"),
        ],
        "shared_summary": [
            {"size": "vit-tiny", "objective": "classifier", "gain_over_one_run": {"4": 3.0, "8": 5.0}},
            {"size": "bert-mini", "objective": "encoder", "gain_over_one_run": {"8": 1.5}},
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
    # a varlen row counts only where the document's check of the varlen kernel passed
    faster = _row("bert-mini", "encoder", "device", "eager", padded_attention="varlen", mfu_paper_cost=0.2)
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
    assert cells[5] == "12.0%" and float(cells[6]) == pytest.approx(186.2 * 0.0230 / 0.12, rel=2e-3)
