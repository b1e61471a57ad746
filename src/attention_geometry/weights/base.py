"""The base of the weight sources (loading.py opens them): `TensorSource`, a model's config and its tensors by
name; `StateDictSource`, tensors held in a mapping; `LoadError`, a source that cannot be read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from attention_geometry.errors import UserError

__all__ = ["LoadError", "TensorSource", "StateDictSource", "first_line", "read_span"]


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

    def get(self, key: str) -> torch.Tensor:
        try:
            return self.tensors[key].detach()
        except KeyError:
            raise LoadError(f"{self.name}: no tensor named {key!r}") from None
