"""Measuring the two batch sources side by side on a device, for benchmarks/gpu_measure.py: one row (the loop's
update of a size and objective on the host or the device source, a capture, a padded attention), the device
source's passes that fit the free memory, rounds of runs sharing the device (each a process of this module), and
the check of the variable-length attention against the key-padding mask. FLOPs and MFU from cost.update_flops.

    python -m attention_geometry.training.measure_device SPEC.json   (one process of a shared round: share_worker)"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attention_geometry.training.cost import update_flops
from attention_geometry.training.hyper import resolve_hyper
from attention_geometry.training.measure import (
    SPECIAL,
    VOCAB,
    Timing,
    prepared_update,
    recipe_overrides,
    row_positions,
    sync,
    time_updates,
)

__all__ = [
    "FREE_SHARE",
    "SHARED_AGREEMENT",
    "activation_bytes",
    "suggest_passes",
    "Setup",
    "variant",
    "measure",
    "with_share",
    "share_worker",
    "measure_shared",
    "one_run_agreement",
    "varlen_check",
]

FREE_SHARE = 0.6  # the share of the free device memory a pass's activations may take (suggest_passes)
SHARED_AGREEMENT = 0.2  # a shared round of one run within 20 % of its eager row's ms per update (one_run_agreement)


def activation_bytes(h, objective: str, rows: int, seq: int) -> float:
    """A pass's activation memory, roughly: 34 bytes x hidden per token and layer at 16-bit (twice in fp32; the
    usual count for a BERT layer with dropout, attention probabilities not kept, as the fused kernels do), plus the
    output layer's logits in fp32 with their gradient (a masked objective's 15 % of the positions, plus slack)."""
    width = 2 if h.precision in ("fp16", "bf16", "auto") else 4
    body = rows * seq * h.num_layers * 17 * h.hidden_size * width
    share = 1.0 if objective in ("decoder", "classifier") else 0.17
    head = rows * seq * share * (h.vocab_size or 0) * 12
    return body + head


def suggest_passes(h, objective: str, seq: int, free_bytes: float) -> int:
    """The fewest passes (a divisor of the update's sequences) whose activations take at most FREE_SHARE of
    `free_bytes`."""
    n = h.batch_size
    for p in (d for d in range(1, n + 1) if n % d == 0):
        if activation_bytes(h, objective, n // p, seq) <= FREE_SHARE * free_bytes:
            return p
    return n


def _free_bytes(dev: torch.device) -> float:
    if dev.type != "cuda":
        return float("inf")
    gc.collect()
    torch.cuda.empty_cache()
    return float(torch.cuda.mem_get_info(dev)[0])


@dataclass(frozen=True)
class Setup:
    """What every row shares: the recipe's config and group, the timing, the device, its peak FLOP/s (None:
    unknown), a scratch dir."""

    config: Path
    group: str
    timing: Timing
    dev: torch.device
    peak: float | None
    tmp: Path


def variant(r: dict) -> str:
    """A row's variant: batch_path/capture, and /varlen for `padded_attention: varlen`."""
    tail = "/varlen" if r.get("padded_attention") == "varlen" else ""
    return f"{r['batch_path']}/{r['capture']}{tail}"


def _overrides(size: str, objective: str, setup: Setup, path: str, capture: str, free_share: float = 1.0) -> dict:
    """The overrides of a row: the recipe's, the random corpus's sequence length, and on the device path its
    capture and the passes that fit `free_share` of the free memory."""
    overrides, _ = recipe_overrides(setup.config, setup.group, size)
    image = objective == "classifier"
    if not image:
        overrides["seq_len"] = setup.timing.block_len
    if path == "device":
        overrides.update(batch_path="device", capture=capture)
        h0 = resolve_hyper(size, {**overrides, "vocab_size": VOCAB} if not image else overrides)
        n = row_positions(h0, objective, setup.timing.block_len)
        overrides["device_passes"] = suggest_passes(h0, objective, n, _free_bytes(setup.dev) * free_share)
    return overrides


