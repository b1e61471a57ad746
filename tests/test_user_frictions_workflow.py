"""What a new user met in the workflow, each fixed and checked here: training jobs' memory from the model's size
(the SLURM profile asked 64 GB for every training job of the paper config, bert-mini and ViT-tiny included)."""

from __future__ import annotations

from helpers import validated_config

from attention_geometry.training.launch import train_mem_mb
from attention_geometry.workflow.runs import expand_runs


def test_training_memory_follows_the_model_size():
    sizes = {s: train_mem_mb(s, None, "cuda") for s in ("vit-tiny", "bert-mini", "bert-base", "bert-large")}
    assert sizes["vit-tiny"] <= 5000 and sizes["bert-mini"] <= 5000
    assert sizes["bert-mini"] < sizes["bert-base"] < sizes["bert-large"] <= 20000
    assert train_mem_mb("bert-mini", None, "cpu") > sizes["bert-mini"]  # the activations live in host memory
    assert train_mem_mb("bert-large", None, "cuda", processes=4) > sizes["bert-large"]
    assert train_mem_mb("bert-large", None, "cuda", mem_mb=1234) == 1234  # a configured training.mem_mb wins


def test_paper_config_asks_each_run_its_own_memory():
    cfg = validated_config("paper.yaml")
    assert cfg["training"].get("mem_mb") is None
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    device = cfg["training"]["device"]
    asked = {r.size: train_mem_mb(r.size, r.settings.get("overrides"), device) for r in runs.values()}
    assert max(asked.values()) <= 20000, asked
    assert all(v <= 5000 for s, v in asked.items() if s in ("bert-mini", "vit-tiny")), asked
