"""Outputs never replace what is not ours: a device, FIFO or socket at --out (or a link to one) is refused without
being touched; an output is never its own input (run-notebook, prepare-images); a `pkg:` path stays inside its
package and no package is imported to locate it; a folder is replaced only when it holds what the command wrote
(prefetch-qk's marker lists its files). Standard output is an output too: closed, full or a pipe whose reader went
away, it ends in one line (or quietly, for the pipe), never a traceback; so does a full disk under every writer.
Each case is checked against a hash of the whole temporary tree taken before the command ran (tree())."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import cli_in_process as cli
from helpers import write_random_corpus, write_run_config_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_faults_outputs import LOSS, _write, assert_one_line, bert_dir, loss_row, write_corpus_inputs
from test_vision_data import write_digits_csv

from attention_geometry.cli import EXIT_BROKEN_PIPE, main
from attention_geometry.errors import UserError
from attention_geometry.formats import files
from attention_geometry.formats.packages import resolve
from attention_geometry.weights.prefetch import PREFETCH_MARKER

NOSPACE = OSError(errno.ENOSPC, "No space left on device")


def tree(root: Path) -> dict[str, str]:
    """Every entry under root: relative path -> sha256 of a regular file, 'dir', the target of a symbolic link,
    or the kind of anything else (a FIFO is never opened: that would block)."""
    import hashlib

    out = {}
    for folder, dirs, names in os.walk(root):
        for name in dirs + names:
            p = Path(folder) / name
            mode = os.lstat(p).st_mode
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                out[rel] = "link->" + os.readlink(p)
            elif stat.S_ISDIR(mode):
                out[rel] = "dir"
            elif stat.S_ISREG(mode):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = f"special {stat.S_IFMT(mode)}"
    return out


def prefetch(src, out, *extra):
    return cli(["prefetch-qk", src, "--out", out, "--no-progress", *extra])


# ------------------------------------------------------------------- not a regular file: device, FIFO, socket


@pytest.fixture
def specials(tmp_path, monkeypatch):
    """A FIFO, a bound unix socket and a link to /dev/null in tmp_path (a link: if a writer replaced it, the link
    in tmp_path would go, never the device); the inputs of the commands that write to them."""
    os.mkfifo(tmp_path / "fifo.csv")
    monkeypatch.chdir(tmp_path)  # a relative name: a unix socket's path is limited to about 100 bytes
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("sock.csv")
    (tmp_path / "dev.csv").symlink_to(os.devnull)
    (tmp_path / "in").mkdir()
    _write(tmp_path / "in" / "a.csv", LOSS, [loss_row("r1", 0)])
    (tmp_path / "in" / "p").write_bytes(b"abc")
    bert_dir(tmp_path / "in" / "model")
    conf = write_corpus_inputs(tmp_path / "corpus-in")
    yield {"fifo": tmp_path / "fifo.csv", "socket": tmp_path / "sock.csv", "device": tmp_path / "dev.csv", "conf": conf}
    sock.close()


def _kind(path: Path) -> str:
    mode = os.lstat(path).st_mode
    return "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "link" if stat.S_ISLNK(mode) else "?"


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
def test_no_writer_replaces_a_fifo_a_socket_or_a_device(tmp_path, specials, kind):
    import hashlib

    out = specials[kind]
    was = _kind(out)
    digest = hashlib.sha256(b"abc").hexdigest()
    commands = [
        ["concat-tables", tmp_path / "in" / "a.csv", "--out", out],
        ["join-parts", tmp_path / "in" / "p", "--sha256", digest, "--out", out],
        ["score", tmp_path / "in" / "model", "--out", out],
        ["prefetch-qk", tmp_path / "in" / "model", "--out", out, "--no-progress", "--force"],
        ["prepare-corpus", "--config", specials["conf"], "--out", out, "--force"],
    ]
    before = tree(tmp_path)
    for argv in commands:
        assert_one_line(cli(argv), r"(fifo|sock|dev)\.csv: is (a FIFO|a socket|a character device).*never replaces")
        assert _kind(out) == was and tree(tmp_path) == before, argv
    for write in (lambda p: files.atomic_write_bytes(p, b"x"), lambda p: files.replace_dir(tmp_path / "in", p)):
        with pytest.raises(UserError, match="never replaces it"):
            write(out)
        assert _kind(out) == was and tree(tmp_path) == before


# --------------------------------------------------------------------------------------- run-notebook


def _notebook(path: Path) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]})]
    nbformat.write(nb, path)
    return path


@pytest.fixture
def fake_papermill(monkeypatch):
    """papermill.execute_notebook as a copy (the guards are under test, not the kernel): what it would write."""
    import papermill

    def execute(src, dest, **kw):
        for p in (src, dest):  # papermill would block on a FIFO for ever: a failure here, not a hang
            assert not os.path.exists(p) or os.path.isfile(p), f"papermill would open {p}, not a regular file"
        Path(dest).write_text(Path(src).read_text() + " ", encoding="utf-8")

    monkeypatch.setattr(papermill, "execute_notebook", execute)


def _run_notebook(nb, executed, inputs=None, sums=None):
    params = json.dumps({"inputs": inputs or {}})
    return cli(["run-notebook", nb, executed, "--parameters", params, *(["--input-sums", sums] if sums else [])])


def test_run_notebook_never_writes_over_its_notebook_or_inputs(tmp_path, fake_papermill):
    nb = _notebook(tmp_path / "nb.ipynb")
    (tmp_path / "link.ipynb").symlink_to(nb)
    table = _write(tmp_path / "t.csv", LOSS, [loss_row("r1", 0)])
    (tmp_path / "run").mkdir()
    before = tree(tmp_path)
    assert_one_line(_run_notebook(nb, nb), r"nb.ipynb: is the source")
    assert_one_line(_run_notebook(nb, tmp_path / "link.ipynb"), r"link.ipynb: is the source")
    assert_one_line(_run_notebook(nb, table, {"t": str(table)}), r"t.csv: is the source")
    assert_one_line(_run_notebook(nb, tmp_path / "run" / "x.ipynb", {"r": str(tmp_path / "run")}), r"inside the source")
    assert_one_line(_run_notebook(nb, tmp_path / "x.ipynb", {"t": str(table)}, sums=table), r"t.csv: is the source")
    assert_one_line(_run_notebook(nb, tmp_path / "x.ipynb", sums=tmp_path / "x.ipynb"), r"the executed copy")
    assert tree(tmp_path) == before
    assert _run_notebook(nb, tmp_path / "out" / "x.ipynb", {"t": str(table)})[0] == 0


def test_run_notebook_on_a_missing_file_or_not_a_notebook_is_one_line(tmp_path, fake_papermill):
    (tmp_path / "README.md").write_text("# not a notebook\n")
    (tmp_path / "bad.ipynb").write_bytes(b"\xff\xfe not utf-8")
    (tmp_path / "folder.ipynb").mkdir()
    before = tree(tmp_path)
    out = tmp_path / "x.ipynb"
    assert_one_line(_run_notebook(tmp_path / "missing.ipynb", out), r"missing.ipynb: not found")
    assert_one_line(_run_notebook(tmp_path / "README.md", out), r"README.md: not a Jupyter notebook")
    assert_one_line(_run_notebook(tmp_path / "bad.ipynb", out), r"bad.ipynb: not a Jupyter notebook")
    assert_one_line(_run_notebook(tmp_path / "folder.ipynb", out), r"folder.ipynb: is a folder")
    assert tree(tmp_path) == before


NB_TARGETS = ["new", "nested", "notebook", "link-to-notebook", "input", "inside-input", "fifo", "folder", "user-file"]
NB_SOURCES = ["notebook", "missing", "readme", "folder", "fifo"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    source=st.sampled_from(NB_SOURCES),
    target=st.sampled_from(NB_TARGETS),
    sums=st.sampled_from([None, "new", "notebook", "input", "executed"]),
    name=st.text(alphabet="abcxyz-_.", min_size=1, max_size=10).filter(lambda s: s not in (".", "..")),
)
def test_run_notebook_ends_in_the_executed_copy_or_one_line_with_nothing_changed(
    fake_papermill, source, target, sums, name
):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        nb = _notebook(root / "nb.ipynb")
        (root / "README.md").write_text("# text\n")
        (root / "dir.ipynb").mkdir()
        os.mkfifo(root / "fifo")
        (root / "link.ipynb").symlink_to(nb)
        (root / "inputs").mkdir()
        table = _write(root / "inputs" / "t.csv", LOSS, [loss_row("r1", 0)])
        (root / "user.ipynb").write_text("the user's own copy")
        src = {"notebook": nb, "missing": root / "no.ipynb", "readme": root / "README.md", "folder": root / "dir.ipynb"}
        src["fifo"] = root / "fifo"
        out = {
            "new": root / f"{name}.ipynb",
            "nested": root / "new" / name / "x.ipynb",
            "notebook": nb,
            "link-to-notebook": root / "link.ipynb",
            "input": table,
            "inside-input": root / "inputs" / name,
            "fifo": root / "fifo",
            "folder": root / "dir.ipynb",
            "user-file": root / "user.ipynb",
        }[target]
        sums_path = {None: None, "new": root / "sums.txt", "notebook": nb, "input": table, "executed": out}[sums]
        inputs = {"t": str(table), "d": str(root / "inputs")}
        before = tree(root)
        result = _run_notebook(src[source], out, inputs, sums_path)
        after = tree(root)
        code, _, err = result
        if code != 0:
            assert_one_line(result, ".")
            assert after == before, (source, target, sums, err)
            return
        assert source == "notebook" and target in ("new", "nested", "user-file"), (source, target, sums)
        assert sums in (None, "new"), (source, target, sums)
        assert Path(out).read_text() == nb.read_text() + " "
        rel = Path(out).relative_to(root).as_posix()
        for k, v in before.items():  # the notebook, its inputs and the user's files beside the output: unchanged
            if k not in (rel, "sums.txt"):
                assert after.get(k) == v, (source, target, sums, k)
        new = [k for k in after if k not in before and k not in (rel, "sums.txt")]
        assert all(rel.startswith(k + "/") for k in new), (source, target, new)  # only the folders above it


# --------------------------------------------------------------------------------------- prepare-images


def test_prepare_images_never_replaces_its_config(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("dataset: digits\n")
    (tmp_path / "hub").mkdir()
    before = tree(tmp_path)
    assert_one_line(cli(["prepare-images", "--config", conf, "--out", conf, "--force"]), r"c.yaml: is the source")
    argv = ["prepare-images", "--config", conf, "--out", tmp_path / "hub" / "x", "--hub-data", tmp_path / "hub"]
    assert_one_line(cli([*argv, "--force"]), r"inside the source")
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------------ pkg: specs and locate-package


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A folder on sys.path with package `agt_data` (and sub-package `agt_data.sub`) whose import would leave a
    file behind, a symbolic link out of it, and a link that stays inside."""
    root = tmp_path / "site"
    pkg = root / "agt_data"
    (pkg / "sub" / "model").mkdir(parents=True)
    (pkg / "m.gguf").write_bytes(b"gguf")
    (pkg / "sub" / "model" / "w.safetensors").write_bytes(b"w")
    for init in (pkg / "__init__.py", pkg / "sub" / "__init__.py"):
        init.write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    (tmp_path / "secret").write_text("outside")
    (pkg / "out").symlink_to(tmp_path / "secret")
    (pkg / "outdir").symlink_to(tmp_path)
    (pkg / "in.gguf").symlink_to(pkg / "m.gguf")
    (root / "agt_other").mkdir()
    (root / "agt_other" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(root))
    yield pkg
    for name in ("agt_data", "agt_data.sub", "agt_other"):
        sys.modules.pop(name, None)


