"""benchmarks/gpu_measure.py (the host and device paths side by side, the measurement benchmarks/gpu_measure.sh runs
on a lent GPU) rehearsed on the CPU at the tiny sizes, and the script's guard without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gpu_measure as gm
import pytest
import torch
from helpers import REPO
from test_train_throughput import _tiny_paper_config

from attention_geometry.training.hyper import resolve_hyper


def test_the_plan_puts_both_paths_of_every_size_first_then_the_captures():
    rows = gm.plan(["bert-mini", "vit-tiny"], ["encoder", "decoder"], ["cuda-graphs", "compile"])
    assert rows[:6] == [
        ("bert-mini", "encoder", "host", "eager"),
        ("bert-mini", "encoder", "device", "eager"),
        ("bert-mini", "decoder", "host", "eager"),
        ("bert-mini", "decoder", "device", "eager"),
        ("vit-tiny", "classifier", "host", "eager"),
        ("vit-tiny", "classifier", "device", "eager"),
    ]
    assert rows[6:] == [
        ("bert-mini", "encoder", "device", "cuda-graphs"),
        ("vit-tiny", "classifier", "device", "cuda-graphs"),
        ("bert-mini", "encoder", "device", "compile"),
        ("vit-tiny", "classifier", "device", "compile"),
        ("bert-mini", "decoder", "device", "cuda-graphs"),
        ("bert-mini", "decoder", "device", "compile"),
    ]


def test_the_passes_fit_the_memory():
    """The recipe's update of 256 x 512 in fp16: bert-mini in one pass; bert-large in 2 on an H200 (~139 GiB free),
    in 4 on an H100 (~78 GiB)."""
    recipe = dict(batch_size=256, grad_accum=8, precision="fp16", vocab_size=30522, seq_len=512)
    gib = 2**30
    mini, large = (resolve_hyper(s, recipe) for s in ("bert-mini", "bert-large"))
    assert gm.suggest_passes(mini, "encoder", 512, 78 * gib) == 1
    assert gm.suggest_passes(large, "encoder", 512, 139 * gib) == 2
    assert gm.suggest_passes(large, "encoder", 512, 78 * gib) == 4
    assert gm.suggest_passes(large, "encoder", 512, float("inf")) == 1


def test_the_rehearsal_measures_both_paths_and_records_what_fails(tmp_path, capsys):
    config, _ = _tiny_paper_config(tmp_path)
    out = tmp_path / "m.json"
    argv = ["--device", "cpu", "--sizes", "tiny", "vit-tiny", "--objectives", "encoder", "decoder"]
    argv += ["--captures", "cuda-graphs", "--steps", "2", "--warmup", "1", "--block-len", "32", "--peak-tflops", "1"]
    assert gm.main([*argv, "--config", str(config), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    rows = got["rows"]
    assert [(r["size"], r["objective"], r["batch_path"], r["capture"]) for r in rows] == gm.plan(
        ["tiny", "vit-tiny"], ["encoder", "decoder"], ["cuda-graphs"]
    )
    for r in rows[:6]:  # the host and device paths, eager
        assert r["precision"] == ("fp16" if r["size"] == "tiny" else "fp32") and r["device_passes"] == 1
        assert len(r["ms_per_update_all"]) == 2 and r["ms_per_update"] > 0 and len(r["losses"]) == 3
        assert r["mfu"] == pytest.approx(r["tflop_per_update"] / r["ms_per_update"] * 1e3)  # peak 1 TFLOP/s
        assert r["syncs_per_update"] is None  # counted on CUDA only
    # no random masks: the clean decoder's and the ViT's first update sees the same batch on both paths
    for i in (2, 4):
        assert rows[i + 1]["losses"][0] == pytest.approx(rows[i]["losses"][0], rel=1e-3)
    for r in rows[6:]:  # CUDA graphs need CUDA: the row records why, the rest still runs
        assert r["error"].startswith("UserError: overrides.capture: cuda-graphs needs a CUDA device")
    summary = {(s["size"], s["objective"]): s for s in got["summary"]}
    assert set(summary[("tiny", "encoder")]["speedup_over_host"]) == {"device/eager"}
    assert "speed-up over the host path" in capsys.readouterr().out


def test_a_spent_budget_skips_the_rows(tmp_path):
    config, _ = _tiny_paper_config(tmp_path)
    out = tmp_path / "m.json"
    argv = ["--device", "cpu", "--sizes", "tiny", "--objectives", "encoder", "--captures", "--budget-s", "0"]
    assert gm.main([*argv, "--config", str(config), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 and all(r["skipped"].startswith("budget of 0 s spent") for r in rows)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the guard is for machines without CUDA")
def test_the_script_without_cuda_runs_nothing(tmp_path):
    script = REPO / "benchmarks" / "gpu_measure.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    env = {**os.environ, "OUT": str(tmp_path / "o"), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip().startswith("gpu_measure: no CUDA device here")
    assert not (tmp_path / "o").exists()
