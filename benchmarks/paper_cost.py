"""GPU-hours of a training config from model FLOPs (no GPU needed): the estimate behind docs/experiment-design.md,
"Paper scale", for config/paper.yaml and config/paper-first-look.yaml.

    python benchmarks/paper_cost.py [--config config/paper.yaml] [--peak-tflops 989]
        [--mfu bert-base=0.30 --mfu bert-large/decoder=0.25 ...] [--measured gpu_measure.json]

Every run of the config's expansion (the workflow's own, attention_geometry.workflow.runs.expand_runs), its
hyperparameters resolved as the trainer resolves them (size, overrides). Model FLOPs per token, counted as for
MFU (matrix products only, backward = 2 x forward):

    6 N  +  12 L n h  +  p x 6 (h^2 + h V)

- N: the transformer layers' parameters, L (4 h^2 + 2 h i + 9 h + i), embeddings excluded;
- 12 L n h: attention scores and the weighted sum (Q K^T and P V), in full for a causal mask too (an upper
  bound for the decoders: a causal kernel skips about half);
- the output layer (the MLM transform and the vocabulary projection) at the positions that have a label only,
  as the training loop computes it: p = 0.15 x (n - 2) / n for `encoder` and `decoder-paper` (the masking
  collator's 15 % of a full document's non-special tokens), (n - 1) / n for `decoder` (every next token);
  for documents shorter than n (a padded Jigsaw comment) fewer: the figures are upper bounds there.
  A ViT classifier's head (h x classes at [CLS]) is left out (under 0.1 %).

Tokens per step: batch_size x n, padding included (a padded row costs as much as a full one). Plus the held-out
evaluation: eval_blocks x n tokens forward (1/3 of a training token) every eval_every steps. GPU-hours =
FLOPs / (MFU x peak). The MFUs (MFU, per size and objective) are measured: one H200, 2026-12-04,
`benchmarks/train_throughput.py --device cuda` (the training loop's own update under config/paper.yaml's recipe,
eager, on random data of its shapes; its MFU(cost) column, i.e. against this file's FLOP count, so that the ms
per step below are the measured ones). --mfu SIZE=F sets every objective of a size, SIZE/OBJECTIVE=F one.
--measured PATH: the MFUs of benchmarks/gpu_measure.py's JSON instead (measured_mfu): per size and objective the
fastest row (host or device path, any capture; a `padded_attention: varlen` row only where the document's
varlen_check passed) by its MFU(cost); for a size the config packs
(training.runs_per_job: k runs per job), that MFU times the gain of k runs sharing the device over one (its rounds
of shared runs; the nearest measured k at or below the config's), since k runs then take one GPU's time together.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import yaml

from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.workflow.runs import expand_runs

REPO = Path(__file__).resolve().parents[1]
# measured on one H200, 2026-12-04 (see the docstring): median ms per update 186 / 181 / 219 (bert-mini encoder,
# decoder-paper, decoder), 412 / 408 / 464 (bert-base), 924 / 934 / 1033 (bert-large), 48 (vit-tiny)
MFU = {
    ("bert-mini", "encoder"): 0.0230,
    ("bert-mini", "decoder-paper"): 0.0236,
    ("bert-mini", "decoder"): 0.0439,
    ("bert-base", "encoder"): 0.1894,
    ("bert-base", "decoder-paper"): 0.1913,
    ("bert-base", "decoder"): 0.2030,
    ("bert-large", "encoder"): 0.2859,
    ("bert-large", "decoder-paper"): 0.2829,
    ("bert-large", "decoder"): 0.2768,
    ("vit-tiny", "classifier"): 0.0059,
}
VOCAB = 30522  # bert-base-uncased's tokenizer, every text corpus of the paper configs
MLM_P = 0.15


def measured_mfu(doc: dict, runs_per_job: dict | None = None) -> dict[tuple[str, str], tuple[float, str]]:
    """(size, objective) -> (MFU against this file's FLOP count, where it comes from) from a gpu_measure.py JSON
    document (module docstring, --measured): the best row without an error (a `padded_attention: varlen` row only
    where the document's varlen_check passed), and for a size packed k runs per job the gain of its nearest measured
    round at or below k over one run alone."""
    from gpu_measure import variant

    varlen_ok = bool(doc.get("varlen_check", {}).get("ok"))
    best: dict[tuple[str, str], tuple[float, str]] = {}
    for r in doc.get("rows", []):
        mfu = r.get("mfu_paper_cost")
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
            best[key] = (best[key][0] * gains[n], f"{best[key][1]}, {n} runs at once x{gains[n]:g}")
    return best


def flops_per_token(h, objective: str, n: int) -> dict[str, float]:
    """Training FLOPs per token: layers, attention, output layer (see the module's docstring)."""
    d, i, layers = h.hidden_size, h.intermediate_size, h.num_layers
    n_params = layers * (4 * d * d + 2 * d * i + 9 * d + i)
    out = {"layers": 6.0 * n_params, "attention": 12.0 * layers * n * d, "output": 0.0}
    if objective in ("encoder", "decoder-paper"):
        out["output"] = MLM_P * (n - 2) / n * 6 * (d * d + d * VOCAB)
    elif objective == "decoder":
        out["output"] = (n - 1) / n * 6 * (d * d + d * VOCAB)
    return out


def run_cost(run, cfg: dict, peak: float, mfu: dict[tuple[str, str], float]) -> dict:
    settings = run.settings
    h = resolve_hyper(run.size, settings.get("overrides") or {})
    if run.objective == "classifier":
        image = (cfg.get("images") or {})[run.dataset].get("image_size") or 32
        n = (image // h.patch_size) ** 2 + 1
    else:
        n = h.seq_len or cfg["corpora"][run.dataset]["block_len"]
    per_token = flops_per_token(h, run.objective, n)
    step = h.batch_size * n * sum(per_token.values())
    steps = settings["max_steps"]
    every = settings.get("eval_every") or steps
    evaluation = settings.get("eval_blocks", 0) * n * sum(per_token.values()) / 3 / every
    total = steps * (step + evaluation)
    rate = mfu[(run.size, run.objective)] * peak * 1e12
    return {
        "per_token": per_token,
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
    mfu = dict(MFU)
    if args.measured:
        doc = json.loads(Path(args.measured).read_text())
        found = measured_mfu(doc, cfg["training"].get("runs_per_job"))
        print(f"MFUs measured on {doc.get('device')} (torch {doc.get('torch')}), {args.measured}:")
        for key, (value, where) in sorted(found.items()):
            print(f"  {key[0]} {key[1]}: {value:.1%} ({where})")
        missing = sorted(set(MFU) - set(found))
        if missing:
            print(f"  not measured there, kept from the H200 of 2026-12-04: {missing}")
        mfu.update({key: value for key, (value, _) in found.items()})
        print()
    for item in args.mfu:
        key, _, value = item.partition("=")
        size, _, objective = key.partition("/")
        for cell in [(size, objective)] if objective else [c for c in MFU if c[0] == size]:
            mfu[cell] = float(value)
    runs, _ = expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})
    cells: dict[tuple[str, str], list] = defaultdict(list)
    for run in runs.values():
        cells[(run.size, run.objective)].append(run_cost(run, cfg, args.peak_tflops, mfu))
    print(f"{args.config}: {len(runs)} training runs, peak {args.peak_tflops:g} TFLOP/s")
    print()
    print(
        "| size | objective | runs | M FLOPs per token: layers + attention + output | TFLOP per step "
        "| MFU | ms per step | GPU-h per run | GPU-h |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    total_runs, total_h = 0, 0.0
    for (size, objective), costs in sorted(cells.items()):
        c = costs[0]
        hours = sum(x["gpu_h"] for x in costs)
        per_run = {round(x["gpu_h"], 2) for x in costs}
        pt = c["per_token"]
        parts = " + ".join(f"{pt[k] / 1e6:.1f}" for k in ("layers", "attention", "output"))
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
