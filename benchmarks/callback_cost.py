"""Time per call of the SymmetryCallback's measurement (tools.callback.symmetry_logs) on BERT-base shapes.

    python benchmarks/callback_cost.py [--repeats 5] [--device cpu] [--threads N]

A random BertForMaskedLM from BertConfig() (12 layers, width 768, 12 heads; no download). One call reads the 24
q/k weights and forms twelve 768 x 768 float64 matrices (2 x 768^3 multiply-adds each) and their scores; no
forward pass. Prints the median and the minimum over the repeats (after one warm-up call), and the cost as a share
of a training run that measures every N steps at a given step time (--step-seconds, --every).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import BertConfig, BertForMaskedLM

from attention_geometry.tools.callback import symmetry_logs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--every", type=int, default=100, help="callback period, for the overhead line")
    ap.add_argument("--step-seconds", type=float, default=0.25, help="one training step's time, for the overhead")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig()).to(a.device)
    symmetry_logs(model)  # warm-up
    times = []
    for _ in range(a.repeats):
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logs = symmetry_logs(model)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(
        f"symmetry_logs on BERT-base shapes ({a.device}, {torch.get_num_threads()} threads, {len(logs)} values): "
        f"median {med:.3f} s, min {min(times):.3f} s over {a.repeats} calls"
    )
    print(
        f"overhead every {a.every} steps at {a.step_seconds} s/step: "
        f"{100 * med / (a.every * a.step_seconds):.2f}% of training time"
    )


if __name__ == "__main__":
    main()
