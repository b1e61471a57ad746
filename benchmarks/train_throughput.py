"""Training throughput of the tiny config (both objectives), ours vs a plain loop over stock transformers,
and its CPU model-FLOPs utilization against the step's own matmul shapes.

    python benchmarks/train_throughput.py [--steps 60] [--threads 1] [--precision fp32|bf16] [--compile]
        [--config config/config.yaml] [--group main]
    python benchmarks/train_throughput.py --device cuda [--size bert-base ...] [--objectives ...] [--json PATH]
        [--config config/paper.yaml] [--group paper] [--pad-rows 0.1] [--warmup 3] [--steps 10]

CPU (default): the model shape is the tiny size with the overrides (e.g. batch_size) of training group
`--group` (default `main`) of `--config` (default config/config.yaml), vocabulary and sequence from that
group's corpus; without such a group the tiny defaults (vocabulary 2048, sequence 64, batch 32). For each
objective, tokens/s of
  - `stock`: a plain PyTorch loop over an unmodified BertForMaskedLM / BertLMHeadModel of the same size
    (model(input_ids, labels=...).loss: full-vocabulary logits at every position, the model's own loss),
    torch.optim.AdamW with its defaults (foreach), clip_grad_norm_ 1.0;
  - `ours`: attention_geometry.training.train() on a random corpus of the same shape (its whole loop:
    batch assembly, masking, lean forward with masked-only logits, fast cross-entropy, AdamW, clipping,
    loss bookkeeping), timed from its per-step loop time;
  and their ratio. With --compile also `ours+compile` (compile time reported separately).
  Then CPU MFU, in the same run:
  - the step's matmuls (step_matmuls): forward, input-gradient and weight-gradient products of every
    Linear (q, k, v, attention output, FFN in/out over all B x L tokens; the output head's transform and
    vocabulary projection over the predicted positions: the expected number of masked positions for the
    encoder, B x (L - 1) for the decoder), and the attention products (Q K^T and P V forward; dV, dP, dQ,
    dK backward; per batch x head); model FLOPs per step = their sum (2 m k n each; the flash kernel's
    recomputation of Q K^T in the backward pass and non-matmul work are not model FLOPs). The count is
    checked against torch.utils.flop_counter.FlopCounterMode on one real training step (forward + backward
    of lm_loss, math SDPA backend so that attention is counted; both printed);
  - the denominator: each distinct shape's torch.matmul rate, same operand layouts, in the training
    precision (--precision bf16: bf16 operands, as under CPU bf16 autocast), on --threads threads (best
    of 5 timings), combined FLOP-weighted: total FLOPs / sum_i (FLOPs_i / rate_i), i.e. the rate a step
    would reach if it did only its matmuls, each at the speed torch.matmul gets on that shape;
  - CPU MFU = (model FLOPs per step / s_per_step of `ours`) / denominator.
CUDA: ms per update, tokens/s and model-FLOPs utilization of each `--size` (default bert-base) under the
recipe of `--config` (default config/paper.yaml) group `--group` (default paper; a size it does not train,
e.g. vit-tiny: the first group that does): that group's overrides (the authors' recipe: 8 micro-batches of
32 x 512 per update, fp16 autocast with loss scaling, fused AdamW, clipping) on a random corpus of
`--block-len` tokens (vocabulary 30,522, layout documents; a `--pad-rows` fraction of its documents shorter,
so that most micro-batches carry a key-padding mask, as the paper's corpora do) or random 32 x 32 RGB images,
for each of `--objectives` (text; default encoder, decoder-paper, decoder). Each update is the training
loop's own (training/step.Step fed by the host source: batch assembly and masking on the host, copies, forward
and backward of every micro-batch, unscale, clip, optimizer step), eager, timed between CUDA synchronizations;
the median of `--steps` updates after `--warmup`. FLOPs per update = 6 * (non-embedding params) * tokens + 12 * layers *
hidden * seq * tokens (attention scores) + 6 * hidden * vocab * predicted tokens (output layer; a ViT: none);
peak = --peak-tflops (default: looked up from the device name, bf16 dense; fp16 dense is the same). MFU(cost):
the same with benchmarks/paper_cost.py's FLOP count (the one its GPU-hours divide by an MFU). --json PATH: the
rows (every timed update too) as JSON. `--recipe --device cpu`: the same measurement on the CPU, a rehearsal
(tests/test_train_throughput.py runs it on the tiny size).
--runs RUN_DIR...: the same count and peak for finished training runs (the loop's s/step from train.log, the
shape from run.yaml); benchmarks/gpu_check.sh reports its runs with it.

Why over 600 lines: one script measures one thing, a training step's speed and its MFU, on both devices; the CPU
side (ours vs a plain loop, the matmul-rate denominator) and the CUDA side (the paper recipe's update) share
its model shapes, FLOP count and random data, and a benchmark is read and run as one file.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.loop import train
from attention_geometry.training.models import build_model
from attention_geometry.training.run_config import run_config_from_dict

REPO = Path(__file__).resolve().parents[1]
PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "V100": 125.0}


def write_random_corpus(
    d: Path, vocab: int, block_len: int, n_train: int = 4096, seed: int = 0, pad_rows: float = 0.0, layout=None
) -> Path:
    """Random token blocks ([CLS] ... [SEP]); a `pad_rows` fraction of them a shorter document padded with [PAD]
    (length uniform in 16 .. block_len - 1). `layout`: the manifest's (None: packed, the default)."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("heldout", 64)):
        a = rng.integers(5, vocab, size=(n, block_len)).astype(np.int32)
        a[:, 0], a[:, -1] = 2, 3
        for i in np.flatnonzero(rng.random(n) < pad_rows) if pad_rows else []:  # no draw without: same blocks
            k = int(rng.integers(16, block_len))
            a[i, k - 1], a[i, k:] = 3, 0
        np.save(d / f"{name}.npy", a)
    manifest = {
        "dataset": "random",
        "name": "random",
        "block_len": block_len,
        "vocab_size": vocab,
        "special_tokens": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4},
    }
    if layout:
        manifest["layout"] = layout
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def write_random_images(d: Path, image_size: int = 32, channels: int = 3, classes: int = 10, n_train: int = 2048):
    """A random prepared image set (formats.corpus.load_images): uint8 images, class ids, the manifest."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", n_train), ("heldout", 64)):
        np.save(d / f"{name}_images.npy", rng.integers(0, 256, (n, channels, image_size, image_size), dtype=np.uint8))
        np.save(d / f"{name}_labels.npy", rng.integers(0, classes, n).astype(np.int64))
    manifest = {
        "kind": "images",
        "dataset": "random-images",
        "image_size": image_size,
        "num_channels": channels,
        "num_classes": classes,
        "class_names": [str(c) for c in range(classes)],
        "normalization": {"mean": [0.5] * channels, "std": [0.25] * channels},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


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


# ------------------------------------------------------------------------------------- model FLOPs, MFU


@dataclass(frozen=True)
class MatMul:
    """`count` products per step of A [m, k] @ B [k, n] (`batch` of them at once as one batched matmul);
    ta / tb: the operand is stored transposed ([k, m] / [n, k]) as in the step (x @ W^T, dY^T @ x)."""

    name: str
    count: int
    batch: int
    m: int
    k: int
    n: int
    ta: bool = False
    tb: bool = False

    @property
    def shape_key(self) -> tuple:
        return (self.batch, self.m, self.k, self.n, self.ta, self.tb)

    @property
    def flops(self) -> int:
        return 2 * self.count * self.batch * self.m * self.k * self.n


def _linear(name: str, count: int, rows: int, d_in: int, d_out: int) -> list[MatMul]:
    """nn.Linear(d_in, d_out) on `rows` rows: y = x W^T, dx = dY W, dW = dY^T x."""
    return [
        MatMul(f"{name} fwd", count, 1, rows, d_in, d_out, tb=True),
        MatMul(f"{name} dX", count, 1, rows, d_out, d_in),
        MatMul(f"{name} dW", count, 1, d_out, rows, d_in, ta=True),
    ]


def step_matmuls(h, objective: str, n_pred: int) -> list[MatMul]:
    """Every matmul of one training step of lm_loss (forward and backward) at batch h.batch_size x h.seq_len,
    with n_pred positions through the output head."""
    B, L, D, H, I, V, NL = (
        h.batch_size,
        h.seq_len,
        h.hidden_size,
        h.num_heads,
        h.intermediate_size,
        h.vocab_size,
        h.num_layers,
    )
    T, dh = B * L, D // H
    mm = []
    mm += _linear("q,k,v,attn-out", 4 * NL, T, D, D)
    mm += _linear("ffn in", NL, T, D, I)
    mm += _linear("ffn out", NL, T, I, D)
    # attention per (batch, head): S = Q K^T, O = P V; backward dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
    mm += [
        MatMul("attn QK^T fwd", NL, B * H, L, dh, L, tb=True),
        MatMul("attn PV fwd", NL, B * H, L, L, dh),
        MatMul("attn dV=P^T dO", NL, B * H, L, L, dh, ta=True),
        MatMul("attn dP=dO V^T", NL, B * H, L, dh, L, tb=True),
        MatMul("attn dQ=dS K", NL, B * H, L, L, dh),
        MatMul("attn dK=dS^T Q", NL, B * H, L, L, dh, ta=True),
    ]
    mm += _linear("head transform", 1, n_pred, D, D)
    mm += _linear("head vocab", 1, n_pred, D, V)
    return mm


def expected_predicted(h, objective: str) -> int:
    """Positions through the output head per step: masked positions (expected; [CLS] and [SEP] are never
    masked) for the encoder and decoder-paper, B x (L - 1) for the decoder (full documents: no padding)."""
    if objective in ("encoder", "decoder-paper"):
        return round(h.mlm_probability * h.batch_size * (h.seq_len - 2))
    return h.batch_size * (h.seq_len - 1)


def matmul_rate(mm: MatMul, dtype: torch.dtype, min_seconds: float = 0.03, repeats: int = 5) -> float:
    """FLOP/s of torch.matmul on one product of this shape and layout (best of `repeats` timings, each
    looping for at least min_seconds)."""
    g = torch.Generator().manual_seed(0)

    def operand(rows, cols, transposed):
        shape = (mm.batch, cols, rows) if transposed else (mm.batch, rows, cols)
        x = torch.randn(shape, generator=g).to(dtype)
        x = x.transpose(-1, -2) if transposed else x
        return x if mm.batch > 1 else x[0]

    a, b = operand(mm.m, mm.k, mm.ta), operand(mm.k, mm.n, mm.tb)
    one = 2 * mm.batch * mm.m * mm.k * mm.n
    for _ in range(3):
        torch.matmul(a, b)
    t = time.perf_counter()
    torch.matmul(a, b)
    n = max(1, int(min_seconds / max(time.perf_counter() - t, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(n):
            torch.matmul(a, b)
        best = min(best, (time.perf_counter() - t) / n)
    return one / best


def counted_flops(h, objective: str, precision: str, size: str = "tiny") -> dict:
    """One training step's forward + backward under FlopCounterMode (a real batch of the trainer's masking),
    with the math SDPA backend (the CPU flash kernel has no FLOP formula there) and with the default one,
    beside this file's count for the same batch."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from attention_geometry.training.batches import mask_tokens
    from attention_geometry.training.models import lm_loss

    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    model = build_model(size, objective, "standard", 0, special_tokens=special, _hyper=h).train()
    rng = np.random.default_rng(0)
    ids = rng.integers(5, h.vocab_size, size=(h.batch_size, h.seq_len))
    ids[:, 0], ids[:, -1] = special["cls"], special["sep"]
    if objective == "encoder":
        inp, lab = mask_tokens(ids, [[0, 0, 1, i] for i in range(h.batch_size)], h, special, h.vocab_size)
        n_pred = int((lab != -100).sum())
    else:
        inp, lab = ids, ids
        n_pred = h.batch_size * (h.seq_len - 1)
    x, y = torch.from_numpy(np.asarray(inp)), torch.from_numpy(np.asarray(lab))
    out = {"n_pred": n_pred, "ours": sum(m.flops for m in step_matmuls(h, objective, n_pred))}
    for label, backend in (("flop_counter_math_sdpa", SDPBackend.MATH), ("flop_counter_default", None)):
        model.zero_grad(set_to_none=True)
        ctx = sdpa_kernel(backend) if backend is not None else contextlib.nullcontext()
        with ctx, FlopCounterMode(display=False) as fc:
            with _autocast(precision):
                loss = lm_loss(model, x, y, objective)
            loss.backward()
        out[label] = fc.get_total_flops()
    return out


