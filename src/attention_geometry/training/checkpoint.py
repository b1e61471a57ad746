"""What the trainer writes into its run directory (the format and its names: attention_geometry.rundir):
run.yaml, loss.csv, the weight snapshots checkpoints/step-XXXXXXX/ and the resumable state/. Every file
and folder is written under a temporary name and renamed into place (attention_geometry.files)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path
from typing import Callable

import torch

from ..contract import LOSS_COLUMNS
from ..errors import UserError
from ..files import atomic_write_text, read_yaml, replace_dir
from ..rundir import LOSS_CSV, RUN_YAML, STATE, snapshot_dir
from .config import RUNTIME_KEYS

__all__ = ["write_run_yaml", "read_loss_rows", "write_loss_rows", "save_snapshot", "save_state", "load_state"]


def _yaml_dump(obj) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False)


def _write_dir(final: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) into a fresh `.tmp-{name}-{pid}` beside `final`, then swap it in (files.replace_dir); a
    crash leaves only a dot-tmp folder."""
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write(tmp)
    replace_dir(tmp, final)


# ----------------------------------------------------------------------------------------------- run.yaml


def write_run_yaml(out: Path, resolved: dict) -> None:
    """OUT/run.yaml: written for a new run; for an existing one, checked to hold the same run (runtime
    settings aside), else a UserError (a run dir holds one run)."""
    path = out / RUN_YAML
    if not path.is_file():
        atomic_write_text(path, _yaml_dump(resolved))
        return
    old = read_yaml(path, RUN_YAML) or {}
    for key in sorted(set(old) | set(resolved)):
        if key in ("runtime",) or key in RUNTIME_KEYS:
            continue
        if old.get(key) != resolved.get(key):
            raise UserError(f"{path}: this run dir holds a run with a different {key!r} "
                            f"({old.get(key)!r} vs now {resolved.get(key)!r}); use a new --out")


# ----------------------------------------------------------------------------------------------- loss.csv


def read_loss_rows(out: Path) -> list[dict]:
    path = out / LOSS_CSV
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_loss_rows(out: Path, rows: list[dict]) -> None:
    """OUT/loss.csv with the columns contract.LOSS_COLUMNS (csv's default \\r\\n line ends)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=LOSS_COLUMNS)
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / LOSS_CSV, buf.getvalue())


# ----------------------------------------------------------------------------------------------- snapshots


def save_snapshot(model, out: Path, step: int, resolved: dict) -> Path:
    """OUT/checkpoints/step-XXXXXXX/: the model's save_pretrained (model.safetensors, config.json) and
    run.yaml."""
    final = snapshot_dir(out, step)
    final.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp):
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            model.save_pretrained(tmp)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        (tmp / RUN_YAML).write_text(_yaml_dump(resolved), encoding="utf-8")

    _write_dir(final, write)
    return final


def save_state(model, opt, scaler, out: Path, step: int, resolved: dict) -> None:
    """OUT/state/: the weights, optimizer, scaler and RNG of `step` (replacing the older state)."""
    from safetensors.torch import save_file

    def write(tmp):
        sd = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
        save_file(sd, str(tmp / "model.safetensors"))
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save({"optimizer": opt.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                    "rng": rng}, tmp / "training.pt")
        (tmp / "state.json").write_text(json.dumps({
            "step": step, "run": resolved["run"], "examples_seen": step * resolved["hyper"]["batch_size"],
            "lr_schedule": {"kind": resolved["hyper"]["schedule"], "last_update": step},
        }, indent=1), encoding="utf-8")

    _write_dir(out / STATE, write)


def load_state(state_dir: Path, model, opt, scaler, dev: torch.device) -> None:
    """Restore what save_state wrote (weights, optimizer, scaler, RNG) into the freshly built objects."""
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(state_dir / "model.safetensors"), device=str(dev)))
    tr = torch.load(state_dir / "training.pt", map_location=dev, weights_only=True)
    opt.load_state_dict(tr["optimizer"])
    if scaler is not None and tr.get("scaler"):
        scaler.load_state_dict(tr["scaler"])
    torch.set_rng_state(tr["rng"]["torch"].cpu())
    if dev.type == "cuda" and "cuda" in tr["rng"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in tr["rng"]["cuda"]])
