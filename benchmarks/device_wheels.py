"""Wheels for a GPU machine that has Python, torch and transformers but no package index (benchmarks/gpu_measure.sh
runs there): the dependency closure of the packages the measurement needs beyond those (default: snakemake, which
benchmarks/gpu_check.sh runs), at this venv's versions (requirements.lock after `make setup`), as wheels for that
machine's Python and platform.

    .venv/bin/python benchmarks/device_wheels.py [--out .whl] [--python-version 3.12] [--have FILE] [ROOT ...]

--have FILE: names that machine already holds (one per line; `pip list --format=freeze` output does), left out
of the closure's downloads (their own dependencies are still walked). Use it only with versions read there: a held
package at a version the closure does not accept (e.g. packaging 26 where Snakemake 9.27 asks for < 26) makes the
install fail with no index, which the carried wheel would have fixed; the default carries the whole closure. Each
package is downloaded as a binary wheel for cp{python-version} on manylinux x86_64 (one already in the folder is
kept); one published as source only is built here into a wheel, which must then be pure Python (py3-none-any),
else the script stops. It prints the folder's size, what travels with the checkout, and the command that installs
the wheels there (pip resolves against what is installed and takes the rest from the folder, with no index):

    python3 -m pip install -q --no-index --find-links .whl snakemake==<version>

`.whl/` is ignored by git; a device call names it to carry it (docs/training.md, "The device path (GPU)").
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64", "linux_x86_64"]
# Files a pure-Python wheel ships for other platforms, left out so the wheels fit a device call's 64 MiB with the
# checkout: PuLP's CBC solver binaries (16 MiB) but Linux x86_64's, which Snakemake's scheduler runs.
TRIM = {"pulp": ("pulp/solverdir/cbc/", "pulp/solverdir/cbc/linux/i64/")}


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(roots: list[str], python_version: str, dists=md.distribution) -> dict[str, str]:
    """{normalized name: installed version} of `roots` and everything they require, walked through the installed
    distributions' metadata (`dists(name)`), with each requirement's marker evaluated for `python_version` and no
    extra. A required distribution that is not installed stops with its name and who requires it."""
    env = {"extra": "", "python_version": python_version, "python_full_version": f"{python_version}.0"}
    found: dict[str, str] = {}
    todo = [(r, "the command line") for r in roots]
    while todo:
        name, by = todo.pop()
        key = normalize(name)
        if key in found:
            continue
        try:
            dist = dists(name)
        except md.PackageNotFoundError:
            raise SystemExit(
                f"device_wheels: {name} (required by {by}) is not installed here: run `make setup`"
            ) from None
        found[key] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append((req.name, key))
    return dict(sorted(found.items()))


def read_have(path: Path | None) -> set[str]:
    """The normalized names of a --have file (`name`, `name==version` or `name @ url` per line; # comments)."""
    if path is None:
        return set()
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(normalize(re.split(r"[=<>!~ @;\[]", line, maxsplit=1)[0]))
    return names


def trim(wheel: Path, drop: str, keep: str) -> int:
    """Rewrite `wheel` without its members under `drop` except those under `keep`, and without their RECORD lines
    (the kept members' hashes stay valid; modes and dates kept); the bytes saved."""
    before = wheel.stat().st_size
    tmp = wheel.with_suffix(".trimmed")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        gone = {i.filename for i in src.infolist() if i.filename.startswith(drop) and not i.filename.startswith(keep)}
        for info in src.infolist():
            if info.filename in gone:
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(x for x in lines if x.split(",", 1)[0] not in gone).encode()
            dst.writestr(info, data)
    tmp.replace(wheel)
    return before - wheel.stat().st_size


def fetch(name: str, version: str, out: Path, python_version: str) -> str:
    """Download name==version's binary wheel for the target into `out`, else build its wheel here; 'binary' or
    'built' ('kept': already there)."""
    pip = [sys.executable, "-m", "pip"]
    spec = f"{name}=={version}"
    if any(w.name.split("-")[1] == version and normalize(w.name.split("-")[0]) == name for w in out.glob("*.whl")):
        return "kept"
    target = ["--python-version", python_version, "--implementation", "cp", "--only-binary=:all:"]
    target += [a for p in PLATFORMS for a in ("--platform", p)]
    got = subprocess.run([*pip, "download", "-q", "--no-deps", "-d", str(out), *target, spec], capture_output=True)
    if got.returncode == 0:
        if name in TRIM:
            for wheel in out.glob(f"{name}-{version}-*.whl"):
                trim(wheel, *TRIM[name])
        return "binary"
    before = set(out.glob("*.whl"))
    built = subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(out), spec], capture_output=True, text=True)
    new = set(out.glob("*.whl")) - before
    if built.returncode != 0 or not new:
        raise SystemExit(f"device_wheels: {spec}: no wheel for the target and none built here:\n{built.stderr}")
    impure = [w.name for w in new if not w.name.endswith("-none-any.whl")]
    if impure:
        for w in new:
            w.unlink()
        raise SystemExit(
            f"device_wheels: {spec} has no wheel for the target and builds one for this machine only "
            f"({', '.join(impure)})"
        )
    return "built"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("roots", nargs="*", default=["snakemake"], help="what the target needs (default: snakemake)")
    p.add_argument("--out", type=Path, default=REPO / ".whl")
    p.add_argument("--python-version", default="3.12", help="the target's Python, major.minor (default 3.12)")
    p.add_argument("--have", type=Path, help="names the target already holds, left out of the downloads")
    args = p.parse_args(argv)
    wanted = closure(args.roots, args.python_version)
    have = read_have(args.have)
    args.out.mkdir(parents=True, exist_ok=True)
    kinds = {"binary": 0, "built": 0, "kept": 0}
    for name, version in wanted.items():
        if name not in have:
            kinds[fetch(name, version, args.out, args.python_version)] += 1
    size = sum(w.stat().st_size for w in args.out.glob("*.whl"))
    print(
        f"device_wheels: {len(wanted)} packages in the closure of {' '.join(args.roots)}, "
        f"{len(wanted.keys() & have)} held there; wheels: {kinds['binary']} downloaded, {kinds['built']} built, "
        f"{kinds['kept']} already there; {size / 2**20:.1f} MiB in {args.out}"
    )
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True).stdout
    checkout = sum((REPO / f).stat().st_size for f in tracked.split("\0") if f and (REPO / f).is_file())
    print(f"device_wheels: with the checkout's tracked files, {(size + checkout) / 2**20:.1f} MiB travel")
    pins = " ".join(f"{r}=={wanted[normalize(r)]}" for r in args.roots)
    print(f"there: python3 -m pip install -q --no-index --find-links {args.out.name} {pins}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