def mfu_report(hypers: dict, size: str, s_per_step: dict, precision: str, threads: int) -> None:
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    rates: dict[tuple, float] = {}
    rows = []
    for objective in ("encoder", "decoder"):
        h = hypers[objective]
        n_pred = expected_predicted(h, objective)
        mms = step_matmuls(h, objective, n_pred)
        for m in mms:
            if m.shape_key not in rates:
                rates[m.shape_key] = matmul_rate(m, dtype)
        total = sum(m.flops for m in mms)
        t_mm = sum(m.flops / rates[m.shape_key] for m in mms)
        denom = total / t_mm
        print(
            f"\n{objective}: the step's matmuls ({precision}, {threads} thread(s); {n_pred} positions "
            "through the output head)"
        )
        print(
            f"  {'product':<22}{'count':>6}{'batch':>6}  {'[m x k] @ [k x n]':<22}{'MFLOP':>9}"
            f"{'GFLOP/s':>9}{'time%':>7}"
        )
        for m in mms:
            lay = f"[{m.m}x{m.k}]{'^T' if m.ta else ''}@[{m.k}x{m.n}]{'^T' if m.tb else ''}"
            share = m.flops / rates[m.shape_key] / t_mm
            print(
                f"  {m.name:<22}{m.count:>6}{m.batch:>6}  {lay:<22}{m.flops / 1e6:9.1f}"
                f"{rates[m.shape_key] / 1e9:9.1f}{share:7.1%}"
            )
        print(f"  {'total':<36}{'':<22}{total / 1e6:9.1f}{denom / 1e9:9.1f}  (FLOP-weighted rate = denominator)")
        c = counted_flops(h, objective, precision, size)
        print(
            f"  FLOP check on one real step ({c['n_pred']} predicted positions): this count "
            f"{c['ours'] / 1e9:.4f} GFLOP; FlopCounterMode {c['flop_counter_math_sdpa'] / 1e9:.4f} GFLOP "
            f"(math SDPA), {c['flop_counter_default'] / 1e9:.4f} GFLOP (default SDPA: CPU flash attention "
            "not counted)"
        )
        rows.append((objective, total, s_per_step[objective], denom))
    print(f"\nCPU MFU ({precision}, {threads} thread(s)): model FLOPs per step / s per step of `ours` / denominator")
    print(f"{'objective':<10}{'GFLOP/step':>11}{'s/step':>9}{'GFLOP/s':>9}{'denominator':>13}{'MFU':>7}")
    for objective, total, per, denom in rows:
        achieved = total / per
        print(
            f"{objective:<10}{total / 1e9:11.3f}{per:9.4f}{achieved / 1e9:9.1f}{denom / 1e9:13.1f}"
            f"{achieved / denom:7.1%}"
        )


