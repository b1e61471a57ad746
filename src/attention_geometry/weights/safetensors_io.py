"""The safetensors format, its one home: the header reader (validated as the safetensors library validates),
`SafetensorsSource` (the streaming reader: each requested tensor's bytes read on request, from a local file or,
through hub.HubFile, by HTTP range requests), and `write_safetensors` (a streaming writer, one tensor in
memory at a time, for the q/k subsets of prefetch.py). loading.open_source picks the reader. `get` hands out an
fp8 tensor dequantized with its block scales (base.dequantized), `get_stored` the bytes as stored."""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from attention_geometry.weights.base import LoadError, TensorSource, dequantized, first_line

__all__ = [
    "SAFETENSORS_DTYPES",
    "N_PARAMS_KEY",
    "ORIGIN_KEY",
    "LocalFile",
    "SafetensorsSource",
    "read_safetensors_header",
    "read_safetensors_metadata",
    "write_safetensors",
]


# safetensors dtype codes -> torch dtypes (little-endian on disk)
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
SAFETENSORS_DTYPES.update(
    {
        c: getattr(torch, t)
        for c, t in (
            ("F8_E4M3", "float8_e4m3fn"),
            ("F8_E5M2", "float8_e5m2"),
            ("U16", "uint16"),
            ("U32", "uint32"),
            ("U64", "uint64"),
        )
        if hasattr(torch, t)
    }
)

_MAX_HEADER = 100_000_000  # the largest header the safetensors format allows; a longer one is a corrupt file
# __metadata__ key of a q/k subset (prefetch.py): the floating-point parameter count of the full checkpoint
N_PARAMS_KEY = "attention_geometry.n_params"
# ... and where its tensors came from (`ORG/NAME@COMMIT` for a hub model): a folder's default model label
ORIGIN_KEY = "attention_geometry.origin"


# ---------------------------------------------------------------------------------------- safetensors


def _reject_constant(name: str) -> Any:  # json.loads takes NaN and Infinity, the format does not
    raise ValueError(f"{name} is not JSON")


def _nonneg_ints(value: Any, n: int | None = None) -> list[int] | None:
    """`value` if it is a list of JSON integers in [0, 2**63) (of length n), else None."""
    ok = isinstance(value, list) and (n is None or len(value) == n)
    return value if ok and all(type(v) is int and 0 <= v < 2**63 for v in value) else None


