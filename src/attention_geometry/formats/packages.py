"""Files shipped inside installed Python packages (the offline data and weight packages, installed with
--no-deps and never imported): locating them, the `pkg:` source spec, and checking their sha256.

A spec `pkg:PACKAGE[/PATH]` names PATH inside the folder of import package PACKAGE, found with
importlib.util.find_spec (nothing is imported). The workflow passes packaged weights to its jobs as specs, so
that Snakemake's parse needs no package installed (an environment with Snakemake only, under --sdm conda,
parses the workflow; the rule's own env installs the packages: envs/*.post-deploy.sh) and so that the files'
mtimes never decide a re-run: the config's `sha256` is the rule's parameter, and `locate-package --sha256`
(workflow.pretrained) checks it in the job before anything is read."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

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
    """The folder of installed import package `package`, located without importing it; a UserError naming
    `where` (e.g. the config key) when it is not installed."""
    try:
        found = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        found = None
    if found is None or not found.submodule_search_locations:
        prefix = f"{where}: " if where else ""
        raise UserError(
            f"{prefix}Python package {package!r} is not installed (it ships data or weight files: `make setup` "
            "installs it into the venv; under --sdm conda the rule's env installs it after it is built)"
        )
    return Path(list(found.submodule_search_locations)[0])


def resolve(text: str, where: str = "") -> str:
    """The local path a `pkg:` spec names (checked to exist); any other text unchanged."""
    if not is_spec(text):
        return text
    package, _, sub = text[len(SPEC_PREFIX) :].partition("/")
    if not package:
        raise UserError(f"{text}: a package spec is pkg:PACKAGE[/PATH]")
    path = package_folder(package, where or text) / sub if sub else package_folder(package, where or text)
    if not path.exists():
        raise UserError(f"{text}: {path} does not exist in the installed package")
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