def cpu_main(args) -> None:
    torch.set_num_threads(args.threads)
    size, per_objective, vocab, seq, where = cpu_shape(Path(args.config), args.group)
    hypers = {o: resolve_hyper(size, {**ov, "vocab_size": vocab, "seq_len": seq}) for o, ov in per_objective.items()}
    h = hypers["encoder"]
    tokens = h.batch_size * h.seq_len
    per_step = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = write_random_corpus(tmp / "corpus", vocab, seq)
        print(
            f"{size} ({h.num_layers} layers x {h.hidden_size}, {h.num_heads} heads, vocab {vocab}, seq {seq}, "
            f"batch {h.batch_size}; overrides {per_objective}; from {where}), {args.precision}, "
            f"{args.threads} thread(s), {args.steps} "
            f"steps; tokens/s = batch x seq / s_per_step; load average at start "
            f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"
        )
        print(f"{'objective':<10}{'variant':<16}{'s/step':>9}{'tokens/s':>11}{'vs stock':>10}")
        for objective in ("encoder", "decoder"):
            h, overrides = hypers[objective], per_objective[objective]
            base = stock_loop(objective, h, args.steps, 3, precision=args.precision, size=size)
            print(f"{objective:<10}{'stock':<16}{base:9.4f}{tokens / base:11.0f}{1.0:10.2f}")
            per, _ = ours(objective, corpus, args.steps, args.threads, False, tmp, size, overrides, args.precision)
            per_step[objective] = per
            print(f"{objective:<10}{'ours':<16}{per:9.4f}{tokens / per:11.0f}{base / per:10.2f}")
            if args.compile:
                per_c, total = ours(
                    objective, corpus, args.steps, args.threads, True, tmp, size, overrides, args.precision
                )
                print(
                    f"{objective:<10}{'ours+compile':<16}{per_c:9.4f}{tokens / per_c:11.0f}{base / per_c:10.2f}"
                    f"   (whole run {total:.1f} s incl. compile)"
                )
            sys.stdout.flush()
    mfu_report(hypers, size, per_step, args.precision, args.threads)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


