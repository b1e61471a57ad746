"""The CPU default (`batch_path: host`) trains bit for bit as it did before the device path existed: short runs
of config/smoke.yaml's shape (the tiny size, blocks of 32 tokens, a vocabulary of 512, batches of 32) on random
corpora against the loss.csv files in tests/data/, written by this file at the commit before the device path
(`python tests/test_host_path.py --write`, with that commit's src/ first on PYTHONPATH).

The third run takes the authors' recipe (documents with padding, 2 micro-batches, loss_mean micro_batches,
dropout, the Trainer's schedule and decay groups) through the same loop, so the padded micro-batches, the
accumulation and the per-update dropout seeding are pinned too.

The committed numbers are those of this project's pinned torch on an x86-64 CPU with one thread; another
torch build or another CPU's matrix kernels can change the last digits, which this test then reports (the
host path itself is then not what changed: tests/test_training.py's byte-identity tests compare runs on one
machine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

DATA = Path(__file__).resolve().parent / "data"
SPECIAL = {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
BLOCK, VOCAB = 32, 512  # config/smoke.yaml's corpus
AUTHORS = {
    "recipe": "authors",
    "grad_accum": 2,
    "per_device_batch_size": 16,
    "loss_mean": "micro_batches",
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "weight_decay_params": "trainer",
    "schedule": "trainer-linear",
}
RUNS = {
    "encoder": ("encoder", "packed", {"schedule": "constant"}),
    "decoder": ("decoder", "packed", {"schedule": "constant"}),
    "authors": ("decoder-paper", "documents", AUTHORS),
}


def corpus(d: Path, layout: str) -> Path:
    """Random blocks of the smoke shape; `documents`: a third of them a shorter document padded with [PAD]."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, n in (("train", 512), ("heldout", 16)):
        a = rng.integers(5, VOCAB, size=(n, BLOCK)).astype(np.int32)
        a[:, 0], a[:, -1] = SPECIAL["cls"], SPECIAL["sep"]
        if layout == "documents":
            for i in range(0, n, 3):
                k = int(rng.integers(4, BLOCK))
                a[i, k - 1], a[i, k:] = SPECIAL["sep"], SPECIAL["pad"]
        np.save(d / f"{name}.npy", a)
    manifest = {"dataset": "random", "name": "random", "block_len": BLOCK, "vocab_size": VOCAB}
    manifest.update(special_tokens=SPECIAL, **({"layout": layout} if layout == "documents" else {}))
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def train_runs(tmp: Path) -> dict[str, str]:
    """loss.csv of each run of RUNS, 30 updates on one thread."""
    from attention_geometry.training.loop import train
    from attention_geometry.training.run_config import load_run_config

    out = {}
    for name, (objective, layout, overrides) in RUNS.items():
        cfg = {
            "corpus": str(corpus(tmp / f"corpus-{layout}", layout)),
            "size": "tiny",
            "objective": objective,
            "seed": 0,
            "max_steps": 30,
            "snapshot_steps": [],
            "eval_every": 10,
            "eval_blocks": 8,
            "log_every": 10,
            "threads": 1,
            "device": "cpu",
            "overrides": {"warmup_steps": 5, **overrides},
        }
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        train(load_run_config(path), tmp / name, progress=False)
        out[name] = (tmp / name / "loss.csv").read_text()
    return out


def cpu_kind() -> dict:
    """What decides the CPU's fp32 kernels: the vendor and the vector extensions (from /proc/cpuinfo)."""
    info = {"vendor": "unknown", "flags": []}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            info["vendor"] = value.strip()
        elif key.strip() == "flags":
            info["flags"] = sorted(f for f in value.split() if f.startswith(("avx", "amx", "fma")))
            break
    return info


def test_the_host_path_trains_as_before(tmp_path):
    """Byte for byte on the kind of CPU the rows were written on (tests/data/host-path-cpu.json); on another kind
    (another vendor or vector extensions, whose kernels may round differently) every number within 1e-5 relative,
    which still catches any change of the arithmetic (a changed mask, order or loss moves the losses at once)."""
    runs = train_runs(tmp_path)
    same_kind = json.loads((DATA / "host-path-cpu.json").read_text()) == cpu_kind()
    for name, text in runs.items():
        want = (DATA / f"host-path-{name}.csv").read_text()
        assert len(want.splitlines()) == 5  # the header and the rows of steps 0, 10, 20, 30
        if same_kind:
            assert text == want, f"{name}: loss.csv differs from tests/data/host-path-{name}.csv"
            continue
        got_rows, want_rows = ([r.split(",") for r in t.splitlines()] for t in (text, want))
        assert [len(r) for r in got_rows] == [len(r) for r in want_rows], name
        for got_row, want_row in zip(got_rows, want_rows):
            for g, w in zip(got_row, want_row):
                try:
                    gf, wf = float(g), float(w)
                except ValueError:
                    assert g == w, (name, g, w)
                    continue
                np.testing.assert_allclose(gf, wf, rtol=1e-5, err_msg=f"{name}: another CPU kind, beyond rounding")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_host_path.py --write")
    import tempfile

    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in train_runs(Path(tmp)).items():
            (DATA / f"host-path-{name}.csv").write_text(text)
            print(f"wrote tests/data/host-path-{name}.csv")
    (DATA / "host-path-cpu.json").write_text(json.dumps(cpu_kind()) + "\n")
