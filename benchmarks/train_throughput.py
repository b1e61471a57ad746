"""Training throughput of the tiny config (both objectives), ours vs a plain loop over stock transformers.

    python benchmarks/train_throughput.py [--steps 60] [--threads 1] [--compile]
    python benchmarks/train_throughput.py --device cuda [--size bert-base]

CPU (default): for each objective, tokens/s of
  - `stock`: a plain PyTorch loop over an unmodified BertForMaskedLM / BertLMHeadModel of the same size
    (model(input_ids, labels=...).loss: full-vocabulary logits at every position, the model's own loss),
    torch.optim.AdamW with its defaults (foreach), clip_grad_norm_ 1.0;
  - `ours`: attention_geometry.training.train() on a random corpus of the same shape (its whole loop:
    batch assembly, masking, lean forward with masked-only logits, fast cross-entropy, AdamW, clipping,
    loss bookkeeping), timed from its per-step loop time;
  and their ratio. With --compile also `ours+compile` (compile time reported separately).
CUDA: tokens/s and model-FLOPs utilization of `--size` (default bert-base) at the paper's setup (sequence
512, batch 32, bf16 autocast), for the encoder and decoder objectives. FLOPs per step = 6 * (non-embedding
params) * tokens + 12 * layers * hidden * seq * tokens (attention scores) + 6 * hidden * vocab * predicted
tokens (output layer); peak = --peak-tflops (default: looked up from the device name, bf16 dense).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attention_geometry.training import build_model, resolve_hyper, run_config_from_dict, train

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0, "V100": 125.0}


def write_random_corpus(d: Path, vocab: int, block_len: int, n_train: int = 4096, seed: int = 0) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("heldout", 64)):
        a = rng.integers(5, vocab, size=(n, block_len)).astype(np.int32)
        a[:, 0], a[:, -1] = 2, 3
        np.save(d / f"{name}.npy", a)
    (d / "manifest.json").write_text(json.dumps({
        "dataset": "random", "name": "random", "block_len": block_len, "vocab_size": vocab,
        "special_tokens": {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}}))
    return d


def stock_loop(objective: str, h, steps: int, warmup: int, device: str = "cpu") -> float:
    """Seconds per step of a plain loop over the unmodified model."""
    model = build_model("tiny", objective, "standard", 0, _hyper=h).to(device).train()
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
        loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())
        if i >= warmup:
            times.append(time.perf_counter() - t)
    return float(np.median(times))


def ours(objective: str, corpus: Path, steps: int, threads: int, compile_: bool, tmp: Path) -> tuple[float, float]:
    """(seconds per step in the loop, total seconds incl. start-up) of train() on the random corpus."""
    cfg = run_config_from_dict({
        "corpus": str(corpus), "size": "tiny", "objective": objective, "init": "standard", "seed": 0,
        "max_steps": steps, "snapshot_steps": [], "eval_steps": [], "eval_blocks": 0, "state_every": None,
        "overrides": {"compile": compile_, "warmup_steps": 10},
    })
    out = tmp / f"{objective}-{int(compile_)}"
    s = train(cfg, out, threads=threads, device="cpu", progress=False)
    return s["s_per_step"], s["seconds"]


def cpu_main(args) -> None:
    torch.set_num_threads(args.threads)
    h = resolve_hyper("tiny", {"vocab_size": 2048, "seq_len": 64})
    tokens = h.batch_size * h.seq_len
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = write_random_corpus(tmp / "corpus", 2048, 64)
        print(f"tiny config (2 layers x 128, vocab 2048, seq 64, batch 32), {args.threads} thread(s), "
              f"{args.steps} steps; tokens/s = batch x seq / s_per_step")
        print(f"{'objective':<10}{'variant':<16}{'s/step':>9}{'tokens/s':>11}{'vs stock':>10}")
        for objective in ("encoder", "decoder"):
            base = stock_loop(objective, h, args.steps, 3)
            print(f"{objective:<10}{'stock':<16}{base:9.4f}{tokens / base:11.0f}{1.0:10.2f}")
            per, _ = ours(objective, corpus, args.steps, args.threads, False, tmp)
            print(f"{objective:<10}{'ours':<16}{per:9.4f}{tokens / per:11.0f}{base / per:10.2f}")
            if args.compile:
                per_c, total = ours(objective, corpus, args.steps, args.threads, True, tmp)
                print(f"{objective:<10}{'ours+compile':<16}{per_c:9.4f}{tokens / per_c:11.0f}{base / per_c:10.2f}"
                      f"   (whole run {total:.1f} s incl. compile)")
            sys.stdout.flush()


def cuda_main(args) -> None:
    from attention_geometry.training.models import lm_loss

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    peak = args.peak_tflops or next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    h = resolve_hyper(args.size, {"vocab_size": 30522})
    B, L, V = h.batch_size, h.seq_len, h.vocab_size
    print(f"{args.size} on {name}: batch {B}, seq {L}, bf16 autocast, peak {peak} TFLOP/s")
    for objective in ("encoder", "decoder"):
        model = build_model(args.size, objective, "standard", 0, _hyper=h).to(dev).train()
        opt = torch.optim.AdamW(model.parameters(), lr=h.lr, betas=tuple(h.betas), fused=True)
        fwd = (torch.compile(lambda x, y: lm_loss(model, x, y, objective)) if args.compile
               else (lambda x, y: lm_loss(model, x, y, objective)))
        n_emb = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
        n_body = sum(p.numel() for p in model.parameters()) - n_emb
        g = torch.Generator(device=dev).manual_seed(0)
        times = []
        for i in range(args.warmup + args.steps):
            ids = torch.randint(5, V, (B, L), device=dev, generator=g)
            if objective == "encoder":
                sel = torch.rand(B, L, device=dev, generator=g) < h.mlm_probability
                lab, inp = torch.where(sel, ids, -100), torch.where(sel, 4, ids)
            else:
                lab, inp = ids, ids
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                s = fwd(inp, lab)
            n_pred = int((lab != -100).sum()) if objective == "encoder" else B * (L - 1)
            (s / n_pred).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t)
        per = float(np.median(times))
        tokens = B * L
        flops = 6 * n_body * tokens + 12 * h.num_layers * h.hidden_size * L * tokens + 6 * h.hidden_size * V * n_pred
        mfu = flops / per / (peak * 1e12) if peak else float("nan")
        print(f"{objective:<8} {per:.4f} s/step  {tokens / per:,.0f} tokens/s  {flops / per / 1e12:.1f} TFLOP/s  "
              f"MFU {mfu:.1%}")
        del model, opt
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compile", action="store_true", help="also measure torch.compile")
    p.add_argument("--size", default="bert-base", help="CUDA only: the size to measure")
    p.add_argument("--peak-tflops", type=float, default=None, help="CUDA only: the device's bf16 peak")
    args = p.parse_args(argv)
    (cuda_main if args.device == "cuda" else cpu_main)(args)


if __name__ == "__main__":
    main()
