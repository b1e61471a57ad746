"""Weight sources for scoring: a config plus tensors fetched one by one, by name.

`open_source(...)` turns what a user passes (a local directory, a GGUF file, a hub id, a loaded transformers
model) into a `TensorSource`: `config` (a transformers PretrainedConfig), `name`, `model_type`, `n_params`,
`keys()` and `get(key) -> torch.Tensor`. Extraction (extract.iter_layer_qk) only asks for the q/k tensors,
so what a source reads is what the scores need.

Loading paths (their memory: the table in docs/cli.md): safetensors files (single or sharded) through
`SafetensorsSource`, a plain reader that parses each header itself and reads only the requested tensor's bytes
(no model built, no file mapped); pytorch_model.bin through `torch.load(weights_only=True, mmap=True)`, never
plain unpickling; a GGUF file through `gguf_qk.GGUFSource` (only the q/k tensors read and dequantized) for
llama, mistral, qwen2 and gemma3 files, else through transformers' GGUF support (the whole model dequantized,
wrapped as a state dict; `open_gguf_transformers`); both need `gguf`;
a hub id: config.json and the safetensors (else .bin) files downloaded at the given
revision, then read as a local directory (trust_remote_code needs a pinned commit hash), except that online,
for safetensors weights, only config.json (and the index) is downloaded and the weights are read by HTTP range
requests, headers and q/k tensors only (hub.py; the download stays the fallback); an in-memory
transformers model: its state dict and config.

n_params: for files, the sum of numel over every floating-point tensor stored (safetensors headers or .bin state
dict; integer buffers left out; a tied weight counts once); for a loaded model, num_parameters().
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from attention_geometry.architectures.keys import get_family, qk_keys
from attention_geometry.errors import UserError
from attention_geometry.formats.packages import is_spec, resolve
from attention_geometry.weights.base import LoadError, StateDictSource, TensorSource, first_line
from attention_geometry.weights.safetensors_io import (
    SafetensorsSource,
    _index_files,
)

__all__ = [
    "open_source",
    "open_gguf_transformers",
]


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
    state = _merge_adapters(model, model.state_dict())
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # older transformers: in-memory names are the checkpoint names
        return state
    return revert_weight_conversion(model, state)


def _merge_adapters(model: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict with every adapter layer (peft's tuner layers, LoRA and its kin: a module holding its
    wrapped `base_layer` and a `get_delta_weight(adapter)`) replaced by the weight it computes with: the base
    weight plus the delta of each active adapter not merged into it yet (none while the adapters are disabled),
    under the base layer's own names (`NAME.weight`, `NAME.bias`); the adapters' own tensors are dropped. A model
    without adapter layers is returned as it is. The model is left unchanged (no merge_and_unload)."""
    adapters = [
        (name, m)
        for name, m in model.named_modules()
        if hasattr(m, "base_layer") and callable(getattr(m, "get_delta_weight", None))
    ]
    if not adapters:
        return state
    state = dict(state)
    for name, module in adapters:
        prefix = f"{name}." if name else ""
        weight = module.base_layer.weight.detach()
        if not getattr(module, "disable_adapters", False):
            done = set(getattr(module, "merged_adapters", ()))  # already added into base_layer.weight
            for adapter in getattr(module, "active_adapters", ()):
                if adapter not in done and adapter in getattr(module, "scaling", {}):  # this layer has it
                    with torch.no_grad():
                        weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        for key in [k for k in state if k.startswith(prefix) and "." in k[len(prefix) :]]:
            del state[key]  # base_layer.*, lora_A.*, lora_B.*, ...
        state[f"{prefix}weight"] = weight
        bias = getattr(module.base_layer, "bias", None)
        if bias is not None:
            state[f"{prefix}bias"] = bias.detach()
    return state


def _load_bin(directory: Path, config: Any, name: str | None) -> StateDictSource:
    index = directory / "pytorch_model.bin.index.json"
    files = list(_index_files(index, ".bin")) if index.is_file() else ["pytorch_model.bin"]
    tensors: dict[str, torch.Tensor] = {}
    for fname in files:
        path = directory / fname
        if not path.is_file():
            raise LoadError(f"{path}: missing" + (f" (listed in {index.name})" if index.is_file() else ""))
        tensors.update(_torch_load(path))
    source = StateDictSource(tensors, config, name or directory.name)
    source.directory = directory
    return source


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
        raise LoadError(
            f"{path}: refused to unpickle (only plain tensors are loaded, weights_only=True): {first_line(exc)}"
        ) from None
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
        raise LoadError(
            f"{config_json}: transformers cannot read this config ({text[:300] or type(exc).__name__})"
        ) from None