def test_pkg_paths_stay_inside_their_package(site, tmp_path):
    before = tree(tmp_path)
    for spec, why in [
        ("pkg:agt_data//etc/passwd", "relative to the package"),
        ("pkg:agt_data/../agt_other", r"'\.\.'"),
        ("pkg:agt_data/sub/../../agt_other", r"'\.\.'"),
        ("pkg:agt_data/out", "leads outside the package"),
        ("pkg:agt_data/outdir/secret", "leads outside the package"),
    ]:
        with pytest.raises(UserError, match=why):
            resolve(spec)
        assert_one_line(cli(["locate-package", spec]), why)
    assert resolve("pkg:agt_data/in.gguf") == str(site / "in.gguf")  # a link that stays inside
    assert tree(tmp_path) == before


def test_locate_package_refuses_a_plain_path_and_imports_nothing(site, tmp_path):
    assert_one_line(cli(["locate-package", "/nonexistent/foo"]), r"/nonexistent/foo: not a package spec")
    assert_one_line(cli(["locate-package", str(site / "m.gguf")]), r"not a package spec")
    code, out, err = cli(["locate-package", "pkg:agt_data.sub/model"])
    assert code == 0 and out == f"{site / 'sub' / 'model'}\n", err
    assert_one_line(cli(["locate-package", "pkg:agt_data.nosub"]), r"'agt_data.nosub' is not installed")
    assert_one_line(cli(["locate-package", "pkg:agt-data/x"]), r"not a Python package name")
    assert not (tmp_path / "imported").exists() and "agt_data" not in sys.modules


