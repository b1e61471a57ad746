"""A hub model's q/k tensors and config, fetched once into a local folder that scoring then reads offline
(CLI `prefetch-qk`, rule prefetch_qk: on a cluster the submitting host fetches, the compute nodes read).

The folder holds config.json (and the repository's `*.py` with --trust-remote-code) and one
model.safetensors with only the tensors extraction reads (keys.qk_keys: the query and key weights, or
the fused qkv weights of families that store them fused), under their checkpoint names and dtypes, plus
two metadata entries: N_PARAMS_KEY, the full checkpoint's floating-point parameter count (so the score
rows' n_params is the model's, not the subset's), and `attention_geometry.origin` (the hub id and the
commit read). The tensors come through loading.open_source, so from the hub by HTTP range requests where
it answers them (hub.py), else from the download; they are written one at a time
(safetensors_io.write_safetensors), so memory stays near the largest tensor. Scoring the folder gives the
rows of scoring the hub id (tests/test_hub.py). fp8 tensors are copied as stored, with their block scales
(`NAME_scale_inv`, base.SCALE_SUFFIX), and config.json keeps the block size, so the folder dequantizes as the
checkpoint does.

The folder also holds PREFETCH_MARKER (what was fetched, as JSON, with the names of the files written). --out
is checked before anything is read (files.check_folder_out): never the source, a folder inside it or holding it,
nor the current folder; an existing folder is replaced only when it is empty or a previous prefetch-qk output
that holds only the files its marker lists (is_prefetch_output), anything else (a folder with other files, such
as the user's own script beside the weights, a file, a link) only with --force.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from attention_geometry.architectures.keys import get_family, qk_keys
from attention_geometry.errors import UserError
from attention_geometry.formats.files import WriteError, check_folder_out, replace_dir, write_failure
from attention_geometry.weights.base import SCALE_SUFFIX, LoadError
from attention_geometry.weights.loading import open_source
from attention_geometry.weights.safetensors_io import (
    N_PARAMS_KEY,
    ORIGIN_KEY,
    SafetensorsSource,
    read_safetensors_header,
    read_safetensors_metadata,
    write_safetensors,
)

__all__ = ["prefetch_qk", "is_prefetch_output", "PREFETCH_MARKER"]

# in every output folder: {"origin", "tensors", "bytes", "n_params", "files"}, `files` the names written beside it
PREFETCH_MARKER = ".prefetch-qk.json"
_OWN_FILES = {"config.json", "model.safetensors", PREFETCH_MARKER, ".snakemake_timestamp"}


def is_prefetch_output(folder: str | os.PathLike) -> bool:
    """Whether `folder` is a previous prefetch-qk output, which a new one may replace: only the files that output
    wrote, as its marker lists them (config.json, model.safetensors, the repository's *.py it copied), beside
    the marker and Snakemake's .snakemake_timestamp. A marker without the list, or none (written before the
    marker was, with a model.safetensors whose metadata names its origin), vouches for config.json and
    model.safetensors only: another file there, a `*.py` included, may be the user's."""
    folder = Path(folder)
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError:
        return False
    if "config.json" not in names:
        return False
    if PREFETCH_MARKER in names:
        try:
            listed = json.loads((folder / PREFETCH_MARKER).read_text(encoding="utf-8")).get("files")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            return False
        ours = set(listed) if isinstance(listed, list) and all(isinstance(n, str) for n in listed) else set()
        return names <= _OWN_FILES | ours
    if not names <= _OWN_FILES:
        return False
    try:
        return ORIGIN_KEY in read_safetensors_metadata(folder / "model.safetensors")
    except LoadError:
        return False


def prefetch_qk(
    source: str,
    out: str | os.PathLike,
    revision: str | None = None,
    trust_remote_code: bool = False,
    progress: bool = True,
    force: bool = False,
) -> dict[str, Any]:
    """Write the q/k subset folder of `source` (a hub id, or a local model folder) to `out` (replaced whole,
    atomically; what may be replaced: the module docstring, `force` for a folder of other files, a file or
    a link). Returns what was written: tensors, bytes (of model.safetensors), n_params, origin and
    bytes_read (the weight bytes fetched by range requests; None when the weights were read from files)."""
    from tqdm.auto import tqdm

    def check(inputs):
        return check_folder_out(out, inputs=inputs, force=force, previous=is_prefetch_output, what="prefetch-qk")

    local = Path(os.fspath(source)).expanduser()
    out = check([local] if os.path.lexists(local) else [])  # before anything is read
    src = open_source(source, revision=revision, trust_remote_code=trust_remote_code)
    folder = getattr(src, "directory", None)
    if folder is None or not (Path(folder) / "config.json").is_file():
        raise UserError(
            f"{source}: prefetch-qk reads safetensors or .bin models (a folder with config.json); "
            "a GGUF file is read whole by `score`"
        )
    check([folder])  # a hub model's folder in the hub cache
    names = list(dict.fromkeys(n for *_, ns in qk_keys(get_family(src.model_type), src.config, src.keys()) for n in ns))
    get = getattr(src, "get_stored", src.get)  # fp8 tensors as stored, with their scales beside them
    if hasattr(src, "get_stored"):
        keys = set(src.keys())
        names = [x for n in names for x in (n, n + SCALE_SUFFIX) if x == n or x in keys]
    commit = Path(folder).name if re.fullmatch(r"[0-9a-f]{40}", Path(folder).name) else (revision or "")
    origin = f"{source}@{commit}" if commit else str(source)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"  # written there, then swapped in
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        for f in ["config.json"] + (sorted(p.name for p in Path(folder).glob("*.py")) if trust_remote_code else []):
            shutil.copyfile(Path(folder) / f, tmp / f)
        bar = tqdm(total=len(names), desc=f"fetching q/k of {src.name}", unit="tensor", disable=not progress)

        def fetch(name):
            t = get(name)
            bar.update()
            return t

        size = write_safetensors(
            tmp / "model.safetensors",
            [(n, *src.spec(n)) for n in names],  # the stored dtype and shape
            fetch,
            {N_PARAMS_KEY: str(src.n_params), ORIGIN_KEY: origin},
        )
        bar.close()
        read_safetensors_header(tmp / "model.safetensors")  # what was written reads back (the one reader's checks)
        written = sorted(p.name for p in tmp.iterdir())
        marker = {"origin": origin, "tensors": len(names), "bytes": size, "n_params": src.n_params, "files": written}
        (tmp / PREFETCH_MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        replace_dir(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        why = write_failure(exc)
        if why is None:
            raise
        raise WriteError(f"{out}: cannot write the prefetched folder ({why})") from None
    files = src.files if isinstance(src, SafetensorsSource) else []
    fetched = [f.bytes_read for f in files if hasattr(f, "bytes_read")]
    return {
        "tensors": len(names),
        "bytes": size,
        "n_params": src.n_params,
        "origin": origin,
        "bytes_read": sum(fetched) if fetched else None,
    }


# --------------------------------------------------------------------------------------------------- CLI


def run_prefetch_qk(args: argparse.Namespace) -> int:
    done = prefetch_qk(
        args.source,
        args.out,
        revision=args.revision,
        trust_remote_code=args.trust_remote_code,
        progress=not args.quiet,
        force=args.force,
    )
    read = "" if done["bytes_read"] is None else f"; {done['bytes_read']} weight bytes read by range requests"
    print(
        f"{done['origin']}: {done['tensors']} q/k tensors, {done['bytes']} bytes, of {done['n_params']} "
        f"parameters -> {args.out}{read}",
        file=sys.stderr,
    )
    return 0