# -------------------------------------------------------------------------------------------- dispatch

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")

HUB_CONFIG_PATTERNS = ["config.json"]
HUB_SAFETENSORS_PATTERNS = ["model.safetensors", "model-*.safetensors", "model.safetensors.index.json"]
HUB_BIN_PATTERNS = ["pytorch_model.bin", "pytorch_model-*.bin", "pytorch_model.bin.index.json"]


def looks_like_hub_id(text: str) -> bool:
    """'org/name' or 'name' made of the characters the hub allows (no path separators beyond one '/')."""
    return (
        bool(_HUB_ID.match(text)) and ".." not in text and not text.endswith((".json", ".safetensors", ".bin", ".gguf"))
    )


def open_source(
    source: Any,
    *,
    gguf_file: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    name: str | None = None,
) -> TensorSource:
    """A TensorSource for a TensorSource, a transformers model, a local directory, a .gguf path or a hub id.

    source: also `pkg:PACKAGE/PATH`, a file or folder inside an installed package (formats.packages).
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
    if is_spec(text):  # pkg:PACKAGE/PATH, a model shipped in an installed package
        try:
            text = resolve(text)
        except UserError as exc:
            raise LoadError(str(exc)) from None
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf" and not gguf_file:
        return _open_gguf(str(path.parent), path.name, None, trust_remote_code, name)
    if gguf_file:
        if path.is_dir():
            if not (path / gguf_file).is_file():
                raise LoadError(f"{path / gguf_file}: GGUF file does not exist")
            return _open_gguf(str(path), gguf_file, None, trust_remote_code, name)
        if path.exists() or not looks_like_hub_id(text):
            raise LoadError(f"{text}: not a directory (a GGUF file needs the directory or hub id that holds it)")
        return _open_gguf(text, gguf_file, _pinned(text, revision, trust_remote_code), trust_remote_code, name)
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
        raise LoadError(
            f"{repo_id}: trust_remote_code runs the repository's own code, so pin it to a commit: "
            f"--revision (config `revision:`) must be a 40-hex commit hash, not {revision!r}"
        )
    return revision


_CARD_ID = re.compile(r"""(?:from_pretrained|SentenceTransformer)\(\s*['"]([\w.-]+/[\w.-]+)['"]""")


def origin_model_name(origin: str | None) -> str | None:
    """The hub id of a prefetch-qk subset's origin (its metadata ORIGIN_KEY, `ID@COMMIT`), else None."""
    repo_id = (origin.rpartition("@")[0] or origin) if isinstance(origin, str) else ""
    return repo_id if repo_id and looks_like_hub_id(repo_id) else None


def dir_model_name(path: Path) -> str:
    """The default `model` label of a local model folder: the repo id where the folder records it, else the
    folder's name. Recorded: a hub cache snapshot (models--ORG--NAME/snapshots/HASH), or a model card
    (README.md) whose code loads exactly one repo id (`from_pretrained('ORG/NAME')`,
    `SentenceTransformer('ORG/NAME')`). config.json's `_name_or_path` is not used: it names the model the
    weights were loaded from before saving (for all-MiniLM-L6-v2 its base, nreimers/MiniLM-L6-H384-uncased)."""
    path = path.resolve()
    if path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return path.parent.parent.name[len("models--") :].replace("--", "/", 1)
    card = path / "README.md"
    ids = set(_CARD_ID.findall(card.read_text(encoding="utf-8", errors="replace"))) if card.is_file() else set()
    return ids.pop() if len(ids) == 1 else path.name


def _open_dir(path: Path, trust_remote_code: bool, name: str | None) -> TensorSource:
    config = _load_config(path, trust_remote_code)
    if (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file():
        src = SafetensorsSource(path, config, name or dir_model_name(path))
        # a prefetch-qk folder is labelled as the model it holds (its origin, read with the header), not the folder
        src.name = name or origin_model_name(src.origin) or src.name
        return src
    name = name or dir_model_name(path)
    if (path / "pytorch_model.bin").is_file() or (path / "pytorch_model.bin.index.json").is_file():
        return _load_bin(path, config, name)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    hint = f" (found {', '.join(ggufs)}: pass --gguf-file)" if ggufs else ""
    raise LoadError(f"{path}: no weights (model.safetensors, model.safetensors.index.json or pytorch_model.bin){hint}")


def _open_hub(repo_id: str, revision: str, trust_remote_code: bool, name: str | None) -> TensorSource:
    """A hub model: safetensors weights read by range requests (hub.py) when the hub allows, else downloaded."""
    try:
        import httpx2
    except ImportError:  # the huggingface_hub of transformers 4.x talks to the hub through requests, not httpx2
        from importlib.metadata import PackageNotFoundError, version

        try:
            hub = f"huggingface_hub {version('huggingface_hub')}"
        except PackageNotFoundError:
            hub = "no huggingface_hub"
        raise LoadError(
            f"{repo_id}: reading a model from the hub needs the huggingface_hub of transformers 5 (its httpx2 "
            f"client), and this environment has {hub}: download the model and pass its folder"
        ) from None
    from huggingface_hub import snapshot_download

    from attention_geometry.weights.hub import hub_safetensors

    failed = f"{repo_id}@{revision}: not a local path, and the hub download failed"
    try:
        remote = hub_safetensors(repo_id, revision, trust_remote_code)
    except (OSError, ValueError, httpx2.HTTPError) as exc:
        raise LoadError(f"{failed} ({type(exc).__name__}: {first_line(exc)})") from None
    if remote is not None:  # a server without range requests: each HubFile downloads its file (hub.py)
        local, revision, open_file = remote  # the commit, from here on
        return SafetensorsSource(local, _load_config(local, trust_remote_code), name or repo_id, open_file)
    extra = ["*.py"] if trust_remote_code else []
    try:
        local = snapshot_download(
            repo_id, revision=revision, allow_patterns=HUB_CONFIG_PATTERNS + HUB_SAFETENSORS_PATTERNS + extra
        )
        path = Path(local)
        if not any(path.glob("*.safetensors")):
            local = snapshot_download(
                repo_id, revision=revision, allow_patterns=HUB_CONFIG_PATTERNS + HUB_BIN_PATTERNS + extra
            )
            path = Path(local)
    except (OSError, ValueError, httpx2.HTTPError) as exc:
        raise LoadError(f"{failed} ({type(exc).__name__}: {first_line(exc)})") from None
    return _open_dir(path, trust_remote_code, name or repo_id)


def gguf_model_name(reader, gguf_file: str) -> str:
    """The default `model` label of a GGUF file (a gguf.GGUFReader, or the gguf_qk.GGUFHeader of the q/k
    reader): the repo it was converted from (metadata `general.source.huggingface.repository`), else the file
    name without .gguf (`general.name` is the converter's free text: SmolLM2-135M-Instruct's says 'Smollm2 135M
    8k Lc100K Mix1 Ep2')."""
    key = "general.source.huggingface.repository"
    if hasattr(reader, "metadata"):  # a GGUFHeader: values already parsed
        repo = reader.metadata.get(key)
        return repo if isinstance(repo, str) else Path(gguf_file).stem
    field = reader.fields.get(key)
    return str(field.contents()) if field is not None else Path(gguf_file).stem


def _open_gguf(
    where: str, gguf_file: str, revision: str | None, trust_remote_code: bool, name: str | None
) -> TensorSource:
    """The q/k reader (gguf_qk.GGUFSource) for the architectures it reads, else transformers' whole-model load."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise LoadError("reading GGUF files needs the `gguf` package (pip install gguf)") from None
    from attention_geometry.weights.gguf_qk import QK_ARCHITECTURES, GGUFSource, gguf_architecture, read_gguf_header

    path = os.path.join(where, gguf_file)
    if revision is not None:  # a hub repository: the file is downloaded whole (once, into the hub cache)
        from transformers.utils import cached_file

        try:
            path = cached_file(where, gguf_file, revision=revision)
        except (OSError, ValueError) as exc:
            raise LoadError(
                f"{where}@{revision}/{gguf_file}: the hub download failed ({type(exc).__name__}: {first_line(exc)})"
            ) from None
    header = read_gguf_header(path)
    if gguf_architecture(header) in QK_ARCHITECTURES:
        return GGUFSource(path, header, name or gguf_model_name(header, gguf_file))
    return open_gguf_transformers(where, gguf_file, revision, trust_remote_code, name)


def open_gguf_transformers(
    where: str, gguf_file: str, revision: str | None, trust_remote_code: bool, name: str | None
) -> StateDictSource:
    """A GGUF file loaded whole by transformers (every tensor dequantized to float32, wrapped as a state dict
    with the model in `.model`): the path of the architectures the q/k reader does not read, and the
    reference the q/k reader is tested against."""
    import gguf
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import cached_file
    from transformers.utils import logging as hf_logging

    kwargs: dict[str, Any] = {
        "gguf_file": gguf_file,
        "trust_remote_code": trust_remote_code,
        **({"revision": revision} if revision else {}),
    }
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
        reader = gguf.GGUFReader(path)
        blocks = {int(m.group(1)) for t in reader.tensors if (m := re.match(r"blk\.(\d+)\.", t.name))}
        name = name or gguf_model_name(reader, gguf_file)
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