def measure(
    size: str,
    objective: str,
    path: str,
    capture: str,
    data: Path,
    setup: Setup,
    profile: bool = False,
    attention: str = "mask",
) -> dict:
    """One row: the loop's update of (size, objective) on `path` with `capture` (and the device path's
    `padded_attention`), on the setup's device; with `profile`, where one more update's time goes. An out-of-memory
    error on the device path retries with twice the passes; any other error is the row's `error`."""
    timing, dev, peak = setup.timing, setup.dev, setup.peak
    _, where = recipe_overrides(setup.config, setup.group, size)
    image = objective == "classifier"
    overrides = _overrides(size, objective, setup, path, capture)
    if attention != "mask":
        overrides["padded_attention"] = attention
    batch = resolve_hyper(size, overrides if image else {**overrides, "vocab_size": VOCAB}).batch_size
    row = {"size": size, "objective": objective, "batch_path": path, "capture": capture}
    row.update(padded_attention=attention, recipe=where)
    while True:
        record: dict = {}
        try:
            times, precision, run = time_updates(
                size, objective, data, overrides, timing.steps, timing.warmup, setup.tmp / "run", dev, record, profile
            )
            break
        except torch.cuda.OutOfMemoryError as exc:
            p = overrides.get("device_passes")
            if path != "device" or batch % (p * 2):
                return {**row, "error": f"out of memory: {str(exc).splitlines()[0]}"}
            overrides["device_passes"] = p * 2
            row.setdefault("oom_passes", []).append(p)
            gc.collect()
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001 - a row that fails is recorded, the others still run
            return {**row, "error": f"{type(exc).__name__}: {exc}"}
    h = run.h
    n = row_positions(h, objective, timing.block_len)
    per = float(np.median(times))
    flops = update_flops(h, objective, n)
    return {
        **row,
        "precision": precision,
        "device_passes": h.device_passes,
        "micro_batch": h.batch_size // h.grad_accum,
        "grad_accum": h.grad_accum,
        "seq": n,
        "ms_per_update": per * 1e3,
        "ms_per_update_all": [t * 1e3 for t in times],
        "first_ms": record["first_s"] * 1e3,
        "tokens_per_s": h.batch_size * n / per,
        "tflop_per_update": flops / 1e12,
        "mfu": flops / per / peak if peak else None,
        "losses": record["losses"],
        "syncs_per_update": record.get("syncs"),
        **({"profile": with_share(record["profile"], per * 1e3)} if "profile" in record else {}),
    }


def with_share(prof: dict, ms_per_update: float) -> dict:
    """The profile with the device's busy time as a share of the unprofiled update (`busy_share_of_update`; the
    profiler slows the host, not the kernels, so this is the better estimate of how busy the device is)."""
    busy = prof["device_busy_ms"]
    return {**prof, "busy_share_of_update": None if busy is None else busy / ms_per_update}


