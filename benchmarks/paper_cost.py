"""GPU-hours of a training config from model FLOPs (no GPU needed): the estimate behind docs/experiment-design.md,
"Paper scale", for config/paper.yaml and config/paper-first-look.yaml.

    python benchmarks/paper_cost.py [--config config/paper.yaml] [--peak-tflops 989]
        [--mfu bert-base=0.30 --mfu bert-large/decoder=0.25 ...] [--measured gpu_measure.json]

Every run of the config's expansion (the workflow's own, attention_geometry.workflow.runs.expand_runs), its
hyperparameters resolved as the trainer resolves them (size, overrides). Model FLOPs per update: the one cost model
of the package (attention_geometry.training.cost.update_flops_parts: the layers' maps, the attention products over
all n keys, the output layer at the positions that have a label, a ViT's patch embedding; forward and backward;
checked against torch's FlopCounterMode in tests/test_cost.py). For documents shorter than n (a padded Jigsaw
comment) a padded row costs as much as a full one: the figures are upper bounds there. Plus the held-out
evaluation: eval_blocks x n tokens forward (1/3 of a training token) every eval_every steps.

The speed: by default the ms per update measured on one H200, 2026-12-04 (MS_PER_UPDATE: `benchmarks/
train_throughput.py --device cuda`, the training loop's own update under config/paper.yaml's recipe, eager, on
random data of its shapes; the medians of docs/experiment-design.md's table), so the MFU shown is that time against
the count and --peak-tflops. --mfu SIZE=F sets every objective of a size, SIZE/OBJECTIVE=F one: the ms per step then
follow from FLOPs / (MFU x peak). --measured PATH: the MFUs of benchmarks/gpu_measure.py's JSON (measured_mfu): per
size and objective the fastest row (host or device path, any capture; a `padded_attention: varlen` row only where
the document's varlen_check passed) by its MFU; for a size the config packs (training.runs_per_job: k runs per job),
that MFU times the gain of k runs sharing the device over one (its rounds of shared runs; the nearest measured k at
or below the config's), since k runs then take one GPU's time together, but only where the round of one run agreed
with the eager row (gpu_measure's shared_summary: `one_run_vs_eager_row.agrees`); otherwise the gain is refused and
said so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import yaml

from attention_geometry.training.cost import update_flops_parts
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.measure_device import variant
from attention_geometry.workflow.runs import expand_runs

REPO = Path(__file__).resolve().parents[1]
# measured on one H200, 2026-12-04 (the docstring): median ms per update under config/paper.yaml's recipe
MS_PER_UPDATE = {
    ("bert-mini", "encoder"): 186.2,
    ("bert-mini", "decoder-paper"): 181.1,
    ("bert-mini", "decoder"): 218.5,
    ("bert-base", "encoder"): 411.8,
    ("bert-base", "decoder-paper"): 407.7,
    ("bert-base", "decoder"): 464.1,
    ("bert-large", "encoder"): 924.2,
    ("bert-large", "decoder-paper"): 934.2,
    ("bert-large", "decoder"): 1033.4,
    ("vit-tiny", "classifier"): 48.2,
}
VOCAB = 30522  # bert-base-uncased's tokenizer, every text corpus of the paper configs


def measured_mfu(doc: dict, runs_per_job: dict | None = None) -> dict[tuple[str, str], tuple[float, str]]:
    """(size, objective) -> (MFU, where it comes from) from a gpu_measure.py JSON document (module docstring,
    --measured): the best row without an error (a `padded_attention: varlen` row only where the document's
    varlen_check passed), and for a size packed k runs per job the gain of its nearest measured round at or below k
    over one run alone, where that size's round of one run agreed with its eager row (else the gain is refused)."""
    varlen_ok = bool(doc.get("varlen_check", {}).get("ok"))
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for r in doc.get("rows", []):
        mfu = r.get("mfu")
        key = (r["size"], r["objective"])
        if r.get("padded_attention") == "varlen" and not varlen_ok:
            continue
        if mfu and (key not in best or mfu > best[key][0]):
            best[key] = (mfu, variant(r))
    for s in doc.get("shared_summary", []):
        k = int((runs_per_job or {}).get(s["size"], 1))
        gains = {int(n): g for n, g in s.get("gain_over_one_run", {}).items() if int(n) <= k}
        key = (s["size"], s["objective"])
        if k > 1 and gains and key in best:
            n = max(gains)
            if not (s.get("one_run_vs_eager_row") or {}).get("agrees"):
                best[key] = (
                    best[key][0],
                    f"{best[key][1]}; gain of {n} runs at once refused: one run alone did not agree with its eager row",
                )
                continue
            best[key] = (best[key][0] * gains[n], f"{best[key][1]}, {n} runs at once x{gains[n]:g}")
    return best