def _oracle(spec: str, root: Path) -> Path | None:
    """Where a spec must lead (independently of packages.resolve), or None when it must be refused."""
    if not spec.startswith("pkg:"):
        return None
    package, _, sub = spec[4:].partition("/")
    folder = {"agt_data": root / "agt_data", "agt_data.sub": root / "agt_data" / "sub", "agt_other": root / "agt_other"}
    if package not in folder or sub.startswith("/") or ".." in sub.split("/"):
        return None
    path = folder[package] / sub
    if not os.path.exists(path):
        return None
    real, top = os.path.realpath(path), os.path.realpath(folder[package])
    return Path(os.path.normpath(path)) if real == top or real.startswith(top + os.sep) else None


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    prefix=st.sampled_from(["pkg:", "pkg:", "pkg:", "", "/", "PKG:"]),
    package=st.sampled_from(["agt_data", "agt_data.sub", "agt_other", "agt_absent", "", "agt-data", "1x", "os"]),
    parts=st.lists(
        st.sampled_from(["", ".", "..", "sub", "model", "m.gguf", "in.gguf", "out", "outdir", "secret", "etc"]),
        max_size=4,
    ),
    lead=st.sampled_from(["/", "//", "/../"]),
)
def test_locate_package_ends_in_a_path_inside_the_package_or_one_line(site, tmp_path, prefix, package, parts, lead):
    spec = prefix + package + (lead + "/".join(parts) if parts else "")
    before = tree(tmp_path)
    result = cli(["locate-package", spec])
    expected = _oracle(spec, site.parent)
    if expected is None:
        assert_one_line(result, ".")
    else:
        code, out, err = result
        assert code == 0 and out == f"{expected}\n", (spec, err)
    assert tree(tmp_path) == before and "agt_data" not in sys.modules and "agt_other" not in sys.modules


