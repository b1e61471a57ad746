"""Training throughput and MFU of the training loop's own update, ours against a plain loop on the CPU, and the
paper recipe's update on a GPU.

    python benchmarks/train_throughput.py [--steps 60] [--threads 1] [--precision fp32|bf16] [--compile]
        [--config config/config.yaml] [--group main]
    python benchmarks/train_throughput.py --device cuda [--size bert-base ...] [--objectives ...] [--json PATH]
        [--config config/paper.yaml] [--group paper] [--pad-rows 0.1] [--warmup 3] [--steps 10]
    python benchmarks/train_throughput.py --runs RUN_DIR ...

CPU (default): the model shape is the size and overrides (e.g. batch_size) of training group `--group` (default
`main`) of `--config` (default config/config.yaml), vocabulary and sequence from that group's corpus; without such
a group the tiny defaults (vocabulary 2048, sequence 64, batch 32). For each objective, tokens/s of
  - `stock`: a plain PyTorch loop over an unmodified BertForMaskedLM / BertLMHeadModel of the same size
    (model(input_ids, labels=...).loss: full-vocabulary logits at every position, the model's own loss),
    torch.optim.AdamW with its defaults (foreach), clip_grad_norm_ 1.0;
  - `ours`: attention_geometry.training.train() on a random corpus of the same shape (its whole loop: batch
    assembly, masking, lean forward with masked-only logits, fast cross-entropy, AdamW, clipping, loss
    bookkeeping), timed from its per-step loop time;
  their ratio, and the MFU of `ours`: model FLOPs per update (the one cost model,
  attention_geometry.training.cost.update_flops, checked against torch's FlopCounterMode in tests/test_cost.py) per
  second over the fp32 matrix-product peak measured on this CPU at --threads threads (cost.measured_cpu_peak), as
  every run's train.log gives it. With --compile also `ours+compile` (compile time reported separately).
CUDA (or --recipe on the CPU, a rehearsal: tests/test_train_throughput.py): ms per update, tokens/s, FLOPs and MFU
of each `--size` (default bert-base) under the recipe of `--config` (default config/paper.yaml) group `--group`
(default paper; a size it does not train, e.g. vit-tiny: the first group that does), on random data of its shapes:
attention_geometry.training.measure.recipe_rows (the loop's own update, built by the public driver loop.Trainer,
eager, timed between synchronizations; the median of --steps after --warmup). The peak: --peak-tflops, else the
card's dense bf16 peak by name (cost.GPU_PEAK_TFLOPS). --json PATH: the rows as JSON.
--runs RUN_DIR...: the same count and peak for finished training runs (the loop's s/step from train.log's `done:`
line, the shape from run.yaml); benchmarks/gpu_check.sh reports its runs with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from attention_geometry.training.cost import gpu_peak_flops, measured_cpu_peak, sequence_positions, update_flops
from attention_geometry.training.hyper import Hyper, resolve_hyper
from attention_geometry.training.loop import train
from attention_geometry.training.measure import Timing, recipe_rows, write_random_corpus
from attention_geometry.training.models import build_model
from attention_geometry.training.run_config import run_config_from_dict

REPO = Path(__file__).resolve().parents[1]


def cpu_shape(config_path: Path, group: str):
    """(size, overrides, vocab, seq_len, where) of training group `group` in the config, else the tiny
    defaults (vocabulary 2048, sequence 64)."""
    from attention_geometry.formats.files import read_yaml

    try:
        cfg = read_yaml(config_path, "config") or {}
        g = cfg["training"]["groups"][group]
        run = g["runs"][0]
        size = run["size"] if isinstance(run["size"], str) else run["size"][0]
        corpus_key = run["corpus"] if isinstance(run["corpus"], str) else run["corpus"][0]
        corpus = cfg["corpora"][corpus_key]
        vocab = int(corpus["tokenizer"]["vocab_size"])
        seq = int(corpus["block_len"])
        # per objective: the group's overrides, then those of the first run entry of that objective
        overrides = {}
        for objective in ("encoder", "decoder"):
            o = dict(g.get("settings", {}).get("overrides") or {})
            for entry in g["runs"]:
                objs = entry["objective"] if isinstance(entry["objective"], list) else [entry["objective"]]
                if objective in objs:
                    o.update(entry.get("overrides") or {})
                    break
            overrides[objective] = o
        return size, overrides, vocab, seq, f"{config_path} group {group}"
    except Exception as exc:  # noqa: BLE001 - any missing piece: the documented fallback
        return (
            "tiny",
            {"encoder": {}, "decoder": {}},
            2048,
            64,
            f"tiny defaults ({config_path} has no usable group {group!r}: {exc!r})",
        )


def _autocast(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def stock_loop(
    objective: str, h, steps: int, warmup: int, device: str = "cpu", precision: str = "fp32", size: str = "tiny"
) -> float:
    """Seconds per step of a plain loop over the unmodified model."""
    model = build_model(size, objective, "standard", 0, _hyper=h).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=h.lr, betas=tuple(h.betas), weight_decay=h.weight_decay)
    g = torch.Generator().manual_seed(0)
    B, L, V = h.batch_size, h.seq_len, h.vocab_size
    times = []
    for i in range(warmup + steps):
        ids = torch.randint(5, V, (B, L), generator=g)
        if objective == "encoder":
            sel = torch.rand(B, L, generator=g) < h.mlm_probability
            labels = torch.where(sel, ids, -100)
            ids = torch.where(sel, 4, ids)
        else:
            labels = ids
        t = time.perf_counter()
        with _autocast(precision):
            loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return float(np.median(times))


def ours(
    objective: str,
    corpus: Path,
    steps: int,
    threads: int,
    compile_: bool,
    tmp: Path,
    size: str = "tiny",
    overrides: dict | None = None,
    precision: str = "fp32",
) -> tuple[float, float]:
    """(seconds per step in the loop, total seconds incl. start-up) of train() on the random corpus."""
    cfg = run_config_from_dict(
        {
            "corpus": str(corpus),
            "size": size,
            "objective": objective,
            "init": "standard",
            "seed": 0,
            "max_steps": steps,
            "snapshot_steps": [],
            "eval_steps": [],
            "eval_blocks": 0,
            "state_every": None,
            "overrides": {
                **(overrides or {}),
                "capture": "compile" if compile_ else "eager",
                "warmup_steps": 10,
                "precision": precision,
            },
        }
    )
    out = tmp / f"{objective}-{int(compile_)}-{precision}"
    s = train(cfg, out, threads=threads, device="cpu", progress=False)
    return s["s_per_step"], s["seconds"]


def cpu_main(args) -> None:
    torch.set_num_threads(args.threads)
    size, per_objective, vocab, seq, where = cpu_shape(Path(args.config), args.group)
    hypers = {o: resolve_hyper(size, {**ov, "vocab_size": vocab, "seq_len": seq}) for o, ov in per_objective.items()}
    h = hypers["encoder"]
    tokens = h.batch_size * h.seq_len
    peak = measured_cpu_peak(args.threads)
    mfu = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = write_random_corpus(tmp / "corpus", vocab, seq)
        print(
            f"{size} ({h.num_layers} layers x {h.hidden_size}, {h.num_heads} heads, vocab {vocab}, seq {seq}, "
            f"batch {h.batch_size}; overrides {per_objective}; from {where}), {args.precision}, "
            f"{args.threads} thread(s), {args.steps} steps; tokens/s = batch x seq / s_per_step; load average at "
            f"start {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); fp32 matmul peak {peak / 1e9:.1f} GFLOP/s"
        )
        print(f"{'objective':<10}{'variant':<16}{'s/step':>9}{'tokens/s':>11}{'vs stock':>10}{'MFU':>8}")
        for objective in ("encoder", "decoder"):
            h, overrides = hypers[objective], per_objective[objective]
            flops = update_flops(h, objective, h.seq_len)
            base = stock_loop(objective, h, args.steps, 3, precision=args.precision, size=size)
            print(f"{objective:<10}{'stock':<16}{base:9.4f}{tokens / base:11.0f}{1.0:10.2f}{flops / base / peak:8.1%}")
            per, _ = ours(objective, corpus, args.steps, args.threads, False, tmp, size, overrides, args.precision)
            mfu[objective] = flops / per / peak
            print(f"{objective:<10}{'ours':<16}{per:9.4f}{tokens / per:11.0f}{base / per:10.2f}{mfu[objective]:8.1%}")
            if args.compile:
                per_c, total = ours(
                    objective, corpus, args.steps, args.threads, True, tmp, size, overrides, args.precision
                )
                print(
                    f"{objective:<10}{'ours+compile':<16}{per_c:9.4f}{tokens / per_c:11.0f}{base / per_c:10.2f}"
                    f"{flops / per_c / peak:8.1%}   (whole run {total:.1f} s incl. compile)"
                )
            sys.stdout.flush()
    print(
        "MFU: model FLOPs per update (cost.update_flops; the stock loop does the same model work and more) per "
        f"second over the measured fp32 peak; load average at the end {os.getloadavg()[0]:.2f}"
    )


def device_peak(name: str, override_tflops: float | None) -> float | None:
    """The peak FLOP/s MFU divides by: --peak-tflops, else the card's dense bf16 peak by name (None: unknown)."""
    return override_tflops * 1e12 if override_tflops else gpu_peak_flops(name)


