"""RUN.yaml: the run config, its validation (one UserError naming the key, before any training), and the
prepared-corpus reader (the on-disk contract of `attention-geometry prepare-corpus`)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from ..files import read_yaml
from .models import INITS, OBJECTIVES, SIZES, Hyper, resolve_hyper

__all__ = ["RunConfig", "Corpus", "read_corpus", "load_run_config", "run_config_from_dict", "resolve_run"]

RUNTIME_KEYS = ("threads", "device")  # how a run is executed, not what it computes


@dataclass
class RunConfig:
    """One training run (RUN.yaml). Snapshot, eval and state steps always include 0 (snapshot, eval) and
    max_steps (all three). `regularizer`: {"lambda": float} adds lambda * sum_l ||W_qk,l|| / ||sym(W_qk,l)||
    to the loss (off when absent or 0)."""

    corpus: str
    size: str = "tiny"
    objective: str = "encoder"
    init: str = "standard"
    seed: int = 0
    max_steps: int | None = None  # None: the size's default (Hyper.max_steps)
    snapshot_steps: list[int] | None = None
    snapshot_every: int | None = None
    eval_steps: list[int] | None = None
    eval_every: int | None = None
    eval_blocks: int = 512
    state_every: int | None = 1000  # also write the resumable state every N steps (and at every snapshot)
    log_every: int = 1  # one loss.csv row per N steps: the mean train loss of those N steps
    overrides: dict = field(default_factory=dict)
    regularizer: dict | None = None
    run: str | None = None  # run name; default {size}-{dataset}-{objective}-{init}-s{seed}
    threads: int | None = None
    device: str = "auto"


_TYPES = {
    "corpus": "str", "size": "str", "objective": "str", "init": "str", "seed": "int", "max_steps": "opt_int",
    "snapshot_steps": "opt_int_list", "snapshot_every": "opt_int", "eval_steps": "opt_int_list",
    "eval_every": "opt_int", "eval_blocks": "int", "state_every": "opt_int", "log_every": "int",
    "overrides": "opt_dict", "regularizer": "opt_dict", "run": "opt_str", "threads": "opt_int", "device": "str",
}


def _typed(value: Any, kind: str, key: str, where: str) -> Any:
    def bad(what):
        raise UserError(f"{where}: {key}: expected {what}, got {value!r}")

    if kind.startswith("opt_") and value is None:
        return None
    base = kind.removeprefix("opt_")
    if base == "str":
        if not isinstance(value, str) or not value:
            bad("a non-empty string")
    elif base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            bad("an integer")
    elif base == "int_list":
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            bad("a list of integers")
    elif base == "dict":
        if not isinstance(value, dict):
            bad("a mapping")
    return value


def run_config_from_dict(raw: Any, where: str = "run config") -> RunConfig:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: expected a mapping of keys, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_TYPES))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_TYPES)})")
    if "corpus" not in raw:
        raise UserError(f"{where}: corpus: missing (a directory written by prepare-corpus)")
    kw = {k: _typed(v, _TYPES[k], k, where) for k, v in raw.items()}
    if kw.get("overrides") is None:
        kw.pop("overrides", None)
    cfg = RunConfig(**kw)
    if cfg.size not in SIZES:
        raise UserError(f"{where}: size: unknown size {cfg.size!r} (known: {', '.join(SIZES)})")
    if cfg.objective not in OBJECTIVES:
        raise UserError(f"{where}: objective: unknown objective {cfg.objective!r} (known: {', '.join(OBJECTIVES)})")
    if cfg.init not in INITS:
        raise UserError(f"{where}: init: unknown init {cfg.init!r} (known: {', '.join(INITS)})")
    if cfg.device not in ("auto", "cpu", "cuda"):
        raise UserError(f"{where}: device: unknown device {cfg.device!r} (known: auto, cpu, cuda)")
    for key in ("max_steps", "snapshot_every", "eval_every", "state_every", "threads"):
        v = getattr(cfg, key)
        if v is not None and v < 1:
            raise UserError(f"{where}: {key}: must be >= 1, got {v}")
    if cfg.eval_blocks < 0:
        raise UserError(f"{where}: eval_blocks: must be >= 0, got {cfg.eval_blocks}")
    if cfg.log_every < 1:
        raise UserError(f"{where}: log_every: must be >= 1, got {cfg.log_every}")
    for key in ("snapshot_steps", "eval_steps"):
        v = getattr(cfg, key)
        if v is not None and any(s < 0 for s in v):
            raise UserError(f"{where}: {key}: steps must be >= 0")
    if cfg.snapshot_steps is not None and cfg.snapshot_every is not None:
        raise UserError(f"{where}: snapshot_steps: give snapshot_steps or snapshot_every, not both")
    if cfg.eval_steps is not None and cfg.eval_every is not None:
        raise UserError(f"{where}: eval_steps: give eval_steps or eval_every, not both")
    if cfg.regularizer is not None:
        extra = sorted(set(cfg.regularizer) - {"lambda"})
        lam = cfg.regularizer.get("lambda", 0.0)
        if extra:
            raise UserError(f"{where}: regularizer.{extra[0]}: unknown key (known: lambda)")
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or lam < 0:
            raise UserError(f"{where}: regularizer.lambda: expected a number >= 0, got {lam!r}")
    # unknown override fields / bad values fail here already, before the corpus is opened
    resolve_hyper(cfg.size, cfg.overrides, where=f"{where}: overrides")
    return cfg


def load_run_config(path: str | Path) -> RunConfig:
    p = Path(path)
    raw = read_yaml(p, "run config")
    cfg = run_config_from_dict(raw, where=str(p))
    corpus = Path(cfg.corpus)
    if not corpus.is_absolute():  # relative to the working directory, as the workflow passes it
        cfg.corpus = str(corpus)
    return cfg


# ------------------------------------------------------------------------------------------------ corpus


@dataclass
class Corpus:
    path: Path
    manifest: dict
    train: np.ndarray  # [n_blocks, block_len], memory-mapped
    heldout: np.ndarray

    @property
    def block_len(self) -> int:
        return int(self.train.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def special_tokens(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.manifest["special_tokens"].items()}

    @property
    def dataset(self) -> str:
        return str(self.manifest.get("name") or self.manifest["dataset"])


def read_corpus(path: str | Path, key: str = "corpus") -> Corpus:
    """Open a prepared corpus dir (manifest.json, train.npy, heldout.npy; arrays memory-mapped, never
    unpickled); UserError naming `key` and the file on anything missing or inconsistent."""
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"{key}: corpus directory not found: {p}")
    mf = p / "manifest.json"
    if not mf.is_file():
        raise UserError(f"{key}: {mf} is missing (not a corpus written by prepare-corpus)")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{key}: {mf}: not valid JSON ({exc})") from None
    for k in ("dataset", "block_len", "vocab_size", "special_tokens"):
        if k not in manifest:
            raise UserError(f"{key}: {mf}: field {k!r} is missing")
    for k in ("pad", "cls", "sep", "mask"):
        if k not in manifest["special_tokens"]:
            raise UserError(f"{key}: {mf}: special_tokens.{k} is missing")
    arrays = {}
    for split in ("train", "heldout"):
        f = p / f"{split}.npy"
        if not f.is_file():
            raise UserError(f"{key}: {f} is missing")
        try:
            a = np.load(f, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:
            raise UserError(f"{key}: {f}: not a plain numpy array ({exc})") from None
        if a.ndim != 2 or a.shape[1] != int(manifest["block_len"]) or a.dtype.kind not in "iu":
            raise UserError(f"{key}: {f}: expected integer blocks [n, {manifest['block_len']}], "
                            f"got {a.dtype} {a.shape}")
        arrays[split] = a
    if arrays["train"].shape[0] == 0:
        raise UserError(f"{key}: {p / 'train.npy'} has no blocks (the corpus has no text)")
    return Corpus(p, manifest, arrays["train"], arrays["heldout"])


# ------------------------------------------------------------------------------------------ resolution


def _steps(explicit, every, max_steps, include_zero=True) -> list[int]:
    s = set()
    if explicit is not None:
        s.update(int(x) for x in explicit if int(x) <= max_steps)
    elif every is not None:
        s.update(range(0, max_steps + 1, every))
    if include_zero:
        s.add(0)
    s.add(max_steps)
    return sorted(s)


def resolve_run(cfg: RunConfig, corpus: Corpus) -> tuple[dict, Hyper]:
    """The full resolved run config (what run.yaml holds) and the Hyper it implies; UserError on a corpus
    that does not fit the model (block_len > positions, token ids >= vocab size, no held-out blocks)."""
    h = resolve_hyper(cfg.size, cfg.overrides, where="overrides")
    if cfg.max_steps is not None:
        h.max_steps = cfg.max_steps
    if h.vocab_size is None:
        h.vocab_size = corpus.vocab_size
    elif h.vocab_size < corpus.vocab_size:
        raise UserError(f"overrides.vocab_size: {h.vocab_size} is smaller than the corpus vocabulary "
                        f"({corpus.vocab_size}, {corpus.path / 'manifest.json'})")
    if h.seq_len is None:
        h.seq_len = corpus.block_len
    elif h.seq_len != corpus.block_len:
        raise UserError(f"overrides.seq_len: {h.seq_len} but the corpus has block_len {corpus.block_len} "
                        f"({corpus.path}); prepare the corpus with block_len {h.seq_len}")
    if corpus.block_len > h.max_position_embeddings:
        raise UserError(f"corpus: block_len {corpus.block_len} is longer than the model's "
                        f"max_position_embeddings {h.max_position_embeddings} (overrides.max_position_embeddings)")
    if cfg.eval_blocks > 0 and corpus.heldout.shape[0] == 0:
        raise UserError(f"eval_blocks: {cfg.eval_blocks} but {corpus.path / 'heldout.npy'} has no blocks")
    max_steps = h.max_steps
    dataset = corpus.dataset
    name = cfg.run or f"{cfg.size}-{dataset}-{cfg.objective}-{cfg.init}-s{cfg.seed}"
    lam = float((cfg.regularizer or {}).get("lambda", 0.0))
    resolved = {
        "run": name,
        "size": cfg.size,
        "dataset": dataset,
        "objective": cfg.objective,
        "init": cfg.init,
        "seed": cfg.seed,
        "corpus": str(Path(cfg.corpus).resolve()),
        "corpus_manifest": {k: corpus.manifest[k] for k in ("dataset", "name", "block_len", "vocab_size",
                                                             "special_tokens") if k in corpus.manifest},
        "n_train_blocks": int(corpus.train.shape[0]),
        "max_steps": max_steps,
        "snapshot_steps": _steps(cfg.snapshot_steps, cfg.snapshot_every, max_steps),
        "eval_steps": _steps(cfg.eval_steps, cfg.eval_every, max_steps),
        "eval_blocks": min(cfg.eval_blocks, int(corpus.heldout.shape[0])),
        "state_every": cfg.state_every,
        "log_every": cfg.log_every,
        "regularizer": {"lambda": lam},
        "hyper": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(h).items()},
        "runtime": {"threads": cfg.threads, "device": cfg.device},
    }
    return resolved, h
