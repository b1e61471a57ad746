"""Weight sources for scoring: a config plus tensors fetched one by one, by name.

`open_source(...)` turns what a user passes (a local directory, a GGUF file, a hub id, a loaded transformers
model) into a `TensorSource`: `config` (a transformers PretrainedConfig), `name`, `model_type`, `n_params`,
`keys()` and `get(key) -> torch.Tensor`. Extraction (extract.iter_layer_qk) only asks for the q/k tensors,
so what a source reads is what the scores need.

Loading paths (their memory: the table in docs/cli.md): safetensors files (single or sharded) through
`SafetensorsSource`, a plain reader that parses each header itself and reads only the requested tensor's bytes
(no model built, no file mapped); pytorch_model.bin through `torch.load(weights_only=True, mmap=True)`, never
plain unpickling; a GGUF file through transformers' GGUF support (needs `gguf`; the whole model dequantized,
wrapped as a state dict); a hub id: config.json and the safetensors (else .bin) files downloaded at the given
revision, then read as a local directory (trust_remote_code needs a pinned commit hash); an in-memory
transformers model: its state dict and config.

n_params: for files, the sum of numel over every floating-point tensor stored (safetensors headers or .bin state
dict; integer buffers left out; a tied weight counts once); for a loaded model, num_parameters().
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any, Mapping

import torch

from .errors import UserError
from .extract import get_family, qk_keys
from .sources import LoadError, StateDictSource, TensorSource, first_line

__all__ = ["TensorSource", "SafetensorsSource", "StateDictSource", "LoadError", "open_source",
           "read_safetensors_header", "SAFETENSORS_DTYPES"]


# safetensors dtype codes -> torch dtypes (little-endian on disk)
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64,
    "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
SAFETENSORS_DTYPES.update({c: getattr(torch, t) for c, t in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
                           ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64")) if hasattr(torch, t)})

_MAX_HEADER = 100_000_000  # the largest header the safetensors format allows; a longer one is a corrupt file


# ---------------------------------------------------------------------------------------- safetensors


def _reject_constant(name: str) -> Any:  # json.loads takes NaN and Infinity, the format does not
    raise ValueError(f"{name} is not JSON")


def _nonneg_ints(value: Any, n: int | None = None) -> list[int] | None:
    """`value` if it is a list of JSON integers in [0, 2**63) (of length n), else None."""
    ok = isinstance(value, list) and (n is None or len(value) == n)
    return value if ok and all(type(v) is int and 0 <= v < 2**63 for v in value) else None


def read_safetensors_header(path: str | os.PathLike) -> tuple[dict[str, dict], int]:
    """(tensor entries, byte offset where data starts) of one safetensors file, validated as the safetensors
    library does: dtype codes, integer shapes and offsets, each tensor's byte size, and offsets that tile the
    data without overlap or gap up to the end of the file. Each entry is {"dtype", "shape", "data_offsets":
    [begin, end]} relative to the data start."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise LoadError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (n,) = struct.unpack("<Q", raw)
            if n > _MAX_HEADER or 8 + n > size:
                raise LoadError(f"{path}: malformed or truncated safetensors file (header of {n} bytes, file of {size})")
            header_bytes = f.read(n)
    except OSError as exc:
        raise LoadError(f"{path}: cannot read ({exc.strerror or exc})") from None
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
            raise LoadError(f"{path}: malformed safetensors header entry for {key!r} (shape {shape}, "
                            f"{entry['dtype']}, offsets {begin}..{end})")
        spans.append((begin, end, key))
    expected = 0  # the safetensors library's rule: sorted by offsets, each tensor starts where the last ended
    for begin, end, key in sorted(spans):
        if begin != expected:
            raise LoadError(f"{path}: malformed safetensors header: tensor {key!r} starts at data byte {begin}, "
                            f"not {expected} (overlapping or non-contiguous offsets)")
        if end > size - start:
            raise LoadError(f"{path}: truncated: tensor {key!r} ends at byte {start + end}, file has {size} bytes")
        expected = end
    if start + expected != size:
        raise LoadError(f"{path}: malformed safetensors file: {size - start - expected} bytes after the last tensor")
    return header, start


