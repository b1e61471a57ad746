"""Timing the training loop's own update, for the benchmarks (benchmarks/train_throughput.py, gpu_measure.py): random
data of a recipe's shapes, the recipe's overrides from a workflow config, the update built by the public driver
(loop.Trainer) and timed between synchronizations, the host synchronizations and the profile of one update, and the
rows of a recipe measurement, their FLOPs and MFU from the one cost model (cost.update_flops).

Nothing here changes what a run does: it builds runs as the loop builds them and calls `Trainer.update`."""

from __future__ import annotations

import gc
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attention_geometry.errors import UserError
from attention_geometry.formats.files import read_yaml
from attention_geometry.training.cost import update_flops
from attention_geometry.training.run_config import run_config_from_dict

__all__ = [
    "SPECIAL",
    "write_random_corpus",
    "write_random_images",
    "recipe_overrides",
    "sync",
    "prepared_update",
    "time_updates",
    "sync_count",
    "RUNTIME_CALLS",
    "busy_ms",
    "profile_update",
    "Timing",
    "row_positions",
    "recipe_rows",
]

SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}  # the random corpora's special tokens
VOCAB = 30522  # bert-base-uncased's vocabulary, every text corpus of the paper configs


def write_random_corpus(
    d: Path, vocab: int, block_len: int, n_train: int = 4096, seed: int = 0, pad_rows: float = 0.0, layout=None
) -> Path:
    """A prepared corpus of random token blocks ([CLS] ... [SEP]); a `pad_rows` fraction of them a shorter document
    padded with [PAD] (length uniform in 16 .. block_len - 1). `layout`: the manifest's (None: packed)."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("heldout", 64)):
        a = rng.integers(5, vocab, size=(n, block_len)).astype(np.int32)
        a[:, 0], a[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
        for i in np.flatnonzero(rng.random(n) < pad_rows) if pad_rows else []:  # no draw without: same blocks
            k = int(rng.integers(16, block_len))
            a[i, k - 1], a[i, k:] = SPECIAL["sep"], SPECIAL["pad"]
        np.save(d / f"{name}.npy", a)
    manifest = {
        "dataset": "random",
        "name": "random",
        "block_len": block_len,
        "vocab_size": vocab,
        "special_tokens": SPECIAL,
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


def recipe_overrides(config_path: Path, group: str, size: str) -> tuple[dict, str]:
    """The overrides a run of `size` gets in `config_path` (its group's settings.overrides, then its run entry's;
    group `group` first, else the first group with a run of that size) and where they come from."""
    groups = (read_yaml(config_path, "config") or {})["training"]["groups"]
    for name in [group, *(g for g in groups if g != group)]:
        g = groups.get(name) or {}
        for entry in g.get("runs", []):
            if size in (entry["size"] if isinstance(entry["size"], list) else [entry["size"]]):
                o = {**((g.get("settings") or {}).get("overrides") or {}), **(entry.get("overrides") or {})}
                return o, f"{config_path} group {name}"
    raise UserError(f"no run of size {size} in {config_path}")


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def prepared_update(size: str, objective: str, data: Path, overrides: dict, max_steps: int, out: Path, dev):
    """The training loop's own update of a run of (size, objective) on `data` with `overrides`, built by the public
    driver (loop.Trainer: model, optimizer, scaler from seed 0; schedule over `max_steps`): (trainer, order,
    precision); `trainer.update(order, step)` is one update (step.Step, fed by the host source or, with
    `batch_path: device`, the device source)."""
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


def time_updates(
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
    """(seconds of each timed update, precision, the trainer) of the loop's own update on `dev` (prepared_update),
    each timed between two synchronizations, after `warmup` untimed ones. `record` (a dict) receives the first
    update's seconds (a compile or a graph capture included: `first_s`), each update's mean loss (`losses`) and on
    CUDA the host synchronizations of one more update (`syncs`: sync_count); with `profile`, where one more update's
    time goes (`profile`: profile_update)."""
    run, order, precision = prepared_update(size, objective, data, overrides, warmup + steps, out, dev)
    times, sums = [], []
    for step in range(1, warmup + steps + 1):
        sync(dev)
        t = time.perf_counter()
        total, _, n_tokens = run.update(order, step)
        sync(dev)
        times.append(time.perf_counter() - t)
        sums.append((total.detach(), n_tokens))
    if record is not None:
        record["first_s"] = times[0]
        record["losses"] = [float(s) / max(int(n), 1) for s, n in sums]
        if dev.type == "cuda":  # the host synchronizations of one more update
            record["syncs"] = sync_count(lambda: run.update(order, warmup + steps + 1))
        if profile:
            record["profile"] = profile_update(lambda: run.update(order, warmup + steps + 2), dev)
    return times[warmup:], precision, run


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
    sync(dev)
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        fn()
        sync(dev)
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


@dataclass(frozen=True)
class Timing:
    """How a measurement times: timed and untimed updates, the random corpus's sequence length and padded share."""

    steps: int = 10
    warmup: int = 3
    block_len: int = 512
    pad_rows: float = 0.1


def row_positions(h, objective: str, block_len: int, image_size: int = 32) -> int:
    """The positions of one sequence of a measured row: the random corpus's block, or a 32 x 32 image's patches and
    its [CLS]."""
    return (image_size // h.patch_size) ** 2 + 1 if objective == "classifier" else block_len


def recipe_rows(
    sizes, objectives, config: Path, group: str, timing: Timing, dev, peak: float | None, extra: dict | None = None
) -> list[dict]:
    """One row per (size, objective): the loop's update under the recipe of `config` group `group`
    (recipe_overrides, then `extra`) on random data of its shapes (a text size: vocabulary 30,522, `timing.block_len`
    tokens, `timing.pad_rows` of the documents padded; a ViT: 32 x 32 RGB images); ms per update (the median of
    `timing.steps` after `timing.warmup`), tokens/s, model FLOPs per update (cost.update_flops) and, with `peak`
    (FLOP/s), the MFU."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = write_random_corpus(
            tmp / "corpus", VOCAB, timing.block_len, pad_rows=timing.pad_rows, layout="documents"
        )
        images = write_random_images(tmp / "images")
        for size in sizes:
            overrides, where = recipe_overrides(config, group, size)
            overrides.update(extra or {})
            image = size.startswith("vit")
            if not image:
                overrides["seq_len"] = timing.block_len
            for objective in ["classifier"] if image else objectives:
                times, precision, run = time_updates(
                    size, objective, images if image else text, overrides, timing.steps, timing.warmup, tmp / "run", dev
                )
                h = run.h
                per = float(np.median(times))
                n = row_positions(h, objective, timing.block_len)
                flops = update_flops(h, objective, n)
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
                        "mfu": flops / per / peak if peak else None,
                    }
                )
                del run, h
                gc.collect()
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    return rows