def runs_main(args) -> None:
    """Tokens/s and MFU of finished runs (e.g. those benchmarks/gpu_check.sh trains through the workflow):
    the loop's s/step from each run's train.log, the shape from its run.yaml, peak from the device name."""
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    peak = device_peak(name, args.peak_tflops) if name != "cpu" else measured_cpu_peak(torch.get_num_threads())
    print(f"device {name}, peak {peak / 1e12 if peak else None} TFLOP/s")
    for run_dir in map(Path, args.runs):
        run = yaml.safe_load((run_dir / "run.yaml").read_text())
        h = Hyper(**run["hyper"])
        done = re.findall(
            r"done: (\d+) steps in ([\d.]+) s \(([\d.]+) s/step in the loop\)", (run_dir / "train.log").read_text()
        )
        if not done:
            sys.exit(f"error: {run_dir / 'train.log'}: no `done:` line (the run did not finish here)")
        steps, per = int(done[-1][0]), float(done[-1][2])
        n = sequence_positions(h, run["objective"], run.get("image_size") or 32)
        flops = update_flops(h, run["objective"], n)
        mfu = flops / per / peak if peak else float("nan")
        world = run.get("runtime", {}).get("world_size", 1)
        print(
            f"{run['run']}: {steps} steps, {h.precision}, {world} process(es), batch {h.batch_size} x {n}: "
            f"{per * 1000:.2f} ms/step, {h.batch_size * n / per:,.0f} tokens/s, {flops / per / 1e12:.2f} TFLOP/s, "
            f"MFU {mfu:.2%}"
        )


