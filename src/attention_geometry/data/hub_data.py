"""Hub inputs of corpora and image sets (docs/data.md, "Hub data"): which files a config reads from the Hugging
Face hub (`HubInput`; each config module says which: corpus_config.hub_inputs, image_config.hub_inputs),
`fetch_hub_data`, which downloads exactly those files into a folder with a manifest on a host with internet (the
CLI `attention-geometry fetch-hub-data` is data/fetch.py; the workflow runs it as a local rule on the submitting
host), and `FetchedData`, the reader side that prepare-corpus / prepare-images use to read that folder with the
hub offline.

A config's hub inputs are `HubInput`s: a repository (`repo_id`, `repo_type`, `revision`) and, per part (a split
of a dataset, or `tokenizer`), the patterns of its files as alternatives: the first alternative that matches a
file of the repository wins, and all its patterns are read. Patterns are matched against the repository's paths
with fnmatch (`*` also matches `/`), as huggingface_hub's allow_patterns are.

The fetched folder:

    DIR/hub-data.json     the manifest (MANIFEST): the inputs it was fetched for, each repository's resolved
                          commit, and per file its path in the repository, size, sha256 and the hub's id
    DIR/dataset/...       the dataset repository's files, at their paths in the repository
    DIR/tokenizer/...     the pretrained tokenizer's tokenizer.json

Every file is checked against the hub's own listing after the download (size, and the LFS sha256 or the git blob
id), and again, by size and sha256, when a prepare reads it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_geometry.errors import UserError
from attention_geometry.formats.files import atomic_write_text

__all__ = [
    "MANIFEST",
    "NATIVE_PARQUET",
    "CONVERTED_PARQUET",
    "HUB_LOCATION_KINDS",
    "HubInput",
    "split_patterns",
    "FetchedData",
    "check_hub_data",
    "fetch_now",
    "fetch_hub_data",
    "fetch_rule",
    "size_text",
]

log = logging.getLogger("attention_geometry.data")

MANIFEST = "hub-data.json"
FORMAT_VERSION = 1
KIND = "hub-data"
FOLDERS = {"dataset": "dataset", "tokenizer": "tokenizer"}  # role -> sub-folder of DIR
# the parquet layouts of hub datasets, where `hub.data_files` is null: a split's files as alternative patterns.
# NATIVE: datasets' push_to_hub layout, `{config}/{split}-NNNNN-of-NNNNN.parquet` (`data/` for an unnamed config),
# as wikimedia/wikipedia and uoft-cs/cifar10 ship them. CONVERTED: the hub's own parquet conversion of a dataset
# (revision `refs/convert/parquet`): `{config}/{split}/NNNN.parquet`, or `{config}/partial-{split}/NNNN.parquet`
# where only the first part of a large split was converted (`default` for an unnamed config).
NATIVE_PARQUET = ("{config}/{split}-*.parquet",)
CONVERTED_PARQUET = ("{config}/{split}/*.parquet", "{config}/partial-{split}/*.parquet")
_UNNAMED = {NATIVE_PARQUET: "data", CONVERTED_PARQUET: "default"}
# the value kinds (formats.value_kinds) of the keys of a config's `hub` mapping that say where a dataset's
# parquet files are, alike for corpora and image sets: repository `path` (or a local folder), config `name`,
# `revision`, `split`, and `data_files` (patterns, or a mapping split -> patterns; null: the layout)
HUB_LOCATION_KINDS = {"path": "opt_str", "name": "opt_str", "revision": "opt_str", "split": "str", "data_files": "any"}
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass
class HubInput:
    """One repository a config reads: `files` maps a part (a split, or `tokenizer`) to alternative pattern lists."""

    role: str  # "dataset" | "tokenizer"
    repo_id: str
    repo_type: str  # "dataset" | "model"
    revision: str | None
    files: dict[str, list[list[str]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @property
    def folder(self) -> str:
        return FOLDERS[self.role]

    def describe(self) -> str:
        return f"{self.repo_id} ({self.repo_type}, revision {self.revision or 'main'})"


def _str_list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def split_patterns(
    data_files: Any,
    split: str,
    main_split: str,
    layout: Sequence[str],
    name: str | None,
    where: str,
    error: type[UserError] = UserError,
) -> list[list[str]]:
    """The alternative pattern lists of `split`: `data_files` (a pattern or list of patterns: the files of
    `main_split`; a mapping: split -> pattern(s)) as one alternative, or, where it is null, the dataset's
    `layout` with its config `name` and the split filled in. A value of another shape: `error` naming it."""
    if data_files is None:
        config = name or _UNNAMED.get(tuple(layout), "data")
        return [[p.format(config=config, split=split)] for p in layout]
    if isinstance(data_files, Mapping):
        if split not in data_files:
            raise error(f"{where}: `hub.data_files` has no entry for split {split!r} (has {sorted(data_files)})")
        got = _str_list(data_files[split])
        if got is None:
            raise error(f"{where}: `hub.data_files.{split}` must be a pattern or a list of patterns")
        return [got]
    got = _str_list(data_files)
    if got is None:
        raise error(f"{where}: `hub.data_files` must be a pattern, a list of patterns or a mapping split -> patterns")
    if split != main_split:
        raise error(
            f"{where}: `hub.data_files` names the files of split {main_split!r} only; give a mapping split -> "
            f"patterns to read split {split!r} too"
        )
    return [got]


def _match(names: Iterable[str], patterns: Sequence[str]) -> list[str]:
    return sorted(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns))


def _choose(names: Sequence[str], alternatives: Sequence[Sequence[str]]) -> list[str]:
    """The files of the first alternative that matches any (sorted); [] when none does."""
    for patterns in alternatives:
        found = _match(names, patterns)
        if found:
            return found
    return []


def fetch_rule(kind: str) -> str:
    """How to fetch a `kind` ("corpus" | "images") config's hub inputs, in words for an error line."""
    rule = "fetch_corpus_data" if kind == "corpus" else "fetch_image_data"
    return (
        "`attention-geometry fetch-hub-data --config CONFIG.yaml --out DIR` on a host with internet "
        f"(the workflow's rule {rule})"
    )


