"""The training update's speed on a GPU, the host path and the device path side by side (issue 39; docs/training.md,
"The device path (GPU)"): ms per update, tokens/s and MFU of each size and objective under config/paper.yaml's
recipe, in one run that fits a time budget. benchmarks/gpu_measure.sh runs it with gpu_check.sh on a lent GPU.

    python benchmarks/gpu_measure.py [--device cuda] [--sizes bert-mini bert-base bert-large vit-tiny]
        [--objectives encoder decoder-paper decoder] [--captures cuda-graphs compile] [--no-varlen] [--steps 5]
        [--warmup 2]
        [--budget-s 210] [--json PATH] [--config config/paper.yaml] [--group paper] [--block-len 512] [--no-profile]
        [--share-sizes vit-tiny bert-mini] [--share-runs 1 8] [--share-seconds 3]

What is timed: the training loop's own update (benchmarks/train_throughput.py loop_updates: training/step.Step, the
host source or the device source with `batch_path: device`), each between two synchronizations, the median of --steps
after --warmup untimed ones (the first of which holds a compile or a graph capture: its time is in `first_ms`), on
random data of the recipe's shapes (train_throughput: vocabulary 30,522, 10 % of the documents padded; 32 x 32 RGB
images for the ViT). First `varlen_check`: the device path's variable-length flash attention (`padded_attention:
varlen`) against the key-padding mask on one padded bert-mini batch (outputs and gradients; dropout off), and the
causal objectives' unmasked attention against theirs. Rows, in this order, until the budget is spent (later rows
are written as skipped):
  1. every size and objective on the host path (eager, as measured before) and the device path (eager; padded
     passes with the key-padding mask, `padded_attention: mask`);
  2. the device path with `padded_attention: varlen` (eager) for the first objective of each text size;
  3. the first --capture of the device path (default cuda-graphs) for the first objective of each size (the ViT:
     classifier);
  4. rounds of runs sharing the device (`shared`, measure_shared): for each --share-sizes size (its first
     objective, device path, eager), --share-runs training processes at once (default 1, then 8), each timed over
     the same --share-seconds window after its warm-up: each one's ms per update, and the updates per second, tokens/s
     and MFU of all together (the target: a GPU that trains 8 or more ViT runs at once);
  5. the other --captures (default compile, slow to start) for the first objective of each size;
  6. each --capture for the other objectives;
  7. `padded_attention: varlen` (eager) for the other objectives (--no-varlen: no varlen rows).
The device path's `device_passes` is the fewest passes whose activations fit in 60 % of the free memory (a rough
count, `suggest_passes`); an out-of-memory error retries with twice as many. A row that fails records its error
and the run goes on. On CUDA each row also counts the host synchronizations of one more update
(torch.cuda.set_sync_debug_mode: `syncs_per_update`), and every row keeps each update's mean loss (`losses`: the
device path's rows of one size and objective start from the same weights and masks, so eager, compiled and graphed
passes should agree to the precision's rounding; a varlen row's dropout falls elsewhere). Both eager paths of each
size's first objective also profile one more update, and so does its varlen row (`profile`:
train_throughput.profile_update; the device's busy and idle time, its kernels, the runtime's synchronizations,
copies and launches, the operators that take the most time), so that a target missed comes with where the
update's time went; --no-profile skips it. --device cpu rehearses it all
(tests/test_gpu_measure.py).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import train_throughput as tt

REPO = Path(__file__).resolve().parents[1]
FREE_SHARE = 0.6  # the share of the free device memory a pass's activations may take (suggest_passes)


Row = tuple[str, str, str, str, str]  # (size, objective, batch_path, capture, padded_attention)


def plan(sizes: list[str], objectives: list[str], captures: list[str], varlen: bool = True) -> list[Row]:
    """The rows (size, objective, batch_path, capture, padded_attention) in the order they are measured (the module
    docstring)."""
    objs = {s: ["classifier"] if s.startswith("vit") else list(objectives) for s in sizes}
    text = [s for s in sizes if not s.startswith("vit")] if varlen else []
    rows = [(s, o, path, "eager", "mask") for s in sizes for o in objs[s] for path in ("host", "device")]
    rows += [(s, objs[s][0], "device", "eager", "varlen") for s in text]
    rows += [(s, objs[s][0], "device", c, "mask") for c in captures for s in sizes]
    rows += [(s, o, "device", c, "mask") for c in captures for s in sizes for o in objs[s][1:]]
    rows += [(s, o, "device", "eager", "varlen") for s in text for o in objs[s][1:]]
    return rows


def schedule(rows: list[Row], rounds: list[tuple], n_sizes: int, captures: bool) -> list[tuple]:
    """The planned rows (plan) with the rounds of shared runs after the first capture of each size's first
    objective (the module docstring: a compile, the second capture, is slow to start)."""
    first_objective = {}
    for r in rows:
        first_objective.setdefault(r[0], r[1])
    eager = sum(r[3] == "eager" and (r[4] == "mask" or first_objective[r[0]] == r[1]) for r in rows)
    first = eager + (n_sizes if captures else 0)
    return [*rows[:first], *rounds, *rows[first:]]


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
    """What every row shares: the recipe's config and group, the timing, the device and its peak, a scratch dir."""

    config: Path
    group: str
    timing: tt.Timing
    dev: torch.device
    peak: float | None
    tmp: Path