class SafetensorsSource(TensorSource):
    """Streaming reader of a directory of safetensors files: headers parsed once, tensors read on request.

    get(key) seeks to the tensor's bytes and reads them into a new tensor (no mmap of the file, no model).
    """

    def __init__(self, directory: str | os.PathLike, config: Any, name: str | None = None):
        self.directory = Path(directory)
        self.config = config
        self.name = name or self.directory.name
        index = self.directory / "model.safetensors.index.json"
        single = self.directory / "model.safetensors"
        if index.is_file():
            files = _index_files(index, ".safetensors")
        elif single.is_file():
            files = {single.name: None}
        else:
            raise LoadError(f"{self.directory}: no model.safetensors or model.safetensors.index.json")
        self._entries: dict[str, tuple[Path, int, dict]] = {}
        n_params = 0
        for fname, expected in files.items():
            path = self.directory / fname
            if not path.is_file():
                raise LoadError(f"{path}: missing (listed in {index.name})")
            header, start = read_safetensors_header(path)
            if expected is not None:
                missing = sorted(set(expected) - set(header))
                if missing:
                    raise LoadError(f"{path}: lacks tensor {missing[0]!r} that {index.name} places there")
            for key, entry in header.items():
                if key in self._entries:
                    raise LoadError(f"{path}: tensor {key!r} is also stored in {self._entries[key][0].name}")
                self._entries[key] = (path, start, entry)
                if SAFETENSORS_DTYPES[entry["dtype"]].is_floating_point:
                    n_params += math.prod(int(s) for s in entry["shape"])
        self.n_params = n_params
        if sys.byteorder != "little":  # pragma: no cover - every supported platform is little-endian
            raise LoadError("the streaming safetensors reader needs a little-endian machine")

    def keys(self) -> list[str]:
        return list(self._entries)

    def get(self, key: str) -> torch.Tensor:
        try:
            path, start, entry = self._entries[key]
        except KeyError:
            raise LoadError(f"{self.directory}: no tensor named {key!r}") from None
        begin, end = entry["data_offsets"]
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        buf = torch.empty(end - begin, dtype=torch.uint8)
        try:
            with open(path, "rb", buffering=0) as f:
                f.seek(start + begin)
                view, got = memoryview(buf.numpy()), 0
                while got < len(view) and (n := f.readinto(view[got:])):
                    got += n
        except OSError as exc:
            raise LoadError(f"{path}: cannot read tensor {key!r} ({exc.strerror or exc})") from None
        if got != end - begin:
            raise LoadError(f"{path}: truncated: tensor {key!r} has {got} of {end - begin} bytes")
        return buf.view(dtype).reshape(entry["shape"])


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


# --------------------------------------------------------------------------------------- state dicts


def _from_model(model: Any, name: str | None = None) -> StateDictSource:
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "state_dict"):
        raise UserError(f"{type(model).__name__} is not a transformers model (no .config / .state_dict)")
    label = name or getattr(config, "name_or_path", "") or type(model).__name__
    label = Path(str(label)).name or str(label)
    n_params = model.num_parameters() if hasattr(model, "num_parameters") else None
    return StateDictSource(_checkpoint_state_dict(model), config, label, n_params, model=model)


