"""Pretrained models of the workflow config (`pretrained:`): where each model's files are, how `attention-geometry
score` is called on them, and their provenance (machine-independent origin, sha256 of the weight files read);
and the code's own provenance, `code_version` (the git commit).
Torch-free; `workflow.plan` uses it at Snakemake's parse time. A model shipped in an installed package is passed
to its jobs as a `pkg:` spec (formats.packages), resolved and checked against the config's sha256 in the job:
the parse needs no package installed, and no file's mtime decides a re-run (the sha256 is the parameter)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from attention_geometry.errors import ConfigError, UserError
from attention_geometry.formats.files import file_sha256, join_files
from attention_geometry.formats.packages import check_sha256, is_spec, resolve, spec, weight_files

__all__ = ["Pretrained", "PRETRAINED_COLUMNS", "resolve_pretrained", "pretrained_rows", "scoring_mem_mb"]


@dataclass
class Pretrained:
    """Where a pretrained model's files are and how `attention-geometry score` is called on them."""

    source: str  # a local folder, a pkg: spec (formats.packages) or a hub id
    file: str | None  # the GGUF file, when there is one
    inputs: list[str]  # the local files the scoring rule depends on (none for a hub id or a package)
    args: list[str]  # the score CLI's arguments after the source
    revision: str  # hub revision ("" for a local copy)
    pinned: bool
    name: str
    origin: str = ""  # machine-independent: pip:DIST==VERSION/subpath, the configured path, or hub:ID@REVISION
    hub_id: str = ""  # a hub model read from its prefetched q/k subset (source): fetched by `prefetch-qk`
    fetch_args: list[str] = field(default_factory=list)  # prefetch-qk's arguments after the hub id
    parts: list[str] = field(default_factory=list)  # a GGUF file shipped split: its parts, joined into `file`
    sha256: str = ""  # the joined file's recorded sha256 (config `sha256`), checked when the parts are joined
    recorded: dict[str, str] = field(default_factory=dict)  # a package's weight file -> its sha256 (config)
    qk_gb: float = 0.0  # the config's estimate of a hub model's q/k bytes (0: not given, small)

    @property
    def packaged(self) -> bool:
        return is_spec(self.path)

    def check_command(self) -> str:
        """The shell command a rule runs before reading the model: for a packaged model, `locate-package` with
        the recorded sha256 (the installed files are the recorded ones, or one error line); else `:`."""
        if not self.packaged:
            return ":"
        words = ["python", "-m", "attention_geometry", "locate-package", self.path]
        words += [w for f, h in sorted(self.recorded.items()) for w in ("--sha256", f"{f}={h}")]
        return " ".join(shlex.quote(w) for w in words)

    def weight_files(self) -> list[str]:
        """The local weight files read (the GGUF file, or the folder's *.safetensors / *.bin); none for a hub
        id (its origin names it; a prefetched subset is not hashed at each parse) or a package (its recorded
        sha256 is checked in the job)."""
        if self.hub_id or self.packaged:
            return []
        path = self.file or (self.source if self.inputs else "")
        return [str(f) for f in weight_files(path)] if path and os.path.exists(path) else []

    @property
    def offline_env(self) -> str:
        """Environment assignments for the scoring job: a model read from local files only (a package, a path,
        a prefetched hub model) is scored with the hub switched off, so a compute node never waits on it."""
        return "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" if self.inputs or self.packaged else ""

    @property
    def path(self) -> str:
        """What the model is opened from: the GGUF file when there is one, else the source."""
        return self.file or self.source


