"""benchmarks/device_wheels.py (wheels carried to a GPU machine without a package index): the dependency closure,
the --have file, the trimmed wheel. No download here: the walk reads installed metadata or a fake of it."""

from __future__ import annotations

import importlib.metadata as md
import zipfile

import device_wheels as dw
import pytest
from helpers import REPO


class _Dist:
    def __init__(self, version: str, requires: list[str]):
        self.version, self.requires = version, requires


FAKE = {
    "top": _Dist("1.0", ["Mid_Pkg>=2", "old-backport; python_version < '3.11'", "extra-only; extra == 'docs'"]),
    "mid-pkg": _Dist("2.1", ["leaf", "top"]),  # a cycle back to the root
    "leaf": _Dist("0.3", ["newer-only; python_version >= '3.12'"]),
    "newer-only": _Dist("5.0", []),
    "old-backport": _Dist("9.9", []),
}


def _fake(name: str):
    try:
        return FAKE[dw.normalize(name)]
    except KeyError:
        raise md.PackageNotFoundError(name) from None


def test_the_closure_follows_requirements_with_the_targets_markers():
    assert dw.closure(["top"], "3.12", _fake) == {"leaf": "0.3", "mid-pkg": "2.1", "newer-only": "5.0", "top": "1.0"}
    assert dw.closure(["top"], "3.10", _fake) == {"leaf": "0.3", "mid-pkg": "2.1", "old-backport": "9.9", "top": "1.0"}


def test_a_requirement_not_installed_stops_with_who_needs_it():
    broken = {**FAKE, "leaf": _Dist("0.3", ["absent-pkg"])}
    with pytest.raises(SystemExit, match=r"absent-pkg \(required by leaf\) is not installed here"):
        dw.closure(["top"], "3.12", lambda n: broken[dw.normalize(n)] if dw.normalize(n) in broken else _fake(n))


def test_snakemakes_closure_is_the_locks_versions():
    """In the project's venv the walk finds each package at requirements.lock's pin (make setup installs the lock)."""
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[dw.normalize(name)] = version.strip()
    got = dw.closure(["snakemake"], "3.12")
    assert got["snakemake"] == pins["snakemake"] and {"pulp", "snakemake-interface-common"} <= got.keys()
    assert {n: v for n, v in got.items() if pins.get(n) != v} == {}


def test_the_have_file_takes_names_in_any_pip_form(tmp_path):
    f = tmp_path / "have.txt"
    f.write_text("Jinja2==3.1.6\n# a comment\nPyYAML\nrequests @ file:///x.whl\ntyping_extensions>=4 ; x\n\n")
    assert dw.read_have(f) == {"jinja2", "pyyaml", "requests", "typing-extensions"}
    assert dw.read_have(None) == set()


def test_the_trimmed_wheel_keeps_its_record_true_for_what_is_left(tmp_path):
    wheel = tmp_path / "pulp-1.0-py3-none-any.whl"
    members = {
        "pulp/__init__.py": b"x = 1\n",
        "pulp/solverdir/cbc/linux/i64/cbc": b"\x7fELF keep",
        "pulp/solverdir/cbc/osx/i64/cbc": b"macho drop" * 100,
        "pulp/solverdir/cbc/win/i64/cbc.exe": b"MZ drop" * 100,
    }
    record = "".join(f"{m},sha256=fake,{len(b)}\n" for m, b in members.items()) + "pulp-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for m, b in members.items():
            info = zipfile.ZipInfo(m)
            info.external_attr = (0o755 if m.endswith("cbc") else 0o644) << 16
            z.writestr(info, b)
        z.writestr("pulp-1.0.dist-info/RECORD", record)
    saved = dw.trim(wheel, *dw.TRIM["pulp"])
    assert saved > 0
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert names == ["pulp/__init__.py", "pulp/solverdir/cbc/linux/i64/cbc", "pulp-1.0.dist-info/RECORD"]
        assert z.read("pulp/solverdir/cbc/linux/i64/cbc") == b"\x7fELF keep"
        assert z.getinfo("pulp/solverdir/cbc/linux/i64/cbc").external_attr >> 16 == 0o755
        kept = [line.split(",")[0] for line in z.read("pulp-1.0.dist-info/RECORD").decode().splitlines()]
    assert kept == ["pulp/__init__.py", "pulp/solverdir/cbc/linux/i64/cbc", "pulp-1.0.dist-info/RECORD"]