def _checkpoint_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The state dict under the tensor names a saved checkpoint uses (the family templates' names).

    transformers 5 renames some modules in memory (ViT, DeiT, BEiT, ViT-MAE, DINOv2 attention projections);
    save_pretrained converts them back, and so does this."""
    state = model.state_dict()
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # older transformers: in-memory names are the checkpoint names
        return state
    return revert_weight_conversion(model, state)


def _load_bin(directory: Path, config: Any, name: str | None) -> StateDictSource:
    index = directory / "pytorch_model.bin.index.json"
    files = list(_index_files(index, ".bin")) if index.is_file() else ["pytorch_model.bin"]
    tensors: dict[str, torch.Tensor] = {}
    for fname in files:
        path = directory / fname
        if not path.is_file():
            raise LoadError(f"{path}: missing" + (f" (listed in {index.name})" if index.is_file() else ""))
        tensors.update(_torch_load(path))
    return StateDictSource(tensors, config, name or directory.name)


def _torch_load(path: Path) -> dict[str, torch.Tensor]:
    import pickle
    import zipfile

    try:
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):  # legacy (non-zip) format cannot be mapped: read it, still weights-only
                raise
            sd = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise LoadError(f"{path}: refused to unpickle (only plain tensors are loaded, weights_only=True): {first_line(exc)}") from None
    except (RuntimeError, OSError, EOFError, zipfile.BadZipFile, ValueError) as exc:
        raise LoadError(f"{path}: cannot read ({first_line(exc)})") from None
    if isinstance(sd, Mapping) and "state_dict" in sd and isinstance(sd["state_dict"], Mapping):
        sd = sd["state_dict"]
    if not isinstance(sd, Mapping) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise LoadError(f"{path}: not a state dict of tensors")
    return dict(sd)


# ----------------------------------------------------------------------------------------------- config


def _check_model_type(config_json: Path) -> str:
    """Refuse an unsupported or missing model_type before transformers tries to interpret the config."""
    try:
        raw = json.loads(config_json.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoadError(f"{config_json}: malformed config ({exc})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not model_type or not isinstance(model_type, str):
        raise LoadError(f"{config_json}: model_type must be a non-empty string, got {model_type!r}")
    get_family(model_type)  # UnsupportedArchitecture names it and lists the supported ones
    return model_type


def _load_config(directory: Path, trust_remote_code: bool) -> Any:
    config_json = directory / "config.json"
    if not config_json.is_file():
        raise LoadError(f"{directory}: no config.json")
    _check_model_type(config_json)
    try:  # transformers 5 configs validate their field types
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # pragma: no cover - an older huggingface_hub: no validation
        StrictDataclassError = ValueError
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(directory), local_files_only=True, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError, StrictDataclassError) as exc:
        text = " ".join(str(exc).split())  # a validation error names the field on one line and the cause on the next
        raise LoadError(f"{config_json}: transformers cannot read this config ({text[:300] or type(exc).__name__})") from None


# -------------------------------------------------------------------------------------------- dispatch

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

HUB_CONFIG_PATTERNS = ["config.json"]
HUB_SAFETENSORS_PATTERNS = ["model.safetensors", "model-*.safetensors", "model.safetensors.index.json"]
HUB_BIN_PATTERNS = ["pytorch_model.bin", "pytorch_model-*.bin", "pytorch_model.bin.index.json"]


def looks_like_hub_id(text: str) -> bool:
    """'org/name' or 'name' made of the characters the hub allows (no path separators beyond one '/')."""
    return bool(_HUB_ID.match(text)) and ".." not in text and not text.endswith((".json", ".safetensors", ".bin", ".gguf"))


def open_source(source: Any, *, gguf_file: str | None = None, revision: str | None = None,
                trust_remote_code: bool = False, name: str | None = None) -> TensorSource:
    """A TensorSource for a TensorSource, a transformers model, a local directory, a .gguf path or a hub id.

    gguf_file: a GGUF file name inside the directory / hub repo (or a full path when `source` is None).
    revision: hub revision (branch, tag or commit), default "main"; ignored for local paths.
    """
    if isinstance(source, TensorSource):
        if name:
            source.name = name
        return source
    if source is None and gguf_file:
        source, gguf_file = str(Path(gguf_file).parent), Path(gguf_file).name
    if not isinstance(source, (str, os.PathLike)):
        return _from_model(source, name)
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf" and not gguf_file:
        return _open_gguf(str(path.parent), path.name, None, trust_remote_code, name or path.stem)
    if gguf_file:
        if path.is_dir():
            if not (path / gguf_file).is_file():
                raise LoadError(f"{path / gguf_file}: GGUF file does not exist")
            return _open_gguf(str(path), gguf_file, None, trust_remote_code, name or Path(gguf_file).stem)
        if path.exists() or not looks_like_hub_id(text):
            raise LoadError(f"{text}: not a directory (a GGUF file needs the directory or hub id that holds it)")
        return _open_gguf(text, gguf_file, _pinned(text, revision, trust_remote_code), trust_remote_code,
                          name or Path(gguf_file).stem)
    if path.is_dir():
        return _open_dir(path, trust_remote_code, name)
    if path.exists():
        raise LoadError(f"{text}: not a model directory (pass the folder with config.json, or a .gguf file)")
    if not looks_like_hub_id(text):
        raise LoadError(f"{text}: no such file or directory")
    return _open_hub(text, _pinned(text, revision, trust_remote_code), trust_remote_code, name)


def _pinned(repo_id: str, revision: str | None, trust_remote_code: bool) -> str:
    """The hub revision to read; remote code runs only at a commit hash, never at a moving branch or tag."""
    revision = revision or "main"
    if trust_remote_code and not re.fullmatch(r"[0-9a-f]{40}", revision):
        raise LoadError(f"{repo_id}: trust_remote_code runs the repository's own code, so pin it to a commit: "
                        f"--revision (config `revision:`) must be a 40-hex commit hash, not {revision!r}")
    return revision


def _open_dir(path: Path, trust_remote_code: bool, name: str | None) -> TensorSource:
    config = _load_config(path, trust_remote_code)
    if (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file():
        return SafetensorsSource(path, config, name)
    if (path / "pytorch_model.bin").is_file() or (path / "pytorch_model.bin.index.json").is_file():
        return _load_bin(path, config, name)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    hint = f" (found {', '.join(ggufs)}: pass --gguf-file)" if ggufs else ""
    raise LoadError(f"{path}: no weights (model.safetensors, model.safetensors.index.json or pytorch_model.bin){hint}")


def _open_hub(repo_id: str, revision: str, trust_remote_code: bool, name: str | None) -> TensorSource:
    from huggingface_hub import snapshot_download

    extra = ["*.py"] if trust_remote_code else []
    try:
        local = snapshot_download(repo_id, revision=revision,
                                  allow_patterns=HUB_CONFIG_PATTERNS + HUB_SAFETENSORS_PATTERNS + extra)
        path = Path(local)
        if not any(path.glob("*.safetensors")):
            local = snapshot_download(repo_id, revision=revision, allow_patterns=HUB_CONFIG_PATTERNS + HUB_BIN_PATTERNS + extra)
            path = Path(local)
    except (OSError, ValueError) as exc:
        raise LoadError(f"{repo_id}@{revision}: not a local path, and the hub download failed ({type(exc).__name__}: {first_line(exc)})") from None
    return _open_dir(path, trust_remote_code, name or repo_id)


def _open_gguf(where: str, gguf_file: str, revision: str | None, trust_remote_code: bool, name: str) -> TensorSource:
    try:
        import gguf
    except ImportError:
        raise LoadError("reading GGUF files needs the `gguf` package (pip install gguf)") from None
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import cached_file
    from transformers.utils import logging as hf_logging

    kwargs: dict[str, Any] = {"gguf_file": gguf_file, "trust_remote_code": trust_remote_code,
                              **({"revision": revision} if revision else {})}
    what = f"{where}/{gguf_file}"
    # transformers hands the file's bytes to the gguf package's parser, which fails on a damaged file with
    # whatever it meets (struct.error, IndexError, numpy's errors): every failure there is this file's
    try:
        config = AutoConfig.from_pretrained(where, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise LoadError(f"{what}: cannot read GGUF config ({type(exc).__name__}: {first_line(exc)})") from None
    family = get_family(config.model_type)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report (missing keys) is checked below, and stderr keeps one line
    try:  # the config is passed on, so the (slow) GGUF metadata is parsed once for it, once for the weights
        model, info = AutoModelForCausalLM.from_pretrained(where, config=config, output_loading_info=True, **kwargs)
        path = cached_file(where, gguf_file, **({"revision": revision} if revision else {}))
        blocks = {int(m.group(1)) for t in gguf.GGUFReader(path).tensors if (m := re.match(r"blk\.(\d+)\.", t.name))}
    except Exception as exc:  # noqa: BLE001
        raise LoadError(f"{what}: cannot load GGUF weights ({type(exc).__name__}: {first_line(exc)})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    src = _from_model(model, name)
    layers = [names for *_, names in qk_keys(family, config, src.keys())]
    lost = set(info.get("missing_keys") or ()).intersection(n for names in layers for n in names)
    if lost:  # transformers initialized these at random: they are not the file's
        raise LoadError(f"{what}: stores no tensor for {min(lost)} (its metadata names more than it holds)")
    if blocks and max(blocks) >= len(layers):  # transformers skips the blocks beyond block_count without a word
        raise LoadError(f"{what}: stores tensors of block {max(blocks)}, but its metadata names {len(layers)} layers")
    return src
