"""Helpers shared by the test modules (tests/ is on sys.path): the validated repository configs and the plan
they imply, the Snakemake runner and its dry-run parsers, a copy of the workflow files, and the special
tokens of the small corpora tests write."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from attention_geometry.workflow.plan import plan
from attention_geometry.workflow.runs import expand_runs

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")
WORKFLOW_FILES = ["Snakefile", "rules", "config", "envs", "notebooks", "resources", "profiles"]
# the special-token ids of the small corpora the tests write (the order the corpus format requires)
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}


# ---------------------------------------------------------------------------------------------- configs
def _defaults(cfg: dict, schema: dict) -> dict:
    """Fill the `default`s of config/schema.yaml's object properties in, as Snakemake's validate does."""
    for key, prop in schema.get("properties", {}).items():
        if key not in cfg and "default" in prop:
            cfg[key] = copy.deepcopy(prop["default"])
        if isinstance(cfg.get(key), dict):
            _defaults(cfg[key], prop)
    return cfg


def validated_config(name: str = "smoke.yaml") -> dict:
    """A repository config with the schema's defaults (the workflow sees the validated config)."""
    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    return _defaults(yaml.safe_load((REPO / "config" / name).read_text()), schema)


def config_plan(cfg, **kw):
    """The workflow's plan for `cfg` (packaged models stay pkg: specs: no installed package needed)."""
    return plan(cfg, str(REPO), kw.pop("configfiles", ()))


def run_names(cfg: dict) -> set[str]:
    """The names of every training run a config expands to."""
    return set(expand_runs(cfg["training"]["groups"], cfg["corpora"], cfg.get("images") or {})[0])


# -------------------------------------------------------------------------------------------- snakemake
def env() -> dict:
    out = dict(os.environ)
    out["PATH"] = f"{BIN}{os.pathsep}{out.get('PATH', '')}"
    out.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return out


