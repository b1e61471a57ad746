"""Pretrained models of the workflow config (`pretrained:`): where each model's files are, how `attention-geometry
score` is called on them, and their provenance (machine-independent origin, sha256 of the weight files read); and the code's own
provenance, `code_version` (the git commit).
Torch-free; `workflow.plan` uses it at Snakemake's parse time."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .errors import UserError
from .files import file_sha256

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

    def weight_files(self) -> list[str]:
        """The local weight files read (the GGUF file, or the folder's *.safetensors / *.bin); none for a hub id."""
        if self.file:
            return [self.file] if os.path.isfile(self.file) else []
        if not self.inputs or not os.path.isdir(self.source):
            return []
        return sorted(os.path.join(self.source, f) for f in os.listdir(self.source)
                      if f.endswith((".safetensors", ".bin", ".gguf")))

    @property
    def path(self) -> str:
        """What the model is opened from: the GGUF file when there is one, else the source."""
        return self.file or self.source


def package_dir(package: str, where: str) -> str:
    """The folder of an installed Python package, located without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"config {where}: Python package {package!r} is not installed (it ships the model "
                          "files; `make setup` installs it)")
    return list(spec.submodule_search_locations)[0]


def resolve_pretrained(models: Mapping, find_package: Callable[[str, str], str] = package_dir) -> dict[str, Pretrained]:
    out = {}
    for key, m in models.items():
        where = f"pretrained.{key}"
        sources = [k for k in ("package", "path", "hub_id") if k in m]
        if len(sources) != 1:
            raise ConfigError(f"config {where}: give exactly one of package, path, hub_id (got {sources or 'none'})")
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
        args += ["--name", name]
        out[key] = Pretrained(source=source, file=file, inputs=inputs, args=args, revision=revision, pinned=pinned,
                              name=name, origin=origin)
    return out


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
    return [{"key": key, "name": m.name, "origin": m.origin, "revision": m.revision, "pinned": m.pinned,
             "sha256": " ".join(f"{os.path.basename(f)}:{file_sha256(f)}" for f in m.weight_files())}
            for key, m in pretrained.items()]


def code_version(repo: str) -> str:
    """The git commit of the workflow's code, with " + uncommitted changes" when a tracked or new file outside
    results/ differs from it (results/ holds the committed outputs themselves, written before they are
    committed); "unknown (...)" outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=normal", "--", ".", ":(exclude)results")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return commit + (" + uncommitted changes outside results/" if dirty else "")
