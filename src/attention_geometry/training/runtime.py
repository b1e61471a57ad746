"""The training process's runtime: its memory allocator setting, the torchrun environment, the device and
the precision (autocast) of a run."""

from __future__ import annotations

import contextlib
import os
import sys

import torch

from attention_geometry.errors import UserError
from attention_geometry.training.hyper import Hyper

__all__ = ["keep_large_allocations_on_heap", "HEAP_ALLOC_LIMIT", "precision_warning"]


# glibc serves allocations above a (dynamic) threshold with fresh mmap()s and hands them back with munmap() at
# free, so every step's large temporaries (the decoder's [N, vocab] logits and softmax: 16 MiB at the default
# shape) are page-faulted in anew, step after step. Serving them from the heap and not trimming it keeps the
# pages mapped: -7 to -9 % decoder and -2 % encoder time per step on one thread at the default shape
# (docs/training.md). The heap then keeps about one step's peak of temporaries.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc malloc.h)
HEAP_ALLOC_LIMIT = 32 * 1024 * 1024  # glibc's largest allowed mmap threshold on 64-bit systems


def keep_large_allocations_on_heap() -> bool:
    """Make glibc serve allocations up to HEAP_ALLOC_LIMIT from the heap and never trim it (a process-wide
    setting, for the training processes). True where it was applied; False off glibc (nothing changes)."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, HEAP_ALLOC_LIMIT)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))


def _dist_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return world, rank, local


def _pick_device(device: str, local_rank: int) -> torch.device:
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise UserError("device: cuda requested but no CUDA device is available")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _precision(h: Hyper, device: torch.device) -> str:
    if h.precision != "auto":
        return h.precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def precision_warning(prec: str, device: torch.device) -> str | None:
    """A warning where a run's precision is emulated on its device (it trains, many times slower than fp32):
    fp16 on any CPU, bf16 on a CPU without AVX-512 BF16 or AMX (measured here: bf16 matmuls about ten times
    slower than fp32 on an AVX2-only host)."""
    if device.type != "cpu" or prec == "fp32":
        return None
    if prec == "fp16":
        return (
            "precision fp16 on a CPU: float16 is emulated there, and a step takes many times as long as in fp32; "
            "use precision fp32 on a CPU (fp16 is for GPUs)"
        )
    flags = _cpu_flags()
    if prec == "bf16" and flags and not flags & {"avx512_bf16", "amx_bf16"}:
        return (
            "precision bf16 on a CPU without AVX-512 BF16 or AMX: bfloat16 is emulated there (matmuls about ten "
            "times slower than fp32); use precision fp32 on this host"
        )
    return None


def _autocast(device: torch.device, amp_dtype: torch.dtype | None):
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=amp_dtype)
