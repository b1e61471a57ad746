"""GGUF files read for their q/k tensors only (`GGUFSource`), so that scoring a GGUF file is bounded like the
streaming safetensors reader: the header is parsed here, the config is built from its metadata with
transformers' own GGUF-to-config table, and `get(key)` reads one tensor's bytes and dequantizes them with the
`gguf` package (`gguf.quants.dequantize`). Nothing else of the model is built or dequantized.

Why not `gguf.GGUFReader`: it maps the file, but turns every element of every metadata array into its own
numpy view; a 262k-token vocabulary (Gemma 3) costs ~690 MiB and 11 s before any tensor is read. Here the
string arrays are skipped (their length kept) and numeric arrays are read whole.

Rows of q and k: llama.cpp's converter permutes the rows of attn_q and attn_k of llama-family models within
each head (the rotary pairs interleaved), and transformers' GGUF loader undoes it. Both get the same
permutation P (the same head size), so each head's W_q,h^T W_k,h = (P W_q,h)^T (P W_k,h) is unchanged, and the
tensors are used as stored. tests/test_real_weights.py proves it: the scores of SmolLM2 (llama, permuted) and
Gemma 3 (not permuted) read here equal those of the transformers path. The value and output projections
(attn_v, attn_output: not permuted by the converter) are read for the OV circuit; their scores equal the
transformers path's too (same test).

Only architectures whose q and k are separate tensors (`blk.N.attn_q.weight`, `blk.N.attn_k.weight`) and
whose transformers conversion changes them at most by that permutation are read here (`QK_ARCHITECTURES`);
other GGUF files go through transformers (loading.py).
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any

import torch

from attention_geometry.weights.base import LoadError, TensorSource, first_line, read_span

__all__ = ["GGUFSource", "GGUFHeader", "read_gguf_header", "gguf_architecture", "QK_ARCHITECTURES"]

# GGUF architecture -> transformers model_type, for the architectures read here (transformers renames gemma3)
QK_ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "gemma3": "gemma3_text"}
# the architectures whose q/k rows llama.cpp's converter permutes (and transformers' GGUF loader un-permutes)
LLAMA_CPP_PERMUTED = ("llama", "mistral")
# the names the attention's tensors get (transformers' names; the families resolve
# "layers.{i}.self_attn.q_proj.weight"); the value and output projections are for the OV circuit (scorer
# matrix="ov"): llama.cpp permutes q and k only
_QK_NAMES = {"attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj"}
_GGUF_QK = re.compile(r"blk\.(\d+)\.(attn_q|attn_k|attn_v|attn_output)\.weight")

# GGUF metadata value types: code -> struct format (8: string, 9: array)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass
class GGUFTensorInfo:
    ggml_type: int
    dims: tuple[int, ...]  # GGUF order: ne0 (the contiguous axis) first
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.dims))

    @property
    def numel(self) -> int:
        return math.prod(self.dims)


@dataclass
class GGUFHeader:
    metadata: dict[str, Any]  # scalars and strings as Python values; string arrays as ("<strings>", count)
    tensors: dict[str, GGUFTensorInfo]


class _Cursor:
    def __init__(self, buf: mmap.mmap | bytes, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, fmt: str) -> Any:
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.buf):
            raise LoadError(f"{self.path}: cannot read GGUF metadata (the header is cut at byte {len(self.buf)})")
        (value,) = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > len(self.buf):
            raise LoadError(f"{self.path}: cannot read GGUF metadata (the header is cut at byte {len(self.buf)})")
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LoadError(
                f"{self.path}: cannot read GGUF metadata (a string at byte {self.pos - n} is not UTF-8)"
            ) from None

    def skip_strings(self, count: int) -> None:
        for _ in range(count):
            n = self.take("Q")
            self.pos += n
        if self.pos > len(self.buf):
            raise LoadError(f"{self.path}: cannot read GGUF metadata (the header is cut at byte {len(self.buf)})")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            itype, count = self.take("I"), self.take("Q")
            if count > len(self.buf) - self.pos:  # every element takes at least one byte
                raise LoadError(f"{self.path}: cannot read GGUF metadata (an array of {count} elements)")
            if itype == _STRING:
                self.skip_strings(count)
                return ("<strings>", count)
            if itype in _SCALARS:
                fmt = f"<{count}{_SCALARS[itype]}"
                size = struct.calcsize(fmt)
                if self.pos + size > len(self.buf):
                    raise LoadError(
                        f"{self.path}: cannot read GGUF metadata (the header is cut at byte {len(self.buf)})"
                    )
                values = list(struct.unpack_from(fmt, self.buf, self.pos))
                self.pos += size
                return values
            return [self.value(itype) for _ in range(count)]  # nested arrays: rare, short
        raise LoadError(f"{self.path}: cannot read GGUF metadata (unknown value type {vtype})")


def read_gguf_header(path: str | os.PathLike) -> GGUFHeader:
    """The metadata and tensor table of a GGUF file (version 2 or 3, little-endian), each tensor's bytes
    checked to lie inside the file."""
    import gguf

    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if size < 24:
                raise LoadError(f"{path}: cannot read GGUF metadata (a file of {size} bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(_Cursor(buf, path), size, gguf)
    except OSError as exc:
        raise LoadError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _parse(c: _Cursor, size: int, gguf: Any) -> GGUFHeader:
    path = c.path
    if bytes(c.buf[:4]) != b"GGUF":
        raise LoadError(f"{path}: cannot read GGUF metadata (not a GGUF file: no GGUF magic)")
    c.pos = 4
    version = c.take("I")
    if version not in (2, 3):
        raise LoadError(
            f"{path}: cannot read GGUF metadata (version {version}; versions 2 and 3 are read, little-endian)"
        )
    n_tensors, n_kv = c.take("Q"), c.take("Q")
    if n_tensors > size or n_kv > size:
        raise LoadError(f"{path}: cannot read GGUF metadata ({n_tensors} tensors, {n_kv} keys in {size} bytes)")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = c.string()
        if key in meta:
            raise LoadError(f"{path}: cannot read GGUF metadata (key {key!r} is stored twice)")
        meta[key] = c.value(c.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        n_dims = c.take("I")
        if n_dims > 8:
            raise LoadError(f"{path}: cannot read GGUF metadata (tensor {name!r} has {n_dims} dimensions)")
        dims = tuple(c.take("Q") for _ in range(n_dims))
        infos.append((name, dims, c.take("I"), c.take("Q")))
    align = meta.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise LoadError(f"{path}: cannot read GGUF metadata (general.alignment {align!r} is not a power of two)")
    start = -(-c.pos // align) * align
    tensors: dict[str, GGUFTensorInfo] = {}
    for name, dims, raw_type, offset in infos:
        if name in tensors:
            raise LoadError(f"{path}: cannot read GGUF metadata (tensor {name!r} is stored twice)")
        try:
            qtype = gguf.GGMLQuantizationType(raw_type)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise LoadError(
                f"{path}: cannot read GGUF metadata (tensor {name!r} has unknown type {raw_type})"
            ) from None
        if not dims or dims[0] % block:
            raise LoadError(
                f"{path}: cannot read GGUF metadata (tensor {name!r} of shape {dims} is not whole "
                f"{qtype.name} blocks of {block})"
            )
        nbytes = math.prod(dims) // block * type_size
        end = start + offset + nbytes
        if end > size:
            raise LoadError(
                f"{path}: cannot load GGUF weights (truncated: tensor {name!r} ends at byte {end}, the file has {size})"
            )
        tensors[name] = GGUFTensorInfo(int(qtype), dims, start + offset, nbytes)
    return GGUFHeader(meta, tensors)


def gguf_architecture(header: GGUFHeader) -> str:
    arch = header.metadata.get("general.architecture")
    return arch if isinstance(arch, str) else ""


def _config(header: GGUFHeader, path: str) -> Any:
    """The transformers config the file's metadata gives, by transformers' own GGUF table (as AutoConfig with
    gguf_file= builds it; the fields the scores use are compared with it in tests/test_real_weights.py)."""
    from transformers import AutoConfig
    from transformers.integrations import GGUF_CONFIG_DEFAULTS_MAPPING, GGUF_CONFIG_MAPPING

    arch = gguf_architecture(header)
    meta = header.metadata
    model_type = QK_ARCHITECTURES[arch]
    if arch == "llama" and meta.get("general.name") == "mistral":  # transformers' own rule
        model_type = "mistral"
    table = GGUF_CONFIG_MAPPING.get(arch, {})
    fields: dict[str, Any] = dict(GGUF_CONFIG_DEFAULTS_MAPPING.get(arch, {}))
    for key, value in meta.items():
        prefix, _, rest = key.partition(".")
        target = table.get(rest) if prefix == arch else None
        if target not in (None, -1) and not isinstance(value, tuple):
            fields[target] = value
    tokens = meta.get("tokenizer.ggml.tokens")
    if "vocab_size" not in fields and isinstance(tokens, tuple):
        fields["vocab_size"] = tokens[1]
    fields["tie_word_embeddings"] = "output.weight" not in header.tensors
    try:
        return AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # noqa: BLE001 - the config classes validate their fields, each in its own way
        raise LoadError(f"{path}: cannot read GGUF config ({type(exc).__name__}: {first_line(exc)})") from None


class GGUFSource(TensorSource):
    """A GGUF file's config and its tensors, read one by one and dequantized to float32 on request. The q/k/v and
    attention output tensors carry transformers' names (model.layers.N.self_attn.q_proj.weight); the others keep
    their GGUF names. n_params: the elements of every tensor stored (a tied embedding is stored once)."""

    def __init__(self, path: str | os.PathLike, header: GGUFHeader | None = None, name: str | None = None):
        self.path = os.fspath(path)
        self.header = header or read_gguf_header(self.path)
        arch = gguf_architecture(self.header)
        if arch not in QK_ARCHITECTURES:
            raise LoadError(f"{self.path}: GGUF architecture {arch!r} is not read by the q/k reader")
        self.config = _config(self.header, self.path)
        # llama.cpp stores the q/k rows of these in its rotary order (transformers' loader puts them back); the
        # attention's W_qk does not depend on it, the paper's grouped-query expansion does (scoring/paper_gqa.py)
        self.qk_rows_permuted = arch in LLAMA_CPP_PERMUTED
        self.name = name or os.path.splitext(os.path.basename(self.path))[0]
        self.n_params = sum(t.numel for t in self.header.tensors.values())
        self._names = {}
        for gname in self.header.tensors:
            m = _GGUF_QK.fullmatch(gname)
            self._names[f"model.layers.{m.group(1)}.self_attn.{_QK_NAMES[m.group(2)]}.weight" if m else gname] = gname
        blocks = {int(m.group(1)) for t in self.header.tensors if (m := re.match(r"blk\.(\d+)\.", t))}
        n_layers = int(getattr(self.config, "num_hidden_layers", 0) or 0)
        if blocks and max(blocks) >= n_layers:
            raise LoadError(
                f"{self.path}: stores tensors of block {max(blocks)}, but its metadata names {n_layers} layers"
            )
        for i in range(n_layers):
            for proj in ("q_proj", "k_proj"):
                if (key := f"model.layers.{i}.self_attn.{proj}.weight") not in self._names:
                    raise LoadError(f"{self.path}: stores no tensor for {key} (its metadata names more than it holds)")
        if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
            raise LoadError("the GGUF q/k reader needs a little-endian machine")

    def keys(self) -> list[str]:
        return list(self._names)

    def get(self, key: str) -> torch.Tensor:
        import numpy as np
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            gname = self._names[key]
        except KeyError:
            raise LoadError(f"{self.path}: no tensor named {key!r}") from None
        info = self.header.tensors[gname]
        raw = read_span(self.path, info.offset, info.nbytes, f"tensor {gname!r}").numpy()
        qtype = GGMLQuantizationType(info.ggml_type)
        try:
            values = dequantize(raw.reshape(*info.shape[:-1], -1), qtype)
        except NotImplementedError:
            raise LoadError(f"{self.path}: tensor {gname!r} is {qtype.name}, which gguf cannot dequantize") from None
        return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(info.shape)