def resolve_pretrained(
    models: Mapping,
    prefetch_root: str | None = None,
    joined_dir: str | None = None,
) -> dict[str, Pretrained]:
    """model key -> Pretrained. With prefetch_root, a hub model without a GGUF file is scored from
    {prefetch_root}/{key}, the folder rule prefetch_qk writes (its q/k tensors and config), offline. A GGUF
    file shipped split over packages (`gguf_parts`) is joined into `joined_dir`/KEY/GGUF_FILE (rule
    join_pretrained_parts), which is then what is scored."""
    out = {}
    for key, m in models.items():
        where = f"pretrained.{key}"
        sources = [k for k in ("package", "path", "hub_id") if k in m]
        if len(sources) != 1:
            raise ConfigError(f"config {where}: give exactly one of package, path, hub_id (got {sources or 'none'})")
        if "gguf_parts" in m:
            out[key] = _joined_gguf(key, m, joined_dir)
            continue
        args, inputs = [], []
        if "hub_id" in m:
            source, revision = m["hub_id"], m.get("revision", "main")
            origin = f"hub:{source}@{revision}"
            args += ["--revision", revision]
            pinned = revision != "main"
        else:
            if "package" in m:
                # resolved in the job (no package needed to parse; no mtime in the re-run decision)
                source = spec(m["package"], m.get("subdir", ""))
                origin = "/".join(x for x in (f"pip:{m['package']}", m.get("subdir", "")) if x)
            else:
                source = origin = os.path.normpath(m["path"])
                inputs.append(source)
            revision, pinned = "", True  # a local copy: the files are what they are (hashed in the provenance)
        file = None
        if "gguf_file" in m:
            file = (
                spec(m["package"], m.get("subdir", ""), m["gguf_file"])
                if "package" in m
                else os.path.join(source, m["gguf_file"])
            )
            origin = f"{origin}/{m['gguf_file']}"
            args += ["--gguf-file", m["gguf_file"]]
            if "path" in m:
                inputs = [file]
        if m.get("trust_remote_code", False):
            args.append("--trust-remote-code")
        name = m.get("name", source)
        hub_id, fetch_args = "", []
        if "hub_id" in m and file is None and prefetch_root is not None:
            hub_id, fetch_args = source, list(args)  # --revision R [--trust-remote-code]
            source = os.path.join(prefetch_root, key)
            inputs, args = [source], [a for a in args if a == "--trust-remote-code"]
        args += ["--name", name]
        out[key] = Pretrained(
            source=source,
            file=file,
            inputs=inputs,
            args=args,
            revision=revision,
            pinned=pinned,
            name=name,
            origin=origin,
            hub_id=hub_id,
            fetch_args=fetch_args,
            recorded=_recorded(m, where),
            qk_gb=float(m.get("qk_gb", 0.0)),
        )
    return out


def _recorded(m: Mapping, where: str) -> dict[str, str]:
    """A package entry's `sha256` (weight file -> sha256); other sources hash what they read."""
    recorded = m.get("sha256") or {}
    if recorded and "package" not in m:
        raise ConfigError(f"config {where}.sha256: recorded hashes are for package sources (with gguf_parts: hex)")
    if not isinstance(recorded, Mapping):
        raise ConfigError(f"config {where}.sha256: give WEIGHT_FILE: SHA256 pairs (the hex form is for gguf_parts)")
    return {str(f): str(h).lower() for f, h in recorded.items()}


def _joined_gguf(key: str, m: Mapping, joined_dir: str | None) -> Pretrained:
    """A GGUF file whose parts ship in packages: `gguf_parts` are PACKAGE/PATH, in order; `package` is the one
    that names the whole (its distribution goes into the origin); `sha256` the whole file's, recorded."""
    where = f"pretrained.{key}"
    missing = [k for k in ("package", "gguf_file", "sha256") if k not in m]
    if missing or joined_dir is None:
        raise ConfigError(
            f"config {where}: gguf_parts needs package, gguf_file and sha256 "
            f"(missing: {', '.join(missing) or 'the folder to join into'})"
        )
    if not isinstance(m["sha256"], str):
        raise ConfigError(f"config {where}.sha256: with gguf_parts, the joined file's sha256 (hex)")
    parts, origins = [], []
    for part in m["gguf_parts"]:
        package, _, sub = part.partition("/")
        if not sub:
            raise ConfigError(f"config {where}.gguf_parts: {part!r} is not PACKAGE/PATH")
        parts.append(spec(package, sub))  # resolved by join-parts, in the job
        origins.append(f"pip:{package}/{sub}")
    source = os.path.join(joined_dir, key)
    file = os.path.join(source, m["gguf_file"])
    name = m.get("name", m["gguf_file"])
    return Pretrained(
        source=source,
        file=file,
        inputs=[file],
        args=["--gguf-file", m["gguf_file"], "--name", name],
        revision="",
        pinned=True,
        name=name,
        parts=parts,
        sha256=m["sha256"],
        origin=f"pip:{m['package']}/{m['gguf_file']} (joined: {' + '.join(origins)})",
    )