def peak_tflops(device_name: str, override: float | None = None) -> float | None:
    """The device's dense bf16 peak in TFLOP/s: `override`, else PEAK_BF16_TFLOPS by name (None: unknown)."""
    return override or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device_name), None)


def body_params(model) -> int:
    """Parameters outside the embeddings (the 6 N part of the FLOP count)."""
    return sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)


def gpu_step_flops(h, n_body: int, n_pred: int) -> int:
    """Model FLOPs of one training step (CUDA count): 6 * body params * tokens, attention scores
    12 * layers * hidden * seq * tokens, output layer 6 * hidden * vocab * predicted positions."""
    L = h.seq_len
    tokens = h.batch_size * L
    return (
        6 * n_body * tokens + 12 * h.num_layers * h.hidden_size * L * tokens + 6 * h.hidden_size * h.vocab_size * n_pred
    )


def runs_main(args) -> None:
    """Tokens/s and MFU of finished runs (e.g. those benchmarks/gpu_check.sh trains through the workflow):
    the loop's s/step from each run's train.log, the shape from its run.yaml, peak from the device name."""
    import re

    import yaml

    from attention_geometry.training.hyper import Hyper

    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    peak = peak_tflops(name, args.peak_tflops)
    print(f"device {name}, bf16 peak {peak} TFLOP/s")
    for run_dir in map(Path, args.runs):
        run = yaml.safe_load((run_dir / "run.yaml").read_text())
        h = Hyper(**run["hyper"])
        done = re.findall(
            r"done: (\d+) steps in ([\d.]+) s \(([\d.]+) s/step in the loop\)", (run_dir / "train.log").read_text()
        )
        if not done:
            sys.exit(f"error: {run_dir / 'train.log'}: no `done:` line (the run did not finish here)")
        steps, per = int(done[-1][0]), float(done[-1][2])
        model = build_model(run["size"], run["objective"], "standard", 0, _hyper=h)
        flops = gpu_step_flops(h, body_params(model), expected_predicted(h, run["objective"]))
        mfu = flops / per / (peak * 1e12) if peak else float("nan")
        world = run.get("runtime", {}).get("world_size", 1)
        print(
            f"{run['run']}: {steps} steps, {h.precision}, {world} process(es), batch {h.batch_size} x seq "
            f"{h.seq_len}: {per * 1000:.2f} ms/step, {h.batch_size * h.seq_len / per:,.0f} tokens/s, "
            f"{flops / per / 1e12:.2f} TFLOP/s, MFU {mfu:.2%} of the bf16 peak"
        )