def _hashes(path: Path) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file, in one pass."""
    sha = hashlib.sha256()
    git = hashlib.sha1(f"blob {path.stat().st_size}\0".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            sha.update(chunk)
            git.update(chunk)
    return sha.hexdigest(), git.hexdigest()


def size_text(n: int) -> str:
    """A byte count in words (1.2 MB)."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


# ------------------------------------------------------------------------------------------- the reader


class FetchedData:
    """A fetched folder (fetch_hub_data) checked against the hub inputs a config reads: `paths(role, part)` are
    the local files of one part, each checked (present, its size and sha256 as fetched); `record(role, part)`
    is what a prepared manifest keeps of them. Every problem is one UserError line naming the folder and how to
    fetch it again."""

    def __init__(self, folder: str | os.PathLike, inputs: Sequence[HubInput], kind: str):
        self.folder = Path(folder)
        self.hint = fetch_rule(kind)
        mf = self.folder / MANIFEST
        if not mf.is_file():
            raise UserError(f"{self.folder}: no {MANIFEST}, not a fetched hub-data folder: fetch it with {self.hint}")
        try:
            manifest = json.loads(mf.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UserError(f"{mf}: unreadable ({type(exc).__name__}): fetch it again with {self.hint}") from None
        if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
            raise UserError(f"{mf}: not a hub-data manifest: fetch it again with {self.hint}")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise UserError(
                f"{mf}: format_version {manifest.get('format_version')!r}, not {FORMAT_VERSION}: fetch it again"
            )
        want = [i.to_dict() for i in inputs]
        if manifest.get("inputs") != want:
            raise UserError(
                f"{self.folder} was fetched for other hub inputs ({_summary(manifest.get('inputs'))}) than this "
                f"config reads ({_summary(want)}): fetch it again with {self.hint}"
            )
        self.repos = {r["role"]: r for r in manifest.get("repos", [])}
        self._checked: set[str] = set()

    def _entry(self, role: str, part: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        repo = self.repos.get(role)
        if repo is None or part not in repo.get("parts", {}):
            raise UserError(f"{self.folder / MANIFEST}: no {role} files for {part!r}: fetch it again with {self.hint}")
        by_path = {f["path"]: f for f in repo["files"]}
        return repo, [by_path[p] for p in repo["parts"][part]]

    def paths(self, role: str, part: str) -> list[Path]:
        repo, files = self._entry(role, part)
        out = []
        for f in files:
            p = self.folder / FOLDERS[role] / f["path"]
            if str(p) not in self._checked:
                if not p.is_file():
                    raise UserError(
                        f"{p}: missing (fetched hub data of {repo['repo_id']}): fetch it again with {self.hint}"
                    )
                if p.stat().st_size != f["bytes"] or _hashes(p)[0] != f["sha256"]:
                    raise UserError(
                        f"{p}: not the file fetched (size or sha256 differ): fetch it again with {self.hint}"
                    )
                self._checked.add(str(p))
            out.append(p)
        return out

    def verify(self) -> None:
        """Check every file of the folder's parts now (present, size and sha256), before any other work."""
        for role, repo in self.repos.items():
            for part in repo.get("parts", {}):
                self.paths(role, part)

    def record(self, role: str, part: str) -> dict[str, Any]:
        repo, files = self._entry(role, part)
        return {
            "commit": repo["commit"],
            "files": [{"path": f["path"], "sha256": f["sha256"], "bytes": f["bytes"]} for f in files],
        }


def _summary(inputs: Any) -> str:
    if not isinstance(inputs, list):
        return "none"
    return "; ".join(
        f"{i.get('repo_id')}@{i.get('revision') or 'main'} {sorted(i.get('files', {}))}"
        for i in inputs
        if isinstance(i, dict)
    )


# ------------------------------------------------------------------------------------------------ fetch


def _hub_error(inp: HubInput, exc: Exception) -> UserError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return UserError(f"{inp.describe()}: {type(exc).__name__}: {msg}")


def _listing(api, inp: HubInput, commit: str) -> dict[str, Any]:
    """path -> RepoFile of the repository at `commit`, listed under the literal folder its patterns share."""
    from huggingface_hub.hf_api import RepoFile
    from huggingface_hub.utils import EntryNotFoundError

    patterns = [p for alts in inp.files.values() for alt in alts for p in alt]
    folders = [re.split(r"[*?\[]", p, maxsplit=1)[0].rpartition("/")[0].split("/") for p in patterns]
    common = []
    for parts in zip(*folders):
        if len(set(parts)) != 1 or not parts[0]:
            break
        common.append(parts[0])
    prefix = "/".join(common) or None
    try:
        tree = api.list_repo_tree(
            inp.repo_id, path_in_repo=prefix, recursive=True, revision=commit, repo_type=inp.repo_type
        )
        return {f.path: f for f in tree if isinstance(f, RepoFile)}
    except EntryNotFoundError:  # no such folder: nothing matches
        return {}


def _fetch_repo(api, inp: HubInput, out: Path, workers: int) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import hf_hub_download

    if inp.revision is None:
        log.warning(
            "%s: no revision pinned (reading main): the fetched files may change under the same config", inp.repo_id
        )
    revision = inp.revision or "main"
    commit = (
        revision
        if _COMMIT.fullmatch(revision)
        else api.repo_info(inp.repo_id, repo_type=inp.repo_type, revision=revision).sha
    )
    listing = _listing(api, inp, commit)
    parts = {}
    for part, alternatives in inp.files.items():
        found = _choose(list(listing), alternatives)
        if not found:
            tried = " or ".join(", ".join(a) for a in alternatives)
            raise UserError(
                f"{inp.describe()} at commit {commit}: no file matches {tried} (for {part!r}; set `hub.data_files` "
                "or `hub.revision`)"
            )
        parts[part] = found
    wanted = sorted({p for ps in parts.values() for p in ps})
    total = sum(listing[p].size for p in wanted)
    log.info("%s @ %s: %d files, %s", inp.repo_id, commit, len(wanted), size_text(total))
    local = out / inp.folder
    done = [0]

    def download(path: str) -> dict[str, Any]:
        hf_hub_download(inp.repo_id, path, repo_type=inp.repo_type, revision=commit, local_dir=local)
        f, p = listing[path], local / path
        sha256, git = _hashes(p)
        expect = f.lfs.sha256 if f.lfs is not None else f.blob_id
        if p.stat().st_size != f.size or (sha256 if f.lfs is not None else git) != expect:
            raise UserError(f"{inp.describe()}: {path}: the downloaded file is not the hub's (size or hash differ)")
        done[0] += 1
        log.info("[%d/%d] %s (%s)", done[0], len(wanted), path, size_text(f.size))
        return {"path": path, "bytes": f.size, "sha256": sha256, "hub_oid": expect}

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(wanted)))) as pool:
        files = list(pool.map(download, wanted))
    # files an earlier fetch into this folder left (another revision or config): not inputs any more
    keep = {local / p for p in wanted}
    for p in sorted(local.rglob("*"), reverse=True):
        rel = p.relative_to(local).parts
        if rel[0] == ".cache":
            continue
        if p.is_file() and p not in keep:
            p.unlink()
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    return {
        "role": inp.role,
        "repo_id": inp.repo_id,
        "repo_type": inp.repo_type,
        "revision": inp.revision,
        "commit": commit,
        "parts": parts,
        "files": files,
    }


