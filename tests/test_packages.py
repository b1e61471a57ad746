"""Files shipped in installed packages (formats.packages), the `locate-package` and `join-parts` commands on
pkg: specs, and a model scored from a pkg: spec: checked against hashlib and against the same model scored
from its folder."""

from __future__ import annotations

import hashlib
import sys

import pytest
from helpers import cli_in_process, tiny_bert

from attention_geometry.errors import UserError
from attention_geometry.formats.packages import check_sha256, resolve, spec


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path holding package `agtest_weights` (never imported, only located)."""
    root = tmp_path / "site"
    pkg = root / "agtest_weights"
    (pkg / "model").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('a weight package is located, never imported')\n")
    monkeypatch.syspath_prepend(str(root))
    yield pkg
    sys.modules.pop("agtest_weights", None)


def test_resolve_locates_without_importing(site):
    (site / "model" / "w.safetensors").write_bytes(b"xyz")
    assert spec("agtest_weights", "model/") == "pkg:agtest_weights/model"
    assert resolve("pkg:agtest_weights/model") == str(site / "model")
    assert resolve("pkg:agtest_weights") == str(site)
    assert resolve("/some/plain/path") == "/some/plain/path"  # not a spec: unchanged
    assert "agtest_weights" not in sys.modules
    with pytest.raises(UserError, match="does not exist in the installed package"):
        resolve("pkg:agtest_weights/nothing")
    with pytest.raises(UserError, match="'agtest_absent_pkg' is not installed"):
        resolve("pkg:agtest_absent_pkg/model")


def test_check_sha256_against_hashlib(site):
    data = b"weights" * 1000
    (site / "model" / "model.safetensors").write_bytes(data)
    (site / "model" / "config.json").write_text("{}")  # not a weight file: not part of the record
    good = {"model.safetensors": hashlib.sha256(data).hexdigest()}
    check_sha256(site / "model", good, "x")
    with pytest.raises(UserError, match="not the recorded"):
        check_sha256(site / "model", {"model.safetensors": hashlib.sha256(b"other").hexdigest()}, "x")
    with pytest.raises(UserError, match="holds weight files"):
        check_sha256(site / "model", {**good, "extra.bin": "0" * 64}, "x")
    (site / "model" / "pytorch_model.bin").write_bytes(b"more")  # a weight file the record does not name
    with pytest.raises(UserError, match="holds weight files"):
        check_sha256(site / "model", good, "x")


def test_locate_package_cli(site):
    data = b"gguf bytes"
    (site / "m.gguf").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    code, out, _ = cli_in_process(["locate-package", "pkg:agtest_weights/m.gguf", "--sha256", f"m.gguf={digest}"])
    assert code == 0 and out.strip() == str(site / "m.gguf")
    code, _, err = cli_in_process(["locate-package", "pkg:agtest_weights/m.gguf", "--sha256", f"m.gguf={'0' * 64}"])
    assert code != 0 and "not the recorded" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli_in_process(["locate-package", "pkg:agtest_weights/m.gguf", "--sha256", "m.gguf"])
    assert code != 0 and "FILE=HEX" in err


def test_join_parts_reads_pkg_specs(site, tmp_path):
    (site / "data").mkdir()
    (site / "data" / "p0").write_bytes(b"abc")
    (site / "data" / "p1").write_bytes(b"def")
    digest = hashlib.sha256(b"abcdef").hexdigest()
    out = tmp_path / "joined" / "m.gguf"
    code, _, err = cli_in_process(
        ["join-parts", "pkg:agtest_weights/data/p0", "pkg:agtest_weights/data/p1", "--sha256", digest, "--out", out]
    )
    assert code == 0, err
    assert out.read_bytes() == b"abcdef"


def test_score_reads_a_pkg_spec_as_its_folder(site, tmp_path):
    """A model scored from pkg:PACKAGE/PATH gives the same table as from the folder the spec names."""
    tiny_bert("encoder", seed=3).save_pretrained(site / "model")
    by_spec, by_path = tmp_path / "spec.csv", tmp_path / "path.csv"
    assert cli_in_process(["score", "pkg:agtest_weights/model", "--name", "m", "--out", by_spec])[0] == 0
    assert cli_in_process(["score", str(site / "model"), "--name", "m", "--out", by_path])[0] == 0
    assert by_spec.read_text() == by_path.read_text() and len(by_spec.read_text().splitlines()) > 1


def test_a_local_path_model_is_hashed_at_parse_time(tmp_path):
    """A `path:` model's weight files (not its config) are hashed into pretrained_models.csv's sha256 column."""
    from attention_geometry.workflow.pretrained import pretrained_rows, resolve_pretrained

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.safetensors").write_bytes(b"w1")
    (tmp_path / "m" / "extra.bin").write_bytes(b"w2")
    (tmp_path / "m" / "config.json").write_text("{}")
    m = resolve_pretrained({"local": {"path": str(tmp_path / "m")}})
    want = " ".join(
        f"{n}:{hashlib.sha256(b).hexdigest()}" for n, b in [("extra.bin", b"w2"), ("model.safetensors", b"w1")]
    )
    assert pretrained_rows(m)[0]["sha256"] == want