# ------------------------------------------------------------------------ prefetch-qk: only what it wrote


def test_prefetch_never_deletes_a_file_it_did_not_write(tmp_path):
    src = bert_dir(tmp_path / "base")
    out = tmp_path / "qk"
    assert prefetch(src, out)[0] == 0
    assert json.loads((out / PREFETCH_MARKER).read_text())["files"] == ["config.json", "model.safetensors"]
    (out / "my_analysis.py").write_text("print('mine')\n")
    before = tree(tmp_path)
    assert_one_line(prefetch(src, out), r"qk: .*not a previous prefetch-qk output.*--force")
    assert tree(tmp_path) == before
    # a marker written before it listed its files vouches for config.json and model.safetensors only
    marker = json.loads((out / PREFETCH_MARKER).read_text())
    del marker["files"]
    (out / PREFETCH_MARKER).write_text(json.dumps(marker))
    assert_one_line(prefetch(src, out), r"not a previous prefetch-qk output")
    (out / "my_analysis.py").unlink()
    assert prefetch(src, out)[0] == 0 and (out / "model.safetensors").is_file()


def test_prefetch_replaces_the_scripts_it_copied_itself(tmp_path):
    from attention_geometry.weights.prefetch import is_prefetch_output

    out = tmp_path / "qk"
    out.mkdir()
    for name in ("config.json", "model.safetensors", "modeling_x.py"):
        (out / name).write_text("x")
    files_ = ["config.json", "model.safetensors", "modeling_x.py"]
    (out / PREFETCH_MARKER).write_text(json.dumps({"origin": "x", "files": files_}))
    assert is_prefetch_output(out)
    (out / "notes.py").write_text("mine")
    assert not is_prefetch_output(out)