def fetch_hub_data(inputs: Sequence[HubInput], out: str | os.PathLike, workers: int = 8) -> dict[str, Any]:
    """Download the files of `inputs` into OUT (the layout of the module docstring) and write its manifest last;
    files already there at the same commit are not downloaded again. Returns the manifest. UserError (one line)
    when the hub is offline, a repository, revision or file is not found, or a file differs from the hub's
    listing."""
    import huggingface_hub
    from huggingface_hub import HfApi, constants

    from attention_geometry import __version__

    if not inputs:
        raise UserError("this config reads nothing from the hub: nothing to fetch")
    out = Path(out)
    if constants.HF_HUB_OFFLINE:
        raise UserError(
            "the hub is offline here (HF_HUB_OFFLINE=1): fetch on a host with internet, with HF_HUB_OFFLINE=0"
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # written again last: a fetch cut short leaves no manifest
    api = HfApi()
    repos = []
    for inp in inputs:
        try:
            repos.append(_fetch_repo(api, inp, out, workers))
        except UserError:
            raise
        except Exception as exc:  # not found, gated, no network (httpx2's errors), disk full: one line naming the repo
            raise _hub_error(inp, exc) from None
    manifest = {
        "format_version": FORMAT_VERSION,
        "kind": KIND,
        "inputs": [i.to_dict() for i in inputs],
        "repos": repos,
        "versions": {"huggingface_hub": huggingface_hub.__version__, "attention_geometry": __version__},
    }
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def check_hub_data(inputs: Sequence[HubInput], hub_data: str | os.PathLike | None, kind: str) -> FetchedData | None:
    """The folder `hub_data` (fetched ahead by fetch-hub-data) opened for `inputs` (its manifest read, its files
    not yet: FetchedData.verify), None where not given; one UserError line where it does not fit (no manifest,
    fetched for other inputs) or the config reads nothing from the hub."""
    if hub_data is None:
        return None
    if not inputs:
        raise UserError(f"--hub-data {hub_data}: this {kind} config reads nothing from the hub")
    return FetchedData(hub_data, inputs, kind)


def fetch_now(inputs: Sequence[HubInput], scratch: Path, kind: str) -> FetchedData:
    """`inputs` fetched now into `scratch` (a folder inside a prepare's temporary folder, which the caller
    removes), for a prepare given no --hub-data; where the hub is offline here, one UserError line saying how
    to fetch them first."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise UserError(
            f"{', '.join(i.describe() for i in inputs)}: read from the hub, which is offline here (HF_HUB_OFFLINE=1): "
            f"fetch it first with {fetch_rule(kind)} and pass --hub-data DIR"
        )
    fetch_hub_data(inputs, scratch)
    return FetchedData(scratch, inputs, kind)