def profiled(rows: list[Row]) -> set[Row]:
    """The rows whose one more update is profiled (train_throughput.profile_update): both paths, eager (the device
    path's with each padded attention), of each size's first objective."""
    first = {}
    for size, objective, *_ in rows:
        first.setdefault(size, objective)
    return {r for r in rows if r[3] == "eager" and first[r[0]] == r[1]}


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
    `padded_attention`), on the setup's device; with `profile`, where one more update's time goes."""
    timing, dev, peak, tmp = setup.timing, setup.dev, setup.peak, setup.tmp
    _, where = tt.recipe_overrides(setup.config, setup.group, size)
    image = objective == "classifier"
    overrides = _recipe(size, objective, setup, path, capture)
    if attention != "mask":
        overrides["padded_attention"] = attention
    batch = tt.resolve_hyper(size, overrides if image else {**overrides, "vocab_size": 30522}).batch_size
    row = {"size": size, "objective": objective, "batch_path": path, "capture": capture}
    row.update(padded_attention=attention, recipe=where)
    while True:
        record: dict = {}
        try:
            times, precision, h, n_body = tt.loop_updates(
                size, objective, data, overrides, timing.steps, timing.warmup, tmp / "run", dev, record, profile
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
    n = (32 // h.patch_size) ** 2 + 1 if image else timing.block_len
    per = float(np.median(times))
    flops, flops_cost = tt.update_flops(h, objective, n_body, n)
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
        "mfu": flops / per / (peak * 1e12) if peak else None,
        "mfu_paper_cost": flops_cost / per / (peak * 1e12) if peak and flops_cost else None,
        "losses": record["losses"],
        "syncs_per_update": record.get("syncs"),
        **({"profile": _with_share(record["profile"], per * 1e3)} if "profile" in record else {}),
    }


def _with_share(prof: dict, ms_per_update: float) -> dict:
    """The profile with the device's busy time as a share of the unprofiled update (`busy_share_of_update`; the
    profiler slows the host, not the kernels, so this is the better estimate of how busy the device is)."""
    busy = prof["device_busy_ms"]
    return {**prof, "busy_share_of_update": None if busy is None else busy / ms_per_update}


def profile_line(prof: dict, top: int = 4) -> str:
    """A row's profile in one line: the device's busy and idle time, the runtime calls, the top operators."""
    if prof["device_busy_ms"] is None:
        head = f"{prof['wall_ms']:.1f} ms under the profiler"
    else:
        head = (
            f"device busy {prof['device_busy_ms']:.1f} ms ({prof['busy_share_of_update']:.0%} of the update; "
            f"{prof['wall_ms']:.1f} ms under the profiler), {prof['kernels']} kernels"
        )
    calls = f"{prof['launches']} launches, {prof['syncs']} syncs, {prof['copies']} copies"
    ops = ", ".join(f"{o['name']} {o['self_ms']:.1f} ms ({o['share']:.0%})" for o in prof["top"][:top])
    return f"    profile: {head}; {calls}; top by {prof['top_by']}: {ops}"


def _recipe(size: str, objective: str, setup: Setup, path: str, capture: str, free_share: float = 1.0) -> dict:
    """The overrides of a row: the recipe's, the random corpus's sequence length, and on the device path its
    capture and the passes that fit `free_share` of the free memory."""
    from attention_geometry.training.hyper import resolve_hyper

    overrides, _ = tt.recipe_overrides(setup.config, setup.group, size)
    image = objective == "classifier"
    if not image:
        overrides["seq_len"] = setup.timing.block_len
    if path == "device":
        overrides.update(batch_path="device", capture=capture)
        h0 = resolve_hyper(size, {**overrides, "vocab_size": 30522} if not image else overrides)
        n = (32 // h0.patch_size) ** 2 + 1 if image else setup.timing.block_len
        overrides["device_passes"] = suggest_passes(h0, objective, n, _free_bytes(setup.dev) * free_share)
    return overrides


def share_worker(spec_path: str) -> int:
    """One of several training processes on one device (--share-worker; measure_shared starts them): build the
    update, run the warm-up updates, say so (`ready`), wait for `go`, then run updates for `seconds` and write how
    many and in how long (`result`)."""
    spec = json.loads(Path(spec_path).read_text())
    torch.set_num_threads(spec["threads"])
    dev = torch.device(spec["device"])
    run, order, _ = tt.prepared_update(
        spec["size"], spec["objective"], Path(spec["data"]), spec["overrides"], 10**6, Path(spec["out"]), dev
    )
    step = 0
    for step in range(1, spec["warmup"] + 1):
        run.update(order, step)
    tt._sync(dev)
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
        tt._sync(dev)
        n += 1
        if time.perf_counter() - t0 >= spec["seconds"]:
            break
    elapsed = time.perf_counter() - t0
    flops, _ = tt.update_flops(run.h, spec["objective"], tt.body_params(run.model), spec["seq"])
    result = {
        "updates": n,
        "seconds": elapsed,
        "flop_per_update": flops,
        "tokens_per_update": run.h.batch_size * spec["seq"],
    }
    Path(spec["result"]).write_text(json.dumps(result))
    return 0


def measure_shared(size: str, objective: str, k: int, data: Path, setup: Setup, seconds: float, warmup: int) -> dict:
    """k training processes of (size, objective) on the device path (eager) on one device at once, each running
    updates for `seconds` after its warm-up, all timed over the same window (each starts on one `go`): each
    process's ms per update, the updates per second of all together, their tokens/s and MFU."""
    row = {"size": size, "objective": objective, "runs": k, "batch_path": "device", "capture": "eager"}
    image = objective == "classifier"
    try:
        overrides = _recipe(size, objective, setup, "device", "eager", free_share=1.0 / k)
    except Exception as exc:  # noqa: BLE001 - a round that fails is recorded, the others still run
        return {**row, "error": f"{type(exc).__name__}: {exc}"}
    patch = tt.resolve_hyper(size, overrides).patch_size if image else None
    seq = (32 // patch) ** 2 + 1 if image else setup.timing.block_len
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
    cmd = [sys.executable, str(Path(__file__).resolve()), "--share-worker"]
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
    peak = setup.peak
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
        "mfu": rate * flops / (peak * 1e12) if peak else None,
    }