def snakemake(*args, cwd=REPO, timeout=600, check=True):
    proc = subprocess.run([SNAKEMAKE, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> number of jobs."""
    counts, inside = {}, False
    for line in output.splitlines():
        if line.startswith("job ") and "count" in line:
            inside = True
            continue
        if inside:
            parts = line.split()
            if not parts or set(parts[0]) == {"-"}:
                continue
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    return counts


def job_files(output: str) -> list[tuple[str, list[str], list[str]]]:
    """(rule, inputs, outputs) of every job of a dry run's listing."""
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \S+:$)", output, flags=re.M)[1:]:
        m = re.match(r"(?:local)?rule (\S+):", block)
        block = block.split("\n\n")[0]
        files = {"input": [], "output": []}
        for key in files:
            line = re.search(rf"^\s+{key}: (.*)$", block, re.M)
            if line:
                files[key] = [p.strip() for p in line.group(1).split(",")]
        jobs.append((m.group(1), files["input"], files["output"]))
    return jobs


def local_rules() -> set[str]:
    """The rules named by the `localrules:` directives of rules/*.smk (Snakemake runs them on the submitting
    host; a dry run does not say which jobs are local)."""
    names = set()
    for smk in (REPO / "rules").glob("*.smk"):
        for block in re.findall(r"^localrules:\n((?:[ \t]+\w+,?\n)+)", smk.read_text(), re.M):
            names |= set(block.replace(",", " ").split())
    return names


def dry_run_shell_commands(output: str) -> list[tuple[str, bool, str]]:
    """(rule, whether it is a local rule, its shell command) of every job of a `snakemake -n -p` listing."""
    local = local_rules()
    jobs = []
    for block in re.split(r"^(?=(?:local)?rule \S+:$)", output, flags=re.M)[1:]:
        m = re.match(r"(?:local)?rule (\S+):", block)
        cmd = re.search(r"^Shell command: (.*)$", block.split("\n\n")[0], re.M)
        jobs.append((m.group(1), m.group(1) in local, cmd.group(1) if cmd else ""))
    return jobs


def copy_workflow(dest: Path) -> Path:
    """The workflow's files (not results/, not .snakemake/) in a new folder: workflow runs there never touch
    the repository's results or share its lock."""
    dest.mkdir(parents=True)
    for name in WORKFLOW_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        else:
            shutil.copy2(src, dest / name)
    return dest


# ---------------------------------------------------------------------------------------------- outputs
def assert_has_content(path: Path) -> None:
    """A written figure or table holds something: a PNG of more than two colours and over 100 px a side, a PDF
    with a page, a CSV with rows, a Markdown table, a LaTeX tabular."""
    path = Path(path)
    if path.suffix == ".png":
        import matplotlib.image
        import numpy as np

        img = matplotlib.image.imread(path)
        assert img.shape[0] > 100 and img.shape[1] > 100, path
        assert np.unique(img.reshape(-1, img.shape[-1]), axis=0).shape[0] > 2, f"{path}: blank"
    elif path.suffix == ".pdf":
        data = path.read_bytes()
        assert data.startswith(b"%PDF") and b"/Type /Page" in data, path
    elif path.suffix == ".csv":
        import pandas as pd

        assert len(pd.read_csv(path)), f"{path}: no rows"
    elif path.suffix == ".md":
        lines = path.read_text().splitlines()
        assert any(ln.startswith("|") and "---" in ln for ln in lines), f"{path}: no Markdown table"
    elif path.suffix == ".tex":
        assert "\\begin{tabular}" in path.read_text(), f"{path}: no tabular"
    else:
        assert path.stat().st_size > 0, path


# ------------------------------------------------------------------------------ small corpora and runs
# A prepared corpus of random token ids, a RUN.yaml for the trainer, and the CLI in a subprocess (training
# tests); a held-out-only corpus and a run folder of given snapshots (update and scoring tests).
TINY_SHAPE = {
    "num_layers": 2,
    "hidden_size": 32,
    "num_heads": 2,
    "intermediate_size": 64,
    "batch_size": 8,
    "warmup_steps": 5,
}


def run_keys(run: str, objective: str, init: str, seed: int, dataset: str = "wiki", size: str = "tiny") -> dict:
    """The run key columns of a tidy table's row (formats.columns.RUN_KEYS, after `run`), in the contract's order:
    what the synthetic tables of the analysis, claims and notebook tests put in every row."""
    return dict(run=run, size=size, dataset=dataset, objective=objective, init=init, seed=seed)


def write_random_corpus(d: Path, n_train=64, n_heldout=16, block_len=16, vocab=50, seed=0) -> Path:
    """A prepared-corpus dir in the prepare-corpus format, with random token ids."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("heldout", n_heldout)):
        a = rng.integers(5, vocab, size=(n, block_len)).astype(np.int32)
        if n:
            a[:, 0], a[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
        np.save(d / f"{name}.npy", a)
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "dataset": "random",
                "name": "random",
                "block_len": block_len,
                "vocab_size": vocab,
                "n_train_blocks": n_train,
                "n_heldout_blocks": n_heldout,
                "special_tokens": SPECIAL,
            }
        )
    )
    return d


def write_run_config_file(path: Path, corpus: Path, **kw) -> Path:
    cfg = {
        "corpus": str(corpus),
        "size": "tiny",
        "objective": "encoder",
        "init": "standard",
        "seed": 0,
        "max_steps": 12,
        "snapshot_every": 6,
        "eval_every": 4,
        "eval_blocks": 8,
        "state_every": 3,
        "threads": 1,
        "overrides": dict(TINY_SHAPE),
    }
    overrides = kw.pop("overrides", {})
    for kind in ("snapshot", "eval"):
        if f"{kind}_steps" in kw:
            cfg.pop(f"{kind}_every")
    cfg.update(kw)
    cfg["overrides"].update(overrides)
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_cli(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "attention_geometry.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        **kw,
    )


TOY_VOCAB = 61


def fresh_linear_std(fan_in: int) -> float:
    """The standard deviation of PyTorch's default nn.Linear weight init, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    (a uniform on [-b, b] has variance b^2 / 3): what the fresh inits' q, k and v weights must show."""
    return 1.0 / (3.0 * fan_in) ** 0.5


def tiny_bert_config(objective: str, hidden=24, layers=2, heads=3):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=TOY_VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        is_decoder=objective == "decoder",
        attn_implementation="eager",
    )


def tiny_bert(objective: str, seed: int, random_biases: bool = True, **kw):
    import torch
    from transformers import BertForMaskedLM, BertLMHeadModel

    torch.manual_seed(seed)
    cls = BertLMHeadModel if objective == "decoder" else BertForMaskedLM
    model = cls(tiny_bert_config(objective, **kw))
    if random_biases:  # BERT initializes biases to zero; the bias terms of the logits must not matter for G
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.1)
    return model.eval()


def token_blocks(n_blocks=12, block_len=16, seed=0, pad_some=True) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arr = rng.integers(5, TOY_VOCAB, size=(n_blocks, block_len), dtype=np.int64)
    arr[:, 0] = SPECIAL["cls"]
    arr[:, -1] = SPECIAL["sep"]
    if pad_some:  # a few blocks end in padding
        arr[1, -5:] = SPECIAL["pad"]
        arr[1, -6] = SPECIAL["sep"]
        arr[4, -3:] = SPECIAL["pad"]
    return arr


def toy_manifest(heldout: np.ndarray) -> dict:
    return {"dataset": "toy", "block_len": int(heldout.shape[1]), "special_tokens": SPECIAL, "vocab_size": TOY_VOCAB}


def write_heldout_corpus(path: Path, heldout: np.ndarray) -> Path:
    path.mkdir(parents=True)
    np.save(path / "heldout.npy", heldout)
    np.save(path / "train.npy", heldout[:2])
    (path / "manifest.json").write_text(json.dumps(toy_manifest(heldout)))
    return path


def write_snapshot_run(path: Path, objective: str, models: dict, corpus: Path) -> Path:
    run = {
        "run": f"tiny-toy-{objective}-standard-s0",
        "size": "tiny",
        "dataset": "toy",
        "objective": objective,
        "init": "standard",
        "seed": 0,
        "corpus": str(corpus),
    }
    path.mkdir(parents=True)
    (path / "run.yaml").write_text(yaml.safe_dump(run))
    for step, model in models.items():
        model.save_pretrained(path / "checkpoints" / f"step-{step:07d}")
    return path


def cli_in_process(argv) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the console script run in this process; argparse's exit included."""
    import contextlib
    import io

    from attention_geometry.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()