def recipe_main(args) -> None:
    """--device cuda (or --recipe): the training loop's update under the paper's recipe, per size and objective."""
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = device_peak(name, args.peak_tflops)
    config = Path(args.config or REPO / "config" / "paper.yaml")
    extra = {}
    for kv in args.override:  # KEY=VALUE, the value read as YAML (8, 1e-4, fp32)
        key, _, value = kv.partition("=")
        extra[key] = yaml.safe_load(value)
    head = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peak_tflops": peak / 1e12 if peak else None,
        "steps": args.steps,
        "warmup": args.warmup,
        "eager": extra.get("capture", "eager") == "eager",
        "config": str(config),
        "group": args.group or "paper",
    }
    print(
        f"device {name} (torch {torch.__version__}, CUDA {torch.version.cuda}), peak {head['peak_tflops']} "
        f"TFLOP/s; median of {args.steps} updates after {args.warmup}"
    )
    print(
        f"{'size':<11}{'objective':<14}{'precision':<10}{'micro-batch':>12}{'accum':>6}{'ms/update':>10}"
        f"{'tokens/s':>11}{'TFLOP/update':>13}{'TFLOP/s':>8}{'MFU':>7}"
    )
    rows = []
    timing = Timing(args.steps, args.warmup, args.block_len, args.pad_rows)
    for size in args.size:  # one size at a time, so that a failure late keeps what was measured
        for r in recipe_rows([size], args.objectives, config, args.group or "paper", timing, dev, peak, extra):
            rows.append(r)
            mfu = f"{r['mfu']:7.1%}" if r["mfu"] is not None else f"{'-':>7}"
            print(
                f"{r['size']:<11}{r['objective']:<14}{r['precision']:<10}{r['micro_batch']} x {r['seq']:<6}"
                f"{r['grad_accum']:>6}{r['ms_per_update']:10.1f}{r['tokens_per_s']:11,.0f}"
                f"{r['tflop_per_update']:13.2f}{r['tflop_per_update'] / r['ms_per_update'] * 1e3:8.1f}{mfu}",
                flush=True,
            )
            if args.json:
                Path(args.json).write_text(json.dumps({**head, "rows": rows}, indent=1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default: CPU 60, CUDA 10)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: CPU 5, CUDA 3)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--compile", action="store_true", help="CPU only: also measure torch.compile (CUDA: --override compile=true)"
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="CPU only: training precision (bf16 = CPU bf16 autocast) and the denominator's dtype (CUDA: the recipe's)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="workflow config whose training group gives the model shape (CPU; default config/config.yaml) "
        "or the recipe (CUDA; default config/paper.yaml)",
    )
    p.add_argument("--group", default=None, help="the training group of --config (default: CPU main, CUDA paper)")
    p.add_argument("--size", nargs="+", default=["bert-base"], help="CUDA only: the sizes to measure")
    p.add_argument(
        "--objectives",
        nargs="+",
        default=["encoder", "decoder-paper", "decoder"],
        help="CUDA only: the text objectives to measure",
    )
    p.add_argument("--block-len", type=int, default=512, help="CUDA only: the random corpus's sequence length")
    p.add_argument(
        "--pad-rows", type=float, default=0.1, help="CUDA only: fraction of the random documents that are padded"
    )
    p.add_argument(
        "--override", nargs="*", default=[], metavar="KEY=VALUE", help="CUDA only: hyperparameters over the recipe's"
    )
    p.add_argument("--peak-tflops", type=float, default=None, help="CUDA only: the device's bf16 peak")
    p.add_argument(
        "--recipe",
        action="store_true",
        help="the CUDA measurement (the loop's update under the recipe) on --device, also cpu (a rehearsal)",
    )
    p.add_argument("--json", metavar="PATH", help="CUDA / --recipe: also write the rows to this JSON file")
    p.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN_DIR",
        help="report tokens/s and MFU of these finished runs instead of measuring (gpu_check.sh)",
    )
    args = p.parse_args(argv)
    cuda = args.device == "cuda" or args.recipe
    args.steps = args.steps if args.steps is not None else (10 if cuda else 60)
    args.warmup = args.warmup if args.warmup is not None else (3 if cuda else 5)
    if not cuda:
        args.config = args.config or str(REPO / "config" / "config.yaml")
        args.group = args.group or "main"
    if args.runs:
        runs_main(args)
    else:
        (recipe_main if cuda else cpu_main)(args)


if __name__ == "__main__":
    main()