def shared_line(r: dict) -> str:
    """A round of runs sharing the device in one line."""
    head = f"{r['size']:<11}{r['objective']:<14}{r['runs']} at once"
    if "error" in r:
        return f"{head}  error: {r['error'][:200]}"
    mfu = f", MFU {r['mfu']:.1%}" if r["mfu"] is not None else ""
    each = ", ".join(f"{m:.1f}" for m in r["ms_per_update_each"])
    return f"{head}: ms per update of each {each}; together {r['updates_per_s']:.2f} updates/s{mfu}"


def shared_summary(shared: list[dict]) -> list[dict]:
    """Per (size, objective): the updates per second of k runs together, and their gain over one run alone."""
    out = []
    for key in dict.fromkeys((r["size"], r["objective"]) for r in shared):
        mine = {
            r["runs"]: r["updates_per_s"] for r in shared if (r["size"], r["objective"]) == key and "updates_per_s" in r
        }
        one = mine.get(1)
        gain = {k: round(v / one, 2) for k, v in mine.items() if one and k != 1}
        out.append(
            {
                "size": key[0],
                "objective": key[1],
                "updates_per_s": {k: round(v, 2) for k, v in mine.items()},
                "gain_over_one_run": gain,
            }
        )
    return out


def variant(r: dict) -> str:
    """A row's variant in the summary: batch_path/capture, and /varlen for `padded_attention: varlen`."""
    tail = "/varlen" if r.get("padded_attention") == "varlen" else ""
    return f"{r['batch_path']}/{r['capture']}{tail}"


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

    special = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    model = build_model(size, "encoder", "standard", 0, special_tokens=special, vocab_size=30522, seq_len=seq)
    model = model.to(dev).eval()
    lengths = [seq, 1, seq // 2, seq - 1, 3, seq, 17, seq // 3]
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(5, 30522, (len(lengths), seq), generator=gen)
    real = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]
    x = torch.where(real, x, special["pad"]).to(dev)
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