def recipe_overrides(config_path: Path, group: str, size: str) -> tuple[dict, str]:
    """The overrides a run of `size` gets in `config_path`: its group's settings.overrides, then its run
    entry's; group `group` first, else the first group with a run of that size."""
    from attention_geometry.formats.files import read_yaml

    groups = (read_yaml(config_path, "config") or {})["training"]["groups"]
    for name in [group, *(g for g in groups if g != group)]:
        g = groups.get(name) or {}
        for entry in g.get("runs", []):
            if size in (entry["size"] if isinstance(entry["size"], list) else [entry["size"]]):
                o = {**((g.get("settings") or {}).get("overrides") or {}), **(entry.get("overrides") or {})}
                return o, f"{config_path} group {name}"
    raise SystemExit(f"error: no run of size {size} in {config_path}")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def prepared_update(size: str, objective: str, data: Path, overrides: dict, max_steps: int, out: Path, dev):
    """The training loop's own update of a run of (size, objective) on `data` with `overrides`, built as the loop
    builds it (training.loop.Trainer: model, optimizer, scaler from seed 0; schedule over `max_steps`): (trainer,
    order, precision); `trainer.update(order, step)` is one update (training/step.Step, fed by the host source or,
    with `batch_path: device`, the device source)."""
    from attention_geometry.training.loop import Trainer

    cfg = run_config_from_dict(
        {
            "corpus": str(data),
            "size": size,
            "objective": objective,
            "init": "standard",
            "seed": 0,
            "max_steps": max_steps,
            "snapshot_steps": [],
            "eval_steps": [],
            "eval_blocks": 0,
            "state_every": None,
            "overrides": overrides,
        }
    )
    trainer = Trainer(cfg, out, device=dev.type)
    precision = trainer.build()
    return trainer, trainer.order(), precision


