"""Bytes a hub model's scoring transfers: range reads (headers + q/k tensors) vs the checkpoint.

Writes a random Llama-shaped checkpoint (benchmarks/score_memory.py's writer; default 8 layers, width 2048,
32 query / 8 key-value heads, MLP 8192, vocabulary 32000: 0.62 B parameters, 1.23 GB bf16 in sharded
safetensors) into a temporary folder, serves it from a local stand-in for the hub (tests/fakehub.py, which
counts the body bytes it sends), and then, through huggingface_hub pointed at that server:

1. scores the hub id (`score_model("org/synthetic")`: range requests),
2. runs `prefetch-qk` on it and scores the written folder offline,
3. scores the local folder directly (the reference),

and prints the bytes sent per step, the q/k-subset's size, the wall times, and checks that all three score
tables agree to 1e-6 (n_params included).

    .venv/bin/python benchmarks/hub_bytes.py                  # the ~1.2 GB checkpoint
    .venv/bin/python benchmarks/hub_bytes.py --layers 2 --width 256 --heads 4 --kv-heads 2 \\
        --intermediate 512 --vocab 1000                       # a quick check that it runs
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
os.environ["HF_HUB_OFFLINE"] = "0"
os.environ.pop("TRANSFORMERS_OFFLINE", None)
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (
        ("layers", 8),
        ("width", 2048),
        ("heads", 32),
        ("kv-heads", 8),
        ("intermediate", 8192),
        ("vocab", 32000),
        ("layers-per-shard", 2),
        ("threads", 1),
    ):
        ap.add_argument(f"--{flag}", type=int, default=default)
    a = ap.parse_args()

    import torch

    torch.set_num_threads(a.threads)
    import fakehub
    from huggingface_hub import constants
    from score_memory import write_checkpoint

    from attention_geometry.scoring.scorer import score_model
    from attention_geometry.weights.prefetch import prefetch_qk

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folder = tmp / "synthetic"
        folder.mkdir()
        n_params = write_checkpoint(folder, a)
        weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        print(
            f"checkpoint: {n_params / 1e9:.3f} B parameters, {weights} bytes of safetensors in "
            f"{len(list(folder.glob('*.safetensors')))} shards"
        )
        with fakehub.serve({"org/synthetic": folder}) as (hub, url):
            constants.ENDPOINT = url
            constants.HUGGINGFACE_CO_URL_TEMPLATE = url + "/{repo_id}/resolve/{revision}/{filename}"
            constants.HF_HUB_OFFLINE = False
            constants.HF_HUB_CACHE = str(tmp / "hub-cache")
            rows = []
            for step in ("score the hub id", "prefetch-qk"):
                hub.sent.clear()
                t0 = time.perf_counter()
                if step == "prefetch-qk":
                    done = prefetch_qk("org/synthetic", tmp / "hub-qk", progress=False)
                else:
                    by_range = score_model("org/synthetic", progress=False, name="x")
                wall = time.perf_counter() - t0
                w = sum(v for k, v in hub.sent.items() if k.endswith(".safetensors"))
                rows.append((step, hub.total_sent, w, wall))
        constants.HF_HUB_OFFLINE = True
        t0 = time.perf_counter()
        from_subset = score_model(tmp / "hub-qk", progress=False, name="x")
        t_subset = time.perf_counter() - t0
        t0 = time.perf_counter()
        local = score_model(folder, progress=False, name="x")
        t_local = time.perf_counter() - t0
        for other in (by_range, from_subset):
            same = local.drop(columns=["symmetry", "directionality"]).equals(
                other.drop(columns=["symmetry", "directionality"])
            )
            diff = max((local[c] - other[c]).abs().max() for c in ("symmetry", "directionality"))
            assert same and diff <= 1e-6, (same, diff)
        print("| step | bytes sent (all) | of which weight files | share of the checkpoint | wall s |")
        print("|---|---|---|---|---|")
        for step, total, w, wall in rows:
            print(f"| {step} | {total} | {w} | {w / weights:.2%} | {wall:.1f} |")
        print(
            f"q/k subset written by prefetch-qk: {done['bytes']} bytes ({done['tensors']} tensors); "
            f"scored offline in {t_subset:.1f} s; the local checkpoint scored in {t_local:.1f} s; "
            "all three tables agree to 1e-6"
        )


if __name__ == "__main__":
    main()
