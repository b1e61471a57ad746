"""Files shipped inside installed Python packages (the offline data and weight packages, installed with
--no-deps and never imported): locating them, the `pkg:` source spec, and checking their sha256.

A spec `pkg:PACKAGE[/PATH]` names PATH inside the folder of import package PACKAGE (a dotted name: the
sub-package's folder), found on the import path without importing anything: the top-level name with
importlib.util.find_spec (which imports nothing for a top-level name), each further part as a folder inside the
one before. PATH stays inside that folder: an absolute PATH, a `..` part, or a symbolic link that leads outside
the package is refused. The workflow passes packaged weights to its jobs as specs, so
that Snakemake's parse needs no package installed (an environment with Snakemake only, under --sdm conda,
parses the workflow; the rule's own env installs the packages: envs/*.post-deploy.sh) and so that the files'
mtimes never decide a re-run: the config's `sha256` is the rule's parameter, and `locate-package --sha256`
(workflow.pretrained) checks it in the job before anything is read."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from attention_geometry.errors import UserError
from attention_geometry.formats.files import file_sha256

__all__ = [
    "SPEC_PREFIX",
    "WEIGHT_SUFFIXES",
    "is_spec",
    "spec",
    "package_folder",
    "resolve",
    "weight_files",
    "check_sha256",
]

SPEC_PREFIX = "pkg:"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


def is_spec(text: object) -> bool:
    return isinstance(text, str) and text.startswith(SPEC_PREFIX)


def spec(package: str, *path: str) -> str:
    """`pkg:PACKAGE/PATH` (empty path parts left out)."""
    return SPEC_PREFIX + "/".join(p.strip("/") for p in (package, *path) if p and p.strip("/"))


def package_folder(package: str, where: str = "") -> Path:
    """The folder of installed import package `package` (a dotted name names a sub-package's folder), located
    without importing it or its parents (importlib.util.find_spec imports the parents of a dotted name); a
    UserError naming `where` (e.g. the config key) when it is not installed."""
    prefix = f"{where}: " if where else ""
    parts = package.split(".")
    if not all(p.isidentifier() for p in parts):
        raise UserError(f"{prefix}{package!r} is not a Python package name (pkg:PACKAGE[/PATH])")
    try:
        found = importlib.util.find_spec(parts[0])  # a top-level name: the finders only, nothing imported
    except (ImportError, ValueError):
        found = None
    folders = [Path(p) for p in (found.submodule_search_locations or [])] if found is not None else []
    for part in parts[1:]:  # a sub-package: its folder inside the parent's
        folders = [f / part for f in folders if (f / part).is_dir()]
    if not folders:
        raise UserError(
            f"{prefix}Python package {package!r} is not installed (it ships data or weight files: `make setup` "
            "installs it into the venv; under --sdm conda the rule's env installs it after it is built)"
        )
    return folders[0]


def resolve(text: str, where: str = "") -> str:
    """The local path a `pkg:` spec names (checked to exist, and to lie inside the package, symbolic links
    followed); any other text unchanged."""
    if not is_spec(text):
        return text
    package, _, sub = text[len(SPEC_PREFIX) :].partition("/")
    if not package:
        raise UserError(f"{text}: a package spec is pkg:PACKAGE[/PATH]")
    if sub.startswith("/"):
        raise UserError(f"{text}: PATH must be relative to the package's folder (pkg:PACKAGE/PATH)")
    if ".." in PurePosixPath(sub).parts:
        raise UserError(f"{text}: PATH must not step out of the package's folder with '..'")
    root = package_folder(package, where or text)
    path = root / sub if sub else root
    try:
        if not path.exists():
            raise UserError(f"{text}: {path} does not exist in the installed package")
        real, real_root = path.resolve(), root.resolve()
    except (OSError, RuntimeError) as exc:  # unreadable, or a loop of symbolic links
        raise UserError(f"{text}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
    if real != real_root and real_root not in real.parents:
        raise UserError(f"{text}: {path} leads outside the package's folder {root} (a symbolic link to {real})")
    return os.path.normpath(path)


def weight_files(path: str | os.PathLike) -> list[Path]:
    """The weight files a model path reads, sorted: the file itself, or a folder's *.safetensors / *.bin /
    *.gguf (what a package's recorded sha256 and pretrained_models.csv's `sha256` column name)."""
    path = Path(path)
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def check_sha256(path: str | os.PathLike, recorded: Mapping[str, str], what: str) -> None:
    """UserError unless the weight files of `path` (the file, or a folder's weight files, by name) are exactly
    the recorded ones, each with its recorded sha256: another installed version ships other weights, and its
    scores must not be filed under the recorded hashes."""
    files = {p.name: p for p in weight_files(path)}
    if set(files) != set(recorded):
        raise UserError(
            f"{what}: {path} holds weight files {sorted(files) or 'none'}, the config records {sorted(recorded)}"
        )
    for name, expected in sorted(recorded.items()):
        got = file_sha256(files[name])
        if got != expected.lower():
            raise UserError(
                f"{what}: {files[name]} has sha256 {got}, not the recorded {expected.lower()} (another version "
                "of the package is installed: install the one the Makefile pins, or record the new sha256 in "
                "the config)"
            )