# ------------------------------------------------------------------------------------------- standard output


class _Failing(io.StringIO):
    """A stdout whose writes fail as a full device or a pipe with no reader does."""

    def __init__(self, exc: OSError):
        super().__init__()
        self.exc = exc

    def write(self, s):
        raise self.exc

    def flush(self):
        raise self.exc


def _main_with_stdout(stdout, argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def test_score_to_a_full_or_closed_pipe_is_one_line_or_quiet(tmp_path):
    model = bert_dir(tmp_path / "m")
    argv = ["score", model, "--out", "-", "--quiet"]
    code, err = _main_with_stdout(_Failing(BrokenPipeError(errno.EPIPE, "Broken pipe")), argv)
    assert code == EXIT_BROKEN_PIPE and err == ""  # `| head`: the reader went away, as SIGPIPE ends a tool
    code, err = _main_with_stdout(_Failing(OSError(errno.ENOSPC, "No space left on device")), argv)
    assert code == 1 and err.splitlines() == ["error: standard output: cannot write (No space left on device)"], err


def test_a_closed_stdout_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdout", None)  # what Python makes of a closed file descriptor 1
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["score", str(tmp_path / "nothing"), "--out", "-"])
    assert code == 2 and err.getvalue().startswith("error: standard output is closed"), err.getvalue()
    assert len(err.getvalue().splitlines()) == 1


def _locate(site_root: Path, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site_root), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "attention_geometry.cli", "locate-package", "pkg:agt_data/m.gguf"]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, **kw)


def test_a_real_pipe_closed_early_and_a_real_closed_stdout(site):
    proc = _locate(site.parent, stdout=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before the command prints
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == EXIT_BROKEN_PIPE and err == "", err
    proc = _locate(site.parent, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))  # `>&-`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 2 and err.startswith("error: standard output is closed"), err


# ----------------------------------------------------------------------------------------- a full disk


def test_a_full_disk_is_one_line_naming_the_output(tmp_path, monkeypatch):
    """prefetch-qk, prepare-corpus and prepare-images on a disk that fills up while they write: one line naming
    the output, nothing left behind, nothing changed."""
    import attention_geometry.data.blocks as blocks
    import attention_geometry.data.images as images
    import attention_geometry.weights.prefetch as prefetch_mod

    def full(*a, **k):
        raise NOSPACE

    src = bert_dir(tmp_path / "base")
    conf = write_corpus_inputs(tmp_path / "corpus-in")
    digits = tmp_path / "digits.yaml"
    digits.write_text("dataset: digits\n")
    stand_in = write_digits_csv(tmp_path / "digits.csv.gz")  # scikit-learn's data file need not be installed
    monkeypatch.setattr(images, "digits_path", lambda: stand_in)
    monkeypatch.setattr(prefetch_mod, "write_safetensors", full)
    monkeypatch.setattr(blocks, "raw_to_npy", full)
    monkeypatch.setattr(images, "_save", full)
    before = tree(tmp_path)
    for argv, out in [
        (["prefetch-qk", src, "--no-progress"], "qk"),
        (["prepare-corpus", "--config", conf, "--no-progress"], "corpus"),
        (["prepare-images", "--config", digits, "--no-progress"], "images"),
    ]:
        code, _, err = cli([*argv, "--out", tmp_path / out])
        lines = [ln for ln in err.splitlines() if ln.startswith("error")]  # progress bars of in-process runs aside
        assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith(f"error: {tmp_path / out}: cannot write"), err
        assert "(No space left on device: free some space" in lines[0], err
        assert tree(tmp_path) == before, argv


