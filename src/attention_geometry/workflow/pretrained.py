"""Pretrained models of the workflow config (`pretrained:`): where each model's files are, how `attention-geometry
score` is called on them, and their provenance (machine-independent origin, sha256 of the weight files read);
and the code's own
provenance, `code_version` (the git commit).
Torch-free; `workflow.plan` uses it at Snakemake's parse time."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from attention_geometry.errors import UserError
from attention_geometry.formats.files import file_sha256, join_files

__all__ = ["Pretrained", "PRETRAINED_COLUMNS", "package_dir", "resolve_pretrained", "pretrained_rows"]


class ConfigError(UserError):
    """A workflow config that the schema accepts but whose keys disagree with each other."""


@dataclass
class Pretrained:
    """Where a pretrained model's files are and how `attention-geometry score` is called on them."""

    source: str  # a local folder or a hub id
    file: str | None  # the GGUF file, when there is one
    inputs: list[str]  # the local files the scoring rule depends on (none for a hub id)
    args: list[str]  # the score CLI's arguments after the source
    revision: str  # hub revision ("" for a local copy)
    pinned: bool
    name: str
    origin: str = ""  # machine-independent: pip:DIST==VERSION/subpath, the configured path, or hub:ID@REVISION
    hub_id: str = ""  # a hub model read from its prefetched q/k subset (source): fetched by `prefetch-qk`
    fetch_args: list[str] = field(default_factory=list)  # prefetch-qk's arguments after the hub id
    parts: list[str] = field(default_factory=list)  # a GGUF file shipped split: its parts, joined into `file`
    sha256: str = ""  # the joined file's recorded sha256 (config `sha256`), checked when the parts are joined

    def weight_files(self) -> list[str]:
        """The local weight files read (the GGUF file, or the folder's *.safetensors / *.bin); none for a hub
        id (its origin names it; a prefetched subset is not hashed at each parse)."""
        if self.hub_id:
            return []
        if self.file:
            return [self.file] if os.path.isfile(self.file) else []
        if not self.inputs or not os.path.isdir(self.source):
            return []
        return sorted(
            os.path.join(self.source, f)
            for f in os.listdir(self.source)
            if f.endswith((".safetensors", ".bin", ".gguf"))
        )

    @property
    def offline_env(self) -> str:
        """Environment assignments for the scoring job: a model read from local files only (a package, a path,
        a prefetched hub model) is scored with the hub switched off, so a compute node never waits on it."""
        return "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1" if self.inputs else ""

    @property
    def path(self) -> str:
        """What the model is opened from: the GGUF file when there is one, else the source."""
        return self.file or self.source


def package_dir(package: str, where: str) -> str:
    """The folder of an installed Python package, located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"config {where}: Python package {package!r} is not installed (it ships the model "
            "files; `make setup` installs it)"
        )
    return list(spec.submodule_search_locations)[0]


def resolve_pretrained(
    models: Mapping,
    find_package: Callable[[str, str], str] = package_dir,
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
            out[key] = _joined_gguf(key, m, find_package, joined_dir)
            continue
        args, inputs = [], []
        if "hub_id" in m:
            source, revision = m["hub_id"], m.get("revision", "main")
            origin = f"hub:{source}@{revision}"
            args += ["--revision", revision]
            pinned = revision != "main"
        else:
            if "package" in m:
                source = os.path.join(find_package(m["package"], where), m.get("subdir", ""))
                origin = "/".join(x for x in (f"pip:{_distribution(m['package'])}", m.get("subdir", "")) if x)
            else:
                source = origin = m["path"]
            source = os.path.normpath(source)
            inputs.append(source)
            revision, pinned = "", True  # a local copy: the files are what they are (hashed in the provenance)
        file = None
        if "gguf_file" in m:
            file = os.path.join(source, m["gguf_file"])
            origin = f"{origin}/{m['gguf_file']}"
            args += ["--gguf-file", m["gguf_file"]]
            if "hub_id" not in m:
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
        )
    return out


def _joined_gguf(key: str, m: Mapping, find_package: Callable[[str, str], str], joined_dir: str | None) -> Pretrained:
    """A GGUF file whose parts ship in packages: `gguf_parts` are PACKAGE/PATH, in order; `package` is the one
    that names the whole (its distribution goes into the origin); `sha256` the whole file's, recorded."""
    where = f"pretrained.{key}"
    missing = [k for k in ("package", "gguf_file", "sha256") if k not in m]
    if missing or joined_dir is None:
        raise ConfigError(
            f"config {where}: gguf_parts needs package, gguf_file and sha256 "
            f"(missing: {', '.join(missing) or 'the folder to join into'})"
        )
    find_package(m["package"], where)
    parts, origins = [], []
    for spec in m["gguf_parts"]:
        package, _, sub = spec.partition("/")
        if not sub:
            raise ConfigError(f"config {where}.gguf_parts: {spec!r} is not PACKAGE/PATH")
        parts.append(os.path.normpath(os.path.join(find_package(package, where), sub)))
        origins.append(f"pip:{_distribution(package)}/{sub}")
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
        origin=f"pip:{_distribution(m['package'])}/{m['gguf_file']} (joined: {' + '.join(origins)})",
    )


def add_arguments_join_parts(parser) -> None:
    parser.add_argument("parts", nargs="+", metavar="PART", help="the parts, in order")
    parser.add_argument("--sha256", required=True, help="the joined file's recorded sha256 (hex)")
    parser.add_argument("--out", required=True, help="the joined file")


def run_join_parts(args) -> int:
    join_files(args.parts, args.out, args.sha256.lower())
    print(f"{args.out}: {len(args.parts)} parts joined, sha256 {args.sha256.lower()}")
    return 0


def _distribution(package: str) -> str:
    """`dist==version` of the installed distribution that ships import package `package` (the name alone when
    the metadata does not say)."""
    from importlib import metadata

    for dist in metadata.packages_distributions().get(package, []):
        return f"{dist}=={metadata.version(dist)}"
    return package


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
                else " ".join(f"{os.path.basename(f)}:{file_sha256(f)}" for f in m.weight_files())
            ),
        }
        for key, m in pretrained.items()
    ]


def code_version(repo: str) -> str:
    """The git commit of the workflow's code, with " + uncommitted changes" when a tracked or new file outside
    results/ differs from it (results/ holds the committed outputs themselves, written before they are
    committed); "unknown (...)" outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", repo, *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=normal", "--", ".", ":(exclude)results")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + (" + uncommitted changes outside results/" if dirty else "")