def loop_updates(
    size: str,
    objective: str,
    data: Path,
    overrides: dict,
    steps: int,
    warmup: int,
    out: Path,
    dev,
    record: dict | None = None,
    profile: bool = False,
):
    """(seconds of each timed update, precision, Hyper, non-embedding params) of the training loop's own update on
    `dev` (prepared_update), each timed between two synchronizations, after `warmup` untimed ones. `record` (a
    dict) receives the first update's seconds (a compile or a graph capture included: `first_s`), each update's
    mean loss (`losses`) and on CUDA the host synchronizations of one more update (`syncs`: sync_count); with
    `profile`, where one more update's time goes (`profile`: profile_update)."""
    run, order, precision = prepared_update(size, objective, data, overrides, warmup + steps, out, dev)
    times, sums = [], []
    for step in range(1, warmup + steps + 1):
        _sync(dev)
        t = time.perf_counter()
        total, _, n_tokens = run.update(order, step)
        _sync(dev)
        times.append(time.perf_counter() - t)
        sums.append((total.detach(), n_tokens))
    if record is not None:
        record["first_s"] = times[0]
        record["losses"] = [float(s) / max(int(n), 1) for s, n in sums]
        if dev.type == "cuda":  # the host synchronizations of one more update
            record["syncs"] = sync_count(lambda: run.update(order, warmup + steps + 1))
        if profile:
            record["profile"] = profile_update(lambda: run.update(order, warmup + steps + 2), dev)
    return times[warmup:], precision, run.h, body_params(run.model)