def varlen_line(r: dict) -> str:
    """varlen_check in one line."""
    if "error" in r:
        return f"varlen check: error: {r['error'][:200]}"
    parts = [f"{k} out {r[k]['out_rel']:.1e}, grads {r[k]['grad_rel']:.1e}" for k in ("bidirectional", "causal")]
    verdict = "ok" if r["ok"] else "FAILED"
    head = f"varlen check ({r['kernel']}, tol {r['tol']:g})"
    return f"{head}: {'; '.join(parts)}; dropout finite {r['dropout_finite']}: {verdict}"


def summary(rows: list[dict]) -> list[dict]:
    """Per (size, objective): ms per update of each measured variant and the speed-up of each over the host path."""
    out = []
    for key in dict.fromkeys((r["size"], r["objective"]) for r in rows):
        mine = [r for r in rows if (r["size"], r["objective"]) == key and "ms_per_update" in r]
        ms = {variant(r): round(r["ms_per_update"], 2) for r in mine}
        host = ms.get("host/eager")
        speedup = {k: round(host / v, 2) for k, v in ms.items() if host and k != "host/eager"}
        out.append({"size": key[0], "objective": key[1], "ms_per_update": ms, "speedup_over_host": speedup})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--sizes", nargs="+", default=["bert-mini", "bert-base", "bert-large", "vit-tiny"])
    p.add_argument("--objectives", nargs="+", default=["encoder", "decoder-paper", "decoder"])
    p.add_argument("--captures", nargs="*", default=["cuda-graphs", "compile"], choices=["cuda-graphs", "compile"])
    p.add_argument(
        "--no-varlen", action="store_true", help="no rows with `padded_attention: varlen` (nor the varlen check)"
    )
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=210.0, help="start no row after this many seconds")
    p.add_argument("--config", default=str(REPO / "config" / "paper.yaml"))
    p.add_argument("--group", default="paper")
    p.add_argument("--block-len", type=int, default=512)
    p.add_argument("--pad-rows", type=float, default=0.1)
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--json", metavar="PATH", help="the rows and the summary as JSON (rewritten after each row)")
    p.add_argument(
        "--share-sizes",
        nargs="*",
        default=["vit-tiny", "bert-mini"],
        help="sizes trained as several processes on the device at once, after the eager rows and the first capture "
        "of each size's first objective (that objective, device path, eager; default vit-tiny bert-mini; none: no "
        "rounds)",
    )
    p.add_argument("--share-runs", nargs="+", type=int, default=[1, 8], help="processes per round (default 1 8)")
    p.add_argument("--share-seconds", type=float, default=3.0, help="the timed window of each round (default 3)")
    p.add_argument("--share-worker", metavar="SPEC", help=argparse.SUPPRESS)
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="profile no row (default: both eager paths of each size's first "
        "objective profile one more update: where its time goes)",
    )
    args = p.parse_args(argv)
    if args.share_worker:
        return share_worker(args.share_worker)
    args.share_sizes = [x for x in args.share_sizes if x in args.sizes]
    if args.warmup < 1:
        p.error("--warmup: at least 1 (the first update holds a compile or a graph capture)")
    start = time.monotonic()
    dev = torch.device(args.device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = tt.peak_tflops(name, args.peak_tflops)
    timing = tt.Timing(args.steps, args.warmup, args.block_len, args.pad_rows)
    head = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "peak_tflops": peak,
        "steps": args.steps,
        "warmup": args.warmup,
        "budget_s": args.budget_s,
        "config": args.config,
        "group": args.group,
    }
    print(
        f"gpu_measure: {name} (torch {torch.__version__}, CUDA {torch.version.cuda}), peak {peak} TFLOP/s", flush=True
    )
    text_sizes = [x for x in args.sizes if not x.startswith("vit")]
    if not args.no_varlen and text_sizes:
        try:
            head["varlen_check"] = varlen_check(dev, *text_sizes[:1])
        except Exception as exc:  # noqa: BLE001 - recorded (not ok: paper_cost then counts no varlen row)
            head["varlen_check"] = {"error": f"{type(exc).__name__}: {exc}", "ok": False}
        print(varlen_line(head["varlen_check"]), flush=True)
    print(
        f"{'size':<11}{'objective':<14}{'path':<8}{'capture':<15}{'passes':>7}{'ms/update':>10}{'first ms':>10}"
        f"{'tokens/s':>12}{'MFU':>7}{'syncs':>6}",
        flush=True,
    )
    rows: list[dict] = []
    shared: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = tt.write_random_corpus(tmp / "corpus", 30522, args.block_len, pad_rows=args.pad_rows, layout="documents")
        images = tt.write_random_images(tmp / "images")
        setup = Setup(Path(args.config), args.group, timing, dev, peak, tmp)
        rows_planned = plan(args.sizes, args.objectives, args.captures, not args.no_varlen)
        to_profile = set() if args.no_profile else profiled(rows_planned)
        rounds = [
            (s, "classifier" if s.startswith("vit") else args.objectives[0], k)
            for s in args.share_sizes
            for k in args.share_runs
        ]

        def write() -> None:
            if args.json:
                doc = {**head, "rows": rows, "summary": summary(rows), "shared": shared}
                Path(args.json).write_text(json.dumps({**doc, "shared_summary": shared_summary(shared)}, indent=1))

        for item in schedule(rows_planned, rounds, len(args.sizes), bool(args.captures)):
            spent = time.monotonic() - start > args.budget_s
            if len(item) == 3:  # a round of runs sharing the device
                size, objective, k = item
                if spent:
                    r = {
                        "size": size,
                        "objective": objective,
                        "runs": k,
                        "skipped": f"budget of {args.budget_s:g} s spent",
                    }
                else:
                    data = images if objective == "classifier" else text
                    r = measure_shared(size, objective, k, data, setup, args.share_seconds, args.warmup)
                    r["elapsed_s"] = round(time.monotonic() - start, 1)
                    print(shared_line(r), flush=True)
                shared.append(r)
                write()
                continue
            size, objective, path, capture, attention = item
            if spent:
                rows.append(
                    {
                        "size": size,
                        "objective": objective,
                        "batch_path": path,
                        "capture": capture,
                        "padded_attention": attention,
                        "skipped": f"budget of {args.budget_s:g} s spent",
                    }
                )
                continue
            data = images if objective == "classifier" else text
            r = measure(size, objective, path, capture, data, setup, item in to_profile, attention)
            r["elapsed_s"] = round(time.monotonic() - start, 1)
            rows.append(r)
            label = capture + ("+varlen" if attention == "varlen" else "")
            if "error" in r:
                print(f"{size:<11}{objective:<14}{path:<8}{label:<15}  error: {r['error'][:200]}", flush=True)
            else:
                mfu = f"{r['mfu']:7.1%}" if r["mfu"] is not None else f"{'-':>7}"
                syncs = "-" if r["syncs_per_update"] is None else str(r["syncs_per_update"])
                print(
                    f"{size:<11}{objective:<14}{path:<8}{label:<15}{r['device_passes']:>7}"
                    f"{r['ms_per_update']:10.1f}{r['first_ms']:10.0f}{r['tokens_per_s']:12,.0f}{mfu}{syncs:>6}",
                    flush=True,
                )
                if "profile" in r:
                    print(profile_line(r["profile"]), flush=True)
            write()
            gc.collect()
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        write()
    print("\nspeed-up over the host path (ms per update):")
    for s in summary(rows):
        print(f"  {s['size']:<11}{s['objective']:<14}{s['ms_per_update']}  {s['speedup_over_host']}")
    print("runs sharing the device (updates per second of all together; gain over one run alone):")
    for s in shared_summary(shared):
        print(f"  {s['size']:<11}{s['objective']:<14}{s['updates_per_s']}  {s['gain_over_one_run']}")
    print(f"gpu_measure: {len(rows)} rows and {len(shared)} rounds of shared runs in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