def run_locate_package(args) -> int:
    """Print the path SPEC names; with --sha256, first check that its weight files are exactly the recorded ones.
    SPEC must be a pkg: spec (formats.packages.resolve keeps it inside its package): a plain path is refused, not
    echoed back as if it had been located."""
    if not is_spec(args.spec):
        raise UserError(f"{args.spec}: not a package spec; give pkg:PACKAGE[/PATH] (a file or folder in a package)")
    path = resolve(args.spec)
    recorded = {}
    for pair in args.sha256:
        name, sep, digest = pair.partition("=")
        if not sep or len(digest) != 64:
            raise UserError(f"--sha256 {pair!r}: give FILE=HEX (64 hex digits)")
        recorded[name] = digest
    if recorded:
        check_sha256(path, recorded, args.spec)
    print(path)
    return 0


def run_join_parts(args) -> int:
    join_files([resolve(p) for p in args.parts], args.out, args.sha256.lower())
    print(f"{args.out}: {len(args.parts)} parts joined, sha256 {args.sha256.lower()}")
    return 0


# the config.json keys that give a model's width (the size of its W_qk), in any nested config (text_config,
# encoder/decoder configs)
_WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "hidden_dim")


def scoring_mem_mb(folder: str | None, floor_mb: int, attempt: int = 1) -> int:
    """The memory a scoring job asks for: `floor_mb` (config scoring.mem_mb: the interpreter, torch and one
    small model) plus what the largest layer of the model in `folder` (a prefetched q/k subset, read from its
    config.json) needs, times the attempt (a job killed for memory asks for more when retried). The scorer
    streams one layer at a time (docs/cli.md, "Memory and time": ~400 MiB for a 1 B model, nothing accumulating
    across layers); per layer it holds the float64 queries and keys (at most two width x width matrices), M
    itself and one M-sized temporary: 4 matrices of width^2 float64, taken as 6 for the bf16 tensors and
    slack. Llama-3.1-405B (width 16384): 12 GiB over the floor; a 7 B model (4096): 0.75 GiB. Without a
    readable config.json (no folder yet: Snakemake asks again when the job is ready) the floor."""
    width = 0
    try:
        with open(os.path.join(folder or "", "config.json"), encoding="utf-8") as fh:
            stack = [json.load(fh)]
    except (OSError, ValueError):
        stack = []
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if k in _WIDTH_KEYS and isinstance(v, int) and not isinstance(v, bool):
                    width = max(width, v)
                elif isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    model_mb = -(-6 * width * width * 8 // (1 << 20))
    return (int(floor_mb) + model_mb) * max(1, int(attempt))


# origin: where the files came from, without this machine's paths; sha256: name:hash of every weight file read
PRETRAINED_COLUMNS = ["key", "name", "origin", "revision", "pinned", "sha256"]


def pretrained_rows(pretrained: Mapping[str, Pretrained]) -> list[dict]:
    """The rows of {results}/tables/pretrained_models.csv (columns PRETRAINED_COLUMNS)."""
    return [
        {
            "key": key,
            "name": m.name,
            "origin": m.origin,
            "revision": m.revision,
            "pinned": m.pinned,
            # a joined file: its recorded sha256, which join_pretrained_parts checked (this table is written at
            # parse time, maybe before the parts are joined)
            "sha256": (
                f"{os.path.basename(m.file)}:{m.sha256}"
                if m.parts and m.file
                else " ".join(f"{f}:{h}" for f, h in sorted(m.recorded.items()))
                if m.packaged
                else " ".join(f"{os.path.basename(f)}:{file_sha256(f)}" for f in m.weight_files())
            ),
        }
        for key, m in pretrained.items()
    ]