def sync_count(fn) -> int:
    """The host synchronizations torch reports (torch.cuda.set_sync_debug_mode) while `fn()` runs on CUDA."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return sum("synchroniz" in str(w.message).lower() for w in seen)


RUNTIME_CALLS = {  # CUDA runtime and driver calls counted by profile_update, by what they do
    "syncs": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
    "copies": ("cudaMemcpy", "cuMemcpy"),
    "launches": ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch"),
}


def busy_ms(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals in microseconds, in milliseconds: the time a device was
    running at least one kernel."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total / 1e3


def profile_update(fn, dev: torch.device, top: int = 12) -> dict:
    """Where one call of `fn` (an update) spends its time, from torch.profiler: the wall time under the profiler,
    on CUDA the device's busy time (the union of its kernels' intervals: busy_ms) and idle share, the kernels and
    the runtime calls that synchronize, copy or launch (RUNTIME_CALLS), the `top` operators by self time on the device
    (the kernels each launched itself; on a CPU: self time on the host), each with its calls and share of all
    operators' self time, and on CUDA the `top` kernels likewise (`top_kernels`)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(dev)
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        fn()
        _sync(dev)
        wall = (time.perf_counter() - t) * 1e3
    events = prof.events()
    out: dict = {"wall_ms": wall, "device_busy_ms": None, "device_idle_share": None, "kernels": None}
    if cuda:
        kernels = [e for e in events if e.device_type == DeviceType.CUDA]
        busy = busy_ms([(e.time_range.start, e.time_range.end) for e in kernels])
        out.update(device_busy_ms=busy, device_idle_share=max(0.0, 1 - busy / wall), kernels=len(kernels))
    for what, names in RUNTIME_CALLS.items():
        out[what] = sum(1 for e in events if e.name.startswith(names))

    def self_us(a) -> float:
        if cuda:
            return float(getattr(a, "self_device_time_total", None) or getattr(a, "self_cuda_time_total", 0.0))
        return float(a.self_cpu_time_total)

    def ranked(entries) -> list[dict]:
        entries = [a for a in entries if self_us(a) > 0]
        total = sum(self_us(a) for a in entries) or 1.0
        entries.sort(key=self_us, reverse=True)
        return [
            {"name": a.key, "calls": int(a.count), "self_ms": self_us(a) / 1e3, "share": self_us(a) / total}
            for a in entries[:top]
        ]

    averages = prof.key_averages()
    # operators are the host's events; on CUDA each one's self time is that of the kernels it launched itself
    out["top_by"] = "self device time" if cuda else "self host time"
    out["top"] = ranked([a for a in averages if a.device_type == DeviceType.CPU])
    if cuda:
        out["top_kernels"] = ranked([a for a in averages if a.device_type == DeviceType.CUDA])
    return out


def update_flops(h, objective: str, n_body: int, n: int) -> tuple[int, float | None]:
    """Model FLOPs of one update of h.batch_size sequences of n tokens: (this file's count: gpu_step_flops, a ViT's
    without the output term; benchmarks/paper_cost.py's count, the one its GPU-hours use)."""
    tokens = h.batch_size * n
    if objective == "classifier":
        ours = 6 * n_body * tokens + 12 * h.num_layers * h.hidden_size * n * tokens
    else:
        hn = dataclasses.replace(h, seq_len=n)
        ours = gpu_step_flops(hn, n_body, expected_predicted(hn, objective))
    try:
        import paper_cost
    except Exception as exc:  # noqa: BLE001 - the measurement stands without the second count
        print(f"warning: benchmarks/paper_cost.py not importable ({exc!r}): no MFU(cost)", file=sys.stderr)
        return ours, None
    return ours, tokens * sum(paper_cost.flops_per_token(h, objective, n).values())


@dataclass(frozen=True)
class Timing:
    """How recipe_rows measures: timed and untimed updates, the random corpus's sequence length and padded share."""

    steps: int = 10
    warmup: int = 3
    block_len: int = 512
    pad_rows: float = 0.1