TORCH_FULL = RuntimeError(
    "[enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/0: file write failed"
)


@pytest.mark.slow
def test_a_full_disk_under_torch_save_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    """torch.save reports a full disk as a RuntimeError of its own: one `error:` line naming the run folder; the
    same command then resumes to the same final weights as a run that never failed."""
    import torch

    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config

    corpus = write_random_corpus(tmp_path / "c")
    cfg = write_run_config_file(tmp_path / "run.yaml", corpus, max_steps=9, state_every=3, snapshot_every=3)
    out = tmp_path / "out"
    real, calls = torch.save, {"n": 0}

    def full_after_one(*a, **k):
        calls["n"] += 1
        if calls["n"] > 1:
            raise TORCH_FULL
        return real(*a, **k)

    monkeypatch.setattr(torch, "save", full_after_one)
    code = main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error", "Traceback"))]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {out}: cannot write (a file write failed") and "disk full" in lines[0]
    monkeypatch.setattr(torch, "save", real)
    assert main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    fresh = tmp_path / "fresh"
    train(load_run_config(cfg), fresh, progress=False)
    final = "checkpoints/step-0000009/model.safetensors"
    assert (out / final).read_bytes() == (fresh / final).read_bytes()
    assert not list(out.rglob(".tmp-*"))


# ------------------------------------------------------------------------------ a read-only results folder


def test_a_read_only_results_folder_is_one_line_naming_the_file(tmp_path, monkeypatch):
    from helpers import config_plan, validated_config

    from attention_geometry.errors import ConfigError
    from attention_geometry.workflow.plan import notebook_file
    from attention_geometry.workflow.records import content_current, input_sums_path, write_input_sums

    monkeypatch.chdir(tmp_path)
    cfg = validated_config()
    cfg["results"] = "res"
    plan = config_plan(cfg)
    nb = plan.notebooks[0]
    plan.notebooks = [nb]
    parameters, _, outputs = plan.notebook_io(nb)
    inputs = [notebook_file(plan.catalog, nb), *parameters["inputs"].values()]
    made = [*outputs.values(), input_sums_path(plan, nb)]
    for i, f in enumerate(inputs + made[:-1]):
        os.makedirs(os.path.dirname(f) or ".", exist_ok=True)
        Path(f).write_text(f"content {i}\n")
    write_input_sums(made[-1], inputs)
    for f, t in [(f, 1_000_000) for f in made] + [(f, 2_000_000) for f in inputs]:
        os.utime(f, (t, t))

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "utime", read_only)
    with pytest.raises(ConfigError, match=rf"^{made[0]}: cannot mark it up to date \(Read-only file system\)") as e:
        content_current(plan)
    assert "\n" not in str(e.value)


def test_run_notebook_refuses_input_sums_of_a_folder_before_running(tmp_path, fake_papermill):
    """A folder among the inputs cannot be summed: refused before the run (it was an IsADirectoryError after it,
    found by the property test above), the tree unchanged."""
    nb = _notebook(tmp_path / "nb.ipynb")
    (tmp_path / "inputs").mkdir()
    before = tree(tmp_path)
    result = _run_notebook(nb, tmp_path / "x.ipynb", {"d": str(tmp_path / "inputs")}, tmp_path / "sums.txt")
    assert_one_line(result, r"input 'd' is a folder")
    assert tree(tmp_path) == before