class LocalFile:
    """A local file's bytes, read at an offset (the streaming reader's default; hub.HubFile reads a hub file)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.where = str(self.path)

    @property
    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError as exc:
            raise LoadError(f"{self.path}: cannot read ({exc.strerror or exc})") from None

    def read_into(self, offset: int, view: memoryview, what: str = "") -> int:
        """Read len(view) bytes at `offset` into `view`; the number read (fewer at the end of the file)."""
        try:
            with open(self.path, "rb", buffering=0) as f:
                f.seek(offset)
                got = 0
                while got < len(view) and (n := f.readinto(view[got:])):
                    got += n
        except OSError as exc:
            raise LoadError(f"{self.path}: cannot read{' ' + what if what else ''} ({exc.strerror or exc})") from None
        return got


def read_safetensors_header(path: str | os.PathLike | LocalFile) -> tuple[dict[str, dict], int]:
    """(tensor entries, byte offset where data starts) of one safetensors file, validated as the safetensors
    library does: dtype codes, integer shapes and offsets, each tensor's byte size, and offsets that tile the
    data without overlap or gap up to the end of the file. Each entry is {"dtype", "shape", "data_offsets":
    [begin, end]} relative to the data start. `path` may be a file object with `where`, `size` and
    `read_into` (a LocalFile, a hub.HubFile): only the 8-byte length and the header are read."""
    header, start, _ = _read_header(path if hasattr(path, "read_into") else LocalFile(path))
    return header, start


def read_safetensors_metadata(path: str | os.PathLike | LocalFile) -> dict[str, str]:
    """The __metadata__ of one safetensors file ({} when it has none), read and validated as
    read_safetensors_header reads the header."""
    return _read_header(path if hasattr(path, "read_into") else LocalFile(path))[2]


def _read_header(f: Any) -> tuple[dict[str, dict], int, dict[str, str]]:
    """read_safetensors_header, plus the header's __metadata__ ({} when absent)."""
    path = f.where
    raw = bytearray(8)
    got = f.read_into(0, memoryview(raw), "its header")
    note = getattr(f, "size_note", "")  # a hub file: the size is the server's answer, which may be wrong
    note = f", as the server states ({note}): a wrong size from the server, or a damaged file" if note else ""
    if got < 8:
        raise LoadError(f"{path}: not a safetensors file (shorter than its 8-byte header length){note}")
    size = f.size
    (n,) = struct.unpack("<Q", raw)
    if n > _MAX_HEADER or 8 + n > size:
        raise LoadError(f"{path}: malformed or truncated safetensors file (header of {n} bytes, file of {size}){note}")
    header_bytes = bytearray(n)
    if f.read_into(8, memoryview(header_bytes), "its header") < n:
        raise LoadError(f"{path}: truncated safetensors header")
    try:
        header = json.loads(header_bytes.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise LoadError(f"{path}: malformed safetensors header ({first_line(exc)})") from None
    if not isinstance(header, dict):
        raise LoadError(f"{path}: malformed safetensors header (not a JSON object)")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise LoadError(f"{path}: malformed safetensors header (__metadata__ is not a map of strings)")
    start = 8 + n
    spans = []
    for key, entry in header.items():
        ok = isinstance(entry, dict) and isinstance(entry.get("dtype"), str) and entry["dtype"] in SAFETENSORS_DTYPES
        shape = _nonneg_ints(entry.get("shape")) if ok else None
        offsets = _nonneg_ints(entry.get("data_offsets"), 2) if ok else None
        if shape is None or offsets is None or offsets[0] > offsets[1]:
            raise LoadError(f"{path}: malformed safetensors header entry for {key!r}: {entry!r}"[:300])
        begin, end = offsets
        if end - begin != math.prod(shape) * SAFETENSORS_DTYPES[entry["dtype"]].itemsize:
            raise LoadError(
                f"{path}: malformed safetensors header entry for {key!r} (shape {shape}, "
                f"{entry['dtype']}, offsets {begin}..{end})"
            )
        spans.append((begin, end, key))
    expected = 0  # the safetensors library's rule: sorted by offsets, each tensor starts where the last ended
    for begin, end, key in sorted(spans):
        if begin != expected:
            raise LoadError(
                f"{path}: malformed safetensors header: tensor {key!r} starts at data byte {begin}, "
                f"not {expected} (overlapping or non-contiguous offsets)"
            )
        if end > size - start:
            raise LoadError(
                f"{path}: truncated: tensor {key!r} ends at byte {start + end}, file has {size} bytes{note}"
            )
        expected = end
    if start + expected != size:
        raise LoadError(
            f"{path}: malformed safetensors file: {size - start - expected} bytes after the last tensor, which "
            f"ends at byte {start + expected} of {size}{note}"
        )
    return header, start, meta or {}


class SafetensorsSource(TensorSource):
    """Streaming reader of a directory of safetensors files: headers parsed once, tensors read on request.

    get(key) reads the tensor's bytes into a new tensor (no mmap of the file, no model). open_file(name)
    opens a weight file by name (default: LocalFile of the file in `directory`; hub.HubFile reads it by HTTP
    range requests, so the weight files need not be in `directory`, only config.json and the index). A file
    whose metadata carries N_PARAMS_KEY (a q/k subset written by `prefetch-qk`) reports that n_params, and
    `origin` the source ORIGIN_KEY names.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        config: Any,
        name: str | None = None,
        open_file: Callable[[str], Any] | None = None,
    ):
        self.directory = Path(directory)
        self.config = config
        self.name = name or self.directory.name
        index = self.directory / "model.safetensors.index.json"
        single = self.directory / "model.safetensors"
        if index.is_file():
            files = _index_files(index, ".safetensors")
        elif single.is_file() or open_file is not None:
            files = {single.name: None}
        else:
            raise LoadError(f"{self.directory}: no model.safetensors or model.safetensors.index.json")
        self._entries: dict[str, tuple[Any, int, dict]] = {}
        self.origin: str | None = None  # ORIGIN_KEY of the metadata (a prefetch-qk subset's source), if any
        n_params, stated = 0, []
        for fname, expected in files.items():
            if open_file is None:
                if not (self.directory / fname).is_file():
                    raise LoadError(f"{self.directory / fname}: missing (listed in {index.name})")
                f = LocalFile(self.directory / fname)
            else:
                f = open_file(fname)
            header, start, meta = _read_header(f)
            if expected is not None:
                missing = sorted(set(expected) - set(header))
                if missing:
                    raise LoadError(f"{f.where}: lacks tensor {missing[0]!r} that {index.name} places there")
            for key, entry in header.items():
                if key in self._entries:
                    raise LoadError(
                        f"{f.where}: tensor {key!r} is also stored in {Path(self._entries[key][0].where).name}"
                    )
                self._entries[key] = (f, start, entry)
                if SAFETENSORS_DTYPES[entry["dtype"]].is_floating_point:
                    n_params += math.prod(int(s) for s in entry["shape"])
            if isinstance(meta.get(ORIGIN_KEY), str):
                self.origin = meta[ORIGIN_KEY]
            if N_PARAMS_KEY in meta:
                if not meta[N_PARAMS_KEY].isdigit():
                    raise LoadError(f"{f.where}: metadata {N_PARAMS_KEY} is not a count: {meta[N_PARAMS_KEY]!r}"[:300])
                stated.append(int(meta[N_PARAMS_KEY]))
        self.n_params = sum(stated) if stated else n_params
        if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
            raise LoadError("the streaming safetensors reader needs a little-endian machine")

    def keys(self) -> list[str]:
        return list(self._entries)

    @property
    def files(self) -> list[Any]:
        """The weight files read (LocalFile or hub.HubFile objects), one per file."""
        return list({id(f): f for f, _, _ in self._entries.values()}.values())

    def spec(self, key: str) -> tuple[torch.dtype, list[int]]:
        """(dtype, shape) of a tensor, from the header (nothing read)."""
        _, _, entry = self._entry(key)
        return SAFETENSORS_DTYPES[entry["dtype"]], list(entry["shape"])

    def _entry(self, key: str) -> tuple[Any, int, dict]:
        try:
            return self._entries[key]
        except KeyError:
            raise LoadError(f"{self.directory}: no tensor named {key!r}") from None

    def get(self, key: str) -> torch.Tensor:
        """The tensor `key`; an fp8 tensor dequantized with its block scales (base.dequantized)."""
        return dequantized(
            str(self.directory), self.config, key, self.get_stored(key), self._entries.__contains__, self.get_stored
        )

    def get_stored(self, key: str) -> torch.Tensor:
        """The tensor `key` as stored (dtype and bytes of the file; what prefetch-qk copies)."""
        # Not safetensors.safe_open for local files (0.8.0), measured: score_model of a 1.235 GB Llama checkpoint
        # (8 layers, 6 shards, warm page cache, 1 thread, fresh process each, 3-5 runs): this read 1.99-2.15 s,
        # peak RSS +97-105 MiB; safe_open per tensor 1.83-1.98 s, +92-105 MiB; safe_open kept open per file
        # 1.94-2.10 s, +167-180 MiB (the mapped pages stay). No gain beyond noise, and safe_open maps the file,
        # which test_loading's test_streaming_reads_only_requested_bytes rules out (it counts 3,776 of the 7,872
        # bytes read); a HubFile cannot go through safe_open at all. The header stays ours for its messages.
        f, start, entry = self._entry(key)
        begin, end = entry["data_offsets"]
        check_fits_memory(f.where, key, entry, end - begin)
        buf = torch.empty(end - begin, dtype=torch.uint8)
        got = f.read_into(start + begin, memoryview(buf.numpy()), f"tensor {key!r}")
        if got != end - begin:
            raise LoadError(f"{f.where}: truncated: tensor {key!r} has {got} of {end - begin} bytes")
        return buf.view(SAFETENSORS_DTYPES[entry["dtype"]]).reshape(entry["shape"])


def check_fits_memory(where: str, key: str, entry: dict, nbytes: int) -> None:
    """A LoadError naming the tensor where its declared size, read and then held in float64 for scoring, is more than
    the memory available: a header may declare tensors its file does not really hold (a sparse file of 80 GB of
    holes passes every offset check), and allocating them would fail with a traceback, or worse (issue 59.5)."""
    from attention_geometry.formats.files import mem_available_bytes

    avail = mem_available_bytes()
    itemsize = SAFETENSORS_DTYPES[entry["dtype"]].itemsize
    need = nbytes + nbytes * 8 // max(1, itemsize)  # the bytes read, then a float64 copy
    if avail is not None and need > avail:
        raise LoadError(
            f"{where}: tensor {key!r} declares shape {entry['shape']} ({entry['dtype']}, {nbytes / 2**30:.1f} GiB); "
            f"reading and scoring it needs about {need / 2**30:.1f} GiB, more than the {avail / 2**30:.1f} GiB of "
            "memory available"
        )


def _index_files(index: Path, suffix: str) -> dict[str, list[str]]:
    """file name -> tensor names, from a transformers *.index.json weight map."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        if not isinstance(weight_map, dict) or not weight_map:
            raise TypeError
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise LoadError(f"{index}: malformed index (needs a non-empty JSON object 'weight_map')") from None
    files: dict[str, list[str]] = {}
    for key, fname in weight_map.items():
        if not isinstance(fname, str) or not fname.endswith(suffix) or "/" in fname or "\\" in fname:
            raise LoadError(f"{index}: weight_map entry {key!r} -> {fname!r} is not a {suffix} file in this folder")
        files.setdefault(fname, []).append(key)
    return files


_DTYPE_CODES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}


def write_safetensors(
    path: str | os.PathLike,
    specs: Iterable[tuple[str, torch.dtype, list[int]]],
    fetch: Callable[[str], torch.Tensor],
    metadata: dict[str, str] | None = None,
) -> int:
    """Write a safetensors file tensor by tensor: the header from `specs` (name, dtype, shape), then each
    tensor's bytes from fetch(name), so only one tensor is in memory at a time. The header is padded with
    spaces to a multiple of 8 bytes, as the safetensors library writes it. Returns the file's size."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset, order = 0, []
    for name, dtype, shape in specs:
        nbytes = math.prod(shape) * dtype.itemsize
        header[name] = {"dtype": _DTYPE_CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        order.append((name, dtype, list(shape)))
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for name, dtype, shape in order:
            t = fetch(name)
            if t.dtype != dtype or list(t.shape) != shape:
                raise LoadError(f"{name}: expected {dtype} {shape}, got {t.dtype} {list(t.shape)}")
            f.write(memoryview(t.detach().cpu().contiguous().view(torch.uint8).reshape(-1).numpy()))
    return 8 + len(raw) + offset