def recipe_rows(
    sizes, objectives, config: Path, group: str, timing: Timing, dev, peak: float | None, extra: dict | None = None
) -> list[dict]:
    """One row per (size, objective): the training loop's update under the recipe of `config` group `group`
    (recipe_overrides, then `extra`) on random data of its shapes (see the module's docstring)."""
    steps, warmup, block_len = timing.steps, timing.warmup, timing.block_len
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = write_random_corpus(tmp / "corpus", 30522, block_len, pad_rows=timing.pad_rows, layout="documents")
        images = write_random_images(tmp / "images")
        for size in sizes:
            overrides, where = recipe_overrides(config, group, size)
            overrides.update(extra or {})
            image = size.startswith("vit")
            if not image:
                overrides["seq_len"] = block_len
            for objective in ["classifier"] if image else objectives:
                times, precision, h, n_body = loop_updates(
                    size, objective, images if image else text, overrides, steps, warmup, tmp / "run", dev
                )
                per = float(np.median(times))
                n = (32 // h.patch_size) ** 2 + 1 if image else block_len
                flops, flops_cost = update_flops(h, objective, n_body, n)
                rows.append(
                    {
                        "size": size,
                        "objective": objective,
                        "recipe": where,
                        "precision": precision,
                        "micro_batch": h.batch_size // h.grad_accum,
                        "grad_accum": h.grad_accum,
                        "seq": n,
                        "ms_per_update": per * 1e3,
                        "ms_per_update_all": [t * 1e3 for t in times],
                        "tokens_per_s": h.batch_size * n / per,
                        "tflop_per_update": flops / 1e12,
                        "tflop_per_update_paper_cost": flops_cost / 1e12 if flops_cost else None,
                        "mfu": flops / per / (peak * 1e12) if peak else None,
                        "mfu_paper_cost": flops_cost / per / (peak * 1e12) if peak and flops_cost else None,
                    }
                )
                del h
                gc.collect()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    return rows


def recipe_main(args) -> None:
    """--device cuda (or --recipe): the training loop's update under the paper's recipe, per size and objective."""
    import yaml

    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = peak_tflops(name, args.peak_tflops)
    config = Path(args.config or REPO / "config" / "paper.yaml")
    extra = {}
    for kv in args.override:  # KEY=VALUE, the value read as YAML (8, 1e-4, fp32)
        key, _, value = kv.partition("=")
        extra[key] = yaml.safe_load(value)
    head = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peak_tflops": peak,
        "steps": args.steps,
        "warmup": args.warmup,
        "eager": not extra.get("compile", False),
        "config": str(config),
        "group": args.group or "paper",
    }
    print(
        f"device {name} (torch {torch.__version__}, CUDA {torch.version.cuda}), dense bf16/fp16 peak {peak} "
        f"TFLOP/s; median of {args.steps} updates after {args.warmup}"
    )
    print(
        f"{'size':<11}{'objective':<14}{'precision':<10}{'micro-batch':>12}{'accum':>6}{'ms/update':>10}"
        f"{'tokens/s':>11}{'TFLOP/update':>13}{'TFLOP/s':>8}{'MFU':>7}{'MFU(cost)':>10}"
    )
    rows = []
    for size in args.size:  # one size at a time, so that a failure late keeps what was measured
        for r in recipe_rows(
            [size],
            args.objectives,
            config,
            args.group or "paper",
            Timing(args.steps, args.warmup, args.block_len, args.pad_rows),
            dev,
            peak,
            extra,
        ):
            rows.append(r)
            mfu = f"{r['mfu']:7.1%}" if peak else f"{'-':>7}"
            mfu += f"{r['mfu_paper_cost']:10.1%}" if r["mfu_paper_cost"] is not None else f"{'-':>10}"
            shape = f"{r['micro_batch']} x {r['seq']}"
            print(
                f"{r['size']:<11}{r['objective']:<14}{r['precision']:<10}{shape:>12}"
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