def share_worker(spec_path: str) -> int:
    """One of several training processes on one device (measure_shared starts them): build the update, run the
    warm-up updates, say so (`ready`), wait for `go`, then run updates for `seconds` and write how many and in how
    long (`result`)."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    dev = torch.device(spec["device"])
    run, order, _ = prepared_update(
        spec["size"], spec["objective"], Path(spec["data"]), spec["overrides"], 10**6, Path(spec["out"]), dev
    )
    step = 0
    for step in range(1, spec["warmup"] + 1):
        run.update(order, step)
    sync(dev)
    Path(spec["ready"]).touch()
    deadline = time.monotonic() + spec["wait_s"]
    while not Path(spec["go"]).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"share worker: no go within {spec['wait_s']} s")
        time.sleep(0.005)
    t0, n = time.perf_counter(), 0
    while True:
        step += 1
        run.update(order, step)
        sync(dev)
        n += 1
        if time.perf_counter() - t0 >= spec["seconds"]:
            break
    elapsed = time.perf_counter() - t0
    result = {
        "updates": n,
        "seconds": elapsed,
        "flop_per_update": update_flops(run.h, spec["objective"], spec["seq"]),
        "tokens_per_update": run.h.batch_size * spec["seq"],
    }
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


def measure_shared(size: str, objective: str, k: int, data: Path, setup: Setup, seconds: float, warmup: int) -> dict:
    """k training processes of (size, objective) on the device path (eager) on one device at once, each running
    updates for `seconds` after its warm-up, all timed over the same window (each starts on one `go`): each
    process's ms per update, the updates per second of all together, their tokens/s and MFU."""
    row = {"size": size, "objective": objective, "runs": k, "batch_path": "device", "capture": "eager"}
    try:
        overrides = _overrides(size, objective, setup, "device", "eager", free_share=1.0 / k)
    except Exception as exc:  # noqa: BLE001 - a round that fails is recorded, the others still run
        return {**row, "error": f"{type(exc).__name__}: {exc}"}
    seq = row_positions(resolve_hyper(size, overrides), objective, setup.timing.block_len)
    threads = max(1, (os.cpu_count() or 1) // k)
    d = setup.tmp / f"share-{size}-{k}"
    d.mkdir(parents=True, exist_ok=True)
    go = d / "go"
    specs = []
    for i in range(k):
        spec = {
            "size": size, "objective": objective, "data": str(data), "overrides": overrides,
            "device": str(setup.dev), "warmup": warmup, "seconds": seconds, "seq": seq, "threads": threads,
            "out": str(d / f"run{i}"), "ready": str(d / f"ready{i}"), "go": str(go), "wait_s": 300,
            "result": str(d / f"result{i}.json"),
        }  # fmt: skip
        (d / f"spec{i}.json").write_text(json.dumps(spec))
        specs.append(spec)
    logs = [open(d / f"worker{i}.log", "w") for i in range(k)]  # closed in the finally below
    cmd = [sys.executable, "-m", "attention_geometry.training.measure_device"]
    procs = [
        subprocess.Popen([*cmd, str(d / f"spec{i}.json")], stdout=f, stderr=subprocess.STDOUT)
        for i, f in enumerate(logs)
    ]
    try:
        while not all(Path(s["ready"]).exists() for s in specs):
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        go.touch()
        codes = [p.wait(timeout=seconds + 300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for f in logs:
            f.close()
    if any(codes):
        i = next(i for i, c in enumerate(codes) if c)
        tail = (d / f"worker{i}.log").read_text().strip().splitlines()[-3:]
        return {**row, "error": f"worker {i} exited with status {codes[i]}: {' | '.join(tail)[:400]}"}
    results = [json.loads(Path(s["result"]).read_text()) for s in specs]
    rate = sum(r["updates"] / r["seconds"] for r in results)
    flops = results[0]["flop_per_update"]
    return {
        **row,
        "device_passes": overrides.get("device_passes"),
        "threads_each": threads,
        "seconds": seconds,
        "updates_each": [r["updates"] for r in results],
        "ms_per_update_each": [r["seconds"] / r["updates"] * 1e3 for r in results],
        "updates_per_s": rate,
        "tokens_per_s": rate * results[0]["tokens_per_update"],
        "mfu": rate * flops / setup.peak if setup.peak else None,
    }


def one_run_agreement(shared: list[dict], rows: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (size, objective) with a shared round of one run and an eager device-path row (key-padding mask): the
    round's ms per update, the row's, their ratio and `agrees` (within SHARED_AGREEMENT either way). A round of one
    run is that row's update again in a process of its own; where they disagree, something besides sharing differs
    between them, and the rounds' gains over one run are not a measure of sharing."""
    out = {}
    for r in shared:
        if r.get("runs") != 1 or "ms_per_update_each" not in r:
            continue
        key = (r["size"], r["objective"])
        eager = [
            x["ms_per_update"]
            for x in rows
            if (x["size"], x["objective"]) == key and variant(x) == "device/eager" and "ms_per_update" in x
        ]
        if eager:
            one, row = r["ms_per_update_each"][0], eager[0]
            ratio = one / row
            agrees = 1 - SHARED_AGREEMENT <= ratio <= 1 + SHARED_AGREEMENT
            out[key] = {"one_run_ms": one, "eager_row_ms": row, "ratio": ratio, "agrees": agrees}
    return out


def varlen_check(dev: torch.device, size: str = "bert-mini", seq: int = 128) -> dict:
    """The device path's `padded_attention: varlen` against the key-padding mask on `dev`, on 8 rows of `seq`
    tokens of a fresh `size` encoder, real lengths from 1 to `seq` (two rows unpadded), dropout off, bf16 autocast on
    CUDA (where the segments run PyTorch's variable-length flash kernel; elsewhere models.segment_mask, fp32):
    `bidirectional` the real positions' last hidden states and every gradient of a loss on them (random weights),
    the segments against the mask; `causal` the same for causal attention, without a mask against the mask. Each:
    the largest difference of an output relative to the largest output (`out_rel`), the largest relative norm of a
    gradient's difference (`grad_rel`); `ok` where both are within `tol` (bf16 rounding; wrong segments give
    differences of order one). `dropout_finite`: a training-mode pass with the recipe's dropout through the segments
    gives a finite loss and gradients."""
    from attention_geometry.training.models import build_model, hidden_states, segment_bounds

    model = build_model(size, "encoder", "standard", 0, special_tokens=SPECIAL, vocab_size=VOCAB, seq_len=seq)
    model = model.to(dev).eval()
    lengths = [seq, 1, seq // 2, seq - 1, 3, seq, 17, seq // 3]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(5, VOCAB, (len(lengths), seq), generator=gen)
    real = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.where(real, x, SPECIAL["pad"]).to(dev)
    real = real.to(dev)
    w = torch.randn(int(real.sum()), model.config.hidden_size, generator=gen).to(dev)
    cuda = dev.type == "cuda"
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)
    tol = 5e-2 if cuda else 1e-5

    def run(key, causal: bool):
        model.zero_grad(set_to_none=True)
        with amp:
            out = hidden_states(model, x, key, causal)[real].float()
        loss = (out * w).sum()
        loss.backward()
        grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.detach(), grads, loss.detach()

    def compare(a, b) -> dict:
        out_rel = float((a[0] - b[0]).abs().max() / a[0].abs().max())
        grad_rel = max(float((g - b[1][n]).norm() / g.norm().clamp_min(1e-30)) for n, g in a[1].items())
        return {"out_rel": out_rel, "grad_rel": grad_rel, "ok": out_rel <= tol and grad_rel <= tol}

    result = {
        "size": size,
        "rows": len(lengths),
        "seq": seq,
        "kernel": "flash varlen (bf16)" if cuda else "dense segment mask (fp32)",
        "tol": tol,
        "bidirectional": compare(run(real, False), run(segment_bounds(real), False)),
        "causal": compare(run(real, True), run(None, True)),
    }
    model.train()
    _, grads, loss = run(segment_bounds(real), False)
    result["dropout_finite"] = bool(torch.isfinite(loss)) and all(bool(torch.isfinite(g).all()) for g in grads.values())
    result["ok"] = result["bidirectional"]["ok"] and result["causal"]["ok"] and result["dropout_finite"]
    return result


if __name__ == "__main__":
    sys.exit(share_worker(sys.argv[1]))