def run_shape(run, cfg: dict):
    """(Hyper with the corpus's vocabulary, positions n) of a run of the config."""
    h = resolve_hyper(run.size, run.settings.get("overrides") or {})
    if run.objective == "classifier":
        image = (cfg.get("images") or {})[run.dataset].get("image_size") or 32
        return h, (image // h.patch_size) ** 2 + 1
    n = h.seq_len or cfg["corpora"][run.dataset]["block_len"]
    return dataclasses.replace(h, vocab_size=h.vocab_size or VOCAB, seq_len=n), n


def run_cost(run, cfg: dict, peak: float, mfu: dict[tuple[str, str], float]) -> dict:
    settings = run.settings
    h, n = run_shape(run, cfg)
    parts = update_flops_parts(h, run.objective, n)
    step = sum(parts.values())
    steps = settings["max_steps"]
    every = settings.get("eval_every") or steps
    evaluation = settings.get("eval_blocks", 0) * n * step / (h.batch_size * n) / 3 / every
    total = steps * (step + evaluation)
    rate = mfu[(run.size, run.objective)] * peak * 1e12
    return {
        "per_token": {k: v / (h.batch_size * n) for k, v in parts.items()},
        "n": n,
        "step_tflop": step / 1e12,
        "eval_share": evaluation / step,
        "ms_per_step": step / rate * 1e3,
        "gpu_h": total / rate / 3600,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "config" / "paper.yaml"))
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="dense fp16/bf16 peak (H100 SXM, H200: 989)")
    ap.add_argument("--mfu", action="append", default=[], metavar="SIZE[/OBJECTIVE]=FRACTION")
    ap.add_argument("--measured", metavar="JSON", help="MFUs from benchmarks/gpu_measure.py's JSON (measured_mfu)")
    args = ap.parse_args(argv)
    cfg = yaml.safe_load(Path(args.config).read_text())
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    mfu = {}  # by default the MFU of the measured ms per update (MS_PER_UPDATE) at this count and peak
    for run in runs.values():
        cell = (run.size, run.objective)
        if cell in MS_PER_UPDATE and cell not in mfu:
            h, n = run_shape(run, cfg)
            step = sum(update_flops_parts(h, run.objective, n).values())
            mfu[cell] = step / (MS_PER_UPDATE[cell] / 1e3) / (args.peak_tflops * 1e12)
    if args.measured:
        doc = json.loads(Path(args.measured).read_text())
        found = measured_mfu(doc, cfg["training"].get("runs_per_job"))
        print(f"MFUs measured on {doc.get('device')} (torch {doc.get('torch')}), {args.measured}:")
        for key, (value, where) in sorted(found.items()):
            print(f"  {key[0]} {key[1]}: {value:.1%} ({where})")
        missing = sorted(set(MS_PER_UPDATE) - set(found))
        if missing:
            print(f"  not measured there, kept from the H200 of 2026-12-04: {missing}")
        mfu.update({key: value for key, (value, _) in found.items()})
        print()
    for item in args.mfu:
        key, _, value = item.partition("=")
        size, _, objective = key.partition("/")
        for cell in [(size, objective)] if objective else [c for c in MS_PER_UPDATE if c[0] == size]:
            mfu[cell] = float(value)
    unknown = sorted({(r.size, r.objective) for r in runs.values()} - set(mfu))
    if unknown:
        raise SystemExit(f"error: no measured speed for {unknown}: give --mfu SIZE/OBJECTIVE=F or --measured JSON")
    cells: dict[tuple[str, str], list] = defaultdict(list)
    for run in runs.values():
        cells[(run.size, run.objective)].append(run_cost(run, cfg, args.peak_tflops, mfu))
    print(f"{args.config}: {len(runs)} training runs, peak {args.peak_tflops:g} TFLOP/s")
    print()
    print(
        "| size | objective | runs | M FLOPs per token: layers + attention + output (+ patches) | TFLOP per step "
        "| MFU | ms per step | GPU-h per run | GPU-h |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    total_runs, total_h = 0, 0.0
    for (size, objective), costs in sorted(cells.items()):
        c = costs[0]
        hours = sum(x["gpu_h"] for x in costs)
        per_run = {round(x["gpu_h"], 2) for x in costs}
        pt = c["per_token"]
        parts = " + ".join(
            f"{pt[k] / 1e6:.1f}" if pt[k] >= 5e4 else f"{pt[k] / 1e6:.3f}"
            for k in ("layers", "attention", "output", "patches")
            if pt[k]
        )
        util = mfu[(size, objective)]
        print(
            f"| {size} | {objective} | {len(costs)} | {parts} = {sum(pt.values()) / 1e6:.1f} | {c['step_tflop']:.2f} "
            f"| {util:.1%} | {c['ms_per_step']:.1f} | {'/'.join(f'{p:.2f}' for p in sorted(per_run))} "
            f"| {hours:.1f} |"
        )
        total_runs += len(costs)
        total_h += hours
    print(f"| **total** | | **{total_runs}** | | | | | | **{total_h:,.0f}** |")


if __name__ == "__main__":
    main()
