"""The base of the weight sources (loading.py opens them): `TensorSource`, a model's config and its tensors by
name; `StateDictSource`, tensors held in a mapping; `LoadError`, a source that cannot be read.

fp8 weights: a float8 tensor (F8_E4M3, F8_E5M2) is handed out dequantized to float32 where its checkpoint
stores the scales in the block format of DeepSeek-V3 and the Qwen fp8 checkpoints: `NAME_scale_inv` beside
`NAME`, one float per block of config.json's quantization_config.weight_block_size ([rows, cols], usually
[128, 128]; edge blocks may be partial), W = fp8.float() * scale_inv expanded over the blocks
(dequantize_fp8). A float8 tensor without such scales is one LoadError line, never scored as stored."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from attention_geometry.errors import UserError

__all__ = [
    "LoadError",
    "TensorSource",
    "StateDictSource",
    "first_line",
    "read_span",
    "FP8_DTYPES",
    "SCALE_SUFFIX",
    "fp8_block_size",
    "dequantize_fp8",
    "dequantized",
]

FP8_DTYPES = tuple(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)
SCALE_SUFFIX = "_scale_inv"  # NAME_scale_inv: the per-block scales of the fp8 tensor NAME


class LoadError(UserError):
    """A weights source that cannot be read: missing, truncated or malformed files, an unreachable hub id."""


class TensorSource:
    """A model's config and its tensors by name. Subclasses implement keys() and get()."""

    config: Any
    name: str
    n_params: int
    directory: Any = None  # the local folder holding config.json (files and hub sources), else None

    @property
    def model_type(self) -> str:
        return str(getattr(self.config, "model_type", "") or "")

    def keys(self) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def get(self, key: str) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def spec(self, key: str) -> tuple[torch.dtype, list[int]]:
        """(dtype, shape) of a tensor; a source that knows them without reading the tensor overrides this."""
        t = self.get(key)
        return t.dtype, list(t.shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model_type={self.model_type!r}, n_params={self.n_params})"


def read_span(path: str, offset: int, nbytes: int, what: str) -> torch.Tensor:
    """`nbytes` bytes of file `path` from byte `offset`, read into a fresh uint8 tensor (no mapping); a short
    read or an OS error raises LoadError naming `what` (the tensor)."""
    buf = torch.empty(nbytes, dtype=torch.uint8)
    try:
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            view, got = memoryview(buf.numpy()), 0
            while got < len(view) and (n := f.readinto(view[got:])):
                got += n
    except OSError as exc:
        raise LoadError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    if got != nbytes:
        raise LoadError(f"{path}: truncated: {what} has {got} of {nbytes} bytes")
    return buf


def fp8_block_size(config: Any) -> tuple[int, int] | None:
    """quantization_config.weight_block_size of a config (a transformers config or its dict) as (rows, cols);
    None when it gives none, or not two integers >= 1."""
    q = (
        config.get("quantization_config")
        if isinstance(config, Mapping)
        else getattr(config, "quantization_config", None)
    )
    if q is not None and not isinstance(q, Mapping):
        q = q.to_dict() if hasattr(q, "to_dict") else vars(q)
    block = q.get("weight_block_size") if isinstance(q, Mapping) else None
    if not (isinstance(block, (list, tuple)) and len(block) == 2):
        return None
    if not all(type(b) is int and b >= 1 for b in block):
        return None
    return int(block[0]), int(block[1])


def dequantize_fp8(
    name: str, w: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], where: str = ""
) -> torch.Tensor:
    """float32 W = w.float() * scale_inv, each scale spread over its block of `block` = (rows, cols) entries
    (the blocks at the bottom and right edges may be partial); a scale tensor of another shape or kind is a
    LoadError naming the tensor and its source `where`."""
    at = f"{where}: tensor " if where else ""
    if w.ndim != 2:
        raise LoadError(f"{at}{name}: fp8 weight of shape {list(w.shape)} (block scales need a matrix)")
    rows, cols = w.shape
    need = [math.ceil(rows / block[0]), math.ceil(cols / block[1])]
    if list(scale_inv.shape) != need or not scale_inv.is_floating_point() or scale_inv.dtype in FP8_DTYPES:
        raise LoadError(
            f"{at}{name}{SCALE_SUFFIX}: scale of shape {list(scale_inv.shape)} and dtype "
            f"{str(scale_inv.dtype).removeprefix('torch.')}, not a float tensor of shape {need} (the "
            f"{rows} x {cols} weight in blocks of {block[0]} x {block[1]}, quantization_config.weight_block_size)"
        )
    s = scale_inv.float().repeat_interleave(block[0], dim=0)[:rows].repeat_interleave(block[1], dim=1)[:, :cols]
    return w.float().mul_(s)


def dequantized(
    where: str, config: Any, key: str, t: torch.Tensor, has: Callable[[str], bool], fetch: Callable[[str], torch.Tensor]
) -> torch.Tensor:
    """`t` (the stored tensor `key` of source `where`) as it is, or dequantized when it is fp8 (the module
    docstring's format: has(key + SCALE_SUFFIX), fetch reads that scale); an fp8 tensor without block scales
    this package reads is a LoadError line."""
    if t.dtype not in FP8_DTYPES:
        return t
    dtype = str(t.dtype).removeprefix("torch.")
    scale = key + SCALE_SUFFIX
    if not has(scale):
        raise LoadError(
            f"{where}: tensor {key!r} is {dtype} with no scale to dequantize it ({scale} is not stored); fp8 "
            "weights are read with block scales NAME_scale_inv and quantization_config.weight_block_size only"
        )
    block = fp8_block_size(config)
    if block is None:
        raise LoadError(
            f"{where}: tensor {key!r} is {dtype} with block scales {scale}, but the config's "
            "quantization_config gives no weight_block_size [rows, cols] to spread them over"
        )
    return dequantize_fp8(key, t, fetch(scale), block, where)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty), for one-line errors."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class StateDictSource(TensorSource):
    """Tensors held in a mapping: a loaded model's state dict, or a .bin state dict loaded with mmap."""

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor],
        config: Any,
        name: str,
        n_params: int | None = None,
        model: Any = None,
    ):
        self.tensors = tensors
        self.config = config
        self.name = name
        self.model = model  # the loaded transformers model, when there is one (GGUF, in-memory)
        if n_params is None:
            n_params = sum(t.numel() for t in tensors.values() if t.is_floating_point())
        self.n_params = int(n_params)

    def keys(self) -> list[str]:
        return list(self.tensors)

    def get_stored(self, key: str) -> torch.Tensor:
        """The tensor as stored (an fp8 tensor not dequantized)."""
        try:
            return self.tensors[key].detach()
        except KeyError:
            raise LoadError(f"{self.name}: no tensor named {key!r}") from None

    def spec(self, key: str) -> tuple[torch.dtype, list[int]]:
        """(dtype, shape) of the tensor as stored."""
        t = self.get_stored(key)
        return t.dtype, list(t.shape)

    def get(self, key: str) -> torch.Tensor:
        return dequantized(
            self.name, self.config, key, self.get_stored(key), self.tensors.__contains__, self.get_stored
        )
