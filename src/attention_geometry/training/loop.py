"""The training loop: a lean plain-PyTorch loop (nanoGPT-style), DDP under torchrun, bitwise resume.

Data order: the global batch of update t (1-based) holds the global examples g = (t-1)*B ... t*B-1; example
g is block perm_e[g mod n] of the train split, perm_e a permutation seeded by (seed, epoch e = g // n).
Each process takes its contiguous slice of the global batch, then splits it into `grad_accum` micro-batches.
MLM masks come from a generator seeded by (seed, t, g), so any number of processes sees the same examples
and masks. The loss of an update is the token mean over the whole global batch (each process divides its
token-summed loss by the global token count, which every process knows without communication).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..errors import UserError
from .config import RUNTIME_KEYS, Corpus, RunConfig, read_corpus, resolve_run
from .models import Hyper, build_model, hidden_states, lm_loss, symmetry_penalty

__all__ = ["train", "lr_at", "global_indices", "mask_tokens", "make_batch", "LOSS_COLUMNS"]

LOSS_COLUMNS = ["run", "size", "dataset", "objective", "init", "seed", "step", "train_loss", "eval_loss",
                "learning_rate"]
_MASK_STREAM, _EVAL_STREAM, _ORDER_STREAM = 0, 1, 2
_EVAL_SEED = 20250214  # eval masks do not depend on the run's seed: one fixed held-out set for all runs

log = logging.getLogger("attention_geometry.training")


# ------------------------------------------------------------------------------------------ schedule


def lr_at(h: Hyper, step: int) -> float:
    """Learning rate of update `step` (1-based): linear warmup over warmup_steps to h.lr, then linear decay
    reaching lr / (max_steps - warmup_steps + 1) at the last update ('linear'), or flat ('constant')."""
    if h.warmup_steps > 0 and step <= h.warmup_steps:
        return h.lr * step / h.warmup_steps
    if h.schedule == "constant":
        return h.lr
    return h.lr * (h.max_steps - step + 1) / (h.max_steps - h.warmup_steps + 1)


# -------------------------------------------------------------------------------------------- data


class _Order:
    """Global example index -> train block index, through per-epoch seeded permutations (cached)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self._cache = n, seed, {}

    def perm(self, epoch: int) -> np.ndarray:
        p = self._cache.get(epoch)
        if p is None:
            p = np.random.default_rng([self.seed, _ORDER_STREAM, epoch]).permutation(self.n)
            self._cache = {epoch: p, **{k: v for k, v in self._cache.items() if k == epoch - 1}}
        return p

    def __call__(self, g: np.ndarray) -> np.ndarray:
        epochs, pos = np.divmod(g, self.n)
        out = np.empty_like(g)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self.perm(int(e))[pos[sel]]
        return out


def global_indices(step: int, batch_size: int) -> np.ndarray:
    """The global example indices of update `step` (1-based)."""
    return np.arange((step - 1) * batch_size, step * batch_size, dtype=np.int64)


def mask_tokens(ids: np.ndarray, keys: list[list[int]], h: Hyper, special: dict[str, int], vocab_size: int):
    """BERT masking of each row of `ids` [n, L] with its own generator default_rng(keys[i]): positions that
    are not [CLS]/[SEP]/[PAD]/[MASK] are selected with probability mlm_probability; of those,
    mask_token_fraction become [MASK], random_token_fraction a uniform random id in [0, vocab_size), the
    rest stay. Returns (inputs, labels) with labels = original id at selected positions, -100 elsewhere."""
    n, L = ids.shape
    u = np.empty((n, L))
    w = np.empty((n, L))
    r = np.empty((n, L), dtype=np.int64)
    for i, key in enumerate(keys):
        rng = np.random.default_rng(key)
        u[i] = rng.random(L)
        w[i] = rng.random(L)
        r[i] = rng.integers(0, vocab_size, L)
    ids = ids.astype(np.int64)
    maskable = ~np.isin(ids, [special["cls"], special["sep"], special["pad"], special["mask"]])
    sel = maskable & (u < h.mlm_probability)
    to_mask = sel & (w < h.mask_token_fraction)
    to_rand = sel & (w >= h.mask_token_fraction) & (w < h.mask_token_fraction + h.random_token_fraction)
    inputs = np.where(to_mask, special["mask"], np.where(to_rand, r, ids))
    labels = np.where(sel, ids, -100)
    return inputs, labels


def make_batch(blocks: np.ndarray, objective: str, keys, h: Hyper, special: dict, vocab_size: int):
    """(inputs, labels) int64 numpy arrays of one batch of blocks."""
    ids = np.asarray(blocks, dtype=np.int64)
    if objective == "encoder":
        return mask_tokens(ids, keys, h, special, vocab_size)
    return ids, np.where(ids == special["pad"], -100, ids)


# ----------------------------------------------------------------------------------------- run dir


def _atomic_dir(final: Path, write) -> None:
    """write(tmp_dir) then rename to `final` (replacing an older one); a crash leaves only a dot-tmp dir."""
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    write(tmp)
    if final.exists():
        old = final.parent / f".old-{final.name}-{os.getpid()}"
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old)
    else:
        tmp.rename(final)


def _yaml_dump(obj) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False)


def _save_snapshot(model, out: Path, step: int, resolved: dict) -> Path:
    final = out / "checkpoints" / f"step-{step:07d}"
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
        (tmp / "run.yaml").write_text(_yaml_dump(resolved), encoding="utf-8")

    _atomic_dir(final, write)
    return final


def _save_state(model, opt, scaler, out: Path, step: int, resolved: dict) -> None:
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

    _atomic_dir(out / "state", write)


def _find_state(out: Path) -> Path | None:
    """The newest complete state dir: `state/` (renamed into place only when complete), or an `.old-state-*`
    left by a crash between the two renames of a replacement."""
    s = out / "state"
    if (s / "state.json").is_file():
        return s
    olds = sorted(out.glob(".old-state-*"))
    for o in olds:
        if (o / "state.json").is_file():
            return o
    return None


def _read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _write_rows(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=LOSS_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


# ------------------------------------------------------------------------------------------- runtime


def _dist_env() -> tuple[int, int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return world, rank, local


def _pick_device(device: str, local_rank: int) -> torch.device:
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise UserError("device: cuda requested but no CUDA device is available")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _precision(h: Hyper, device: torch.device) -> str:
    if h.precision != "auto":
        return h.precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return "fp32"


class _LossModule(nn.Module):
    """The model's token-summed training loss as a module, so DDP (and torch.compile) wrap one forward."""

    def __init__(self, model, objective: str, compile_: bool):
        super().__init__()
        self.model, self.objective = model, objective
        # only the transformer stack is compiled (static shapes); the masked-position gather, output layer
        # and loss have data-dependent shapes and stay eager
        self.hidden_fn = torch.compile(hidden_states) if compile_ else None

    def forward(self, inputs, labels, pad_id: int | None):
        return lm_loss(self.model, inputs, labels, self.objective, pad_id=pad_id, hidden_fn=self.hidden_fn)


def _optimizer(model, h: Hyper, device: torch.device):
    decay, no_decay = [], []
    for p in model.parameters():  # parameters() yields a tied weight once
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": h.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kind = h.fused_optimizer
    if kind == "auto":
        kind = "fused"  # one kernel per parameter, on CUDA and CPU alike (benchmarks/train_throughput.py)
    kw = {"fused": True} if kind == "fused" else {"foreach": kind == "foreach"}
    return torch.optim.AdamW(groups, lr=h.lr, betas=tuple(h.betas), eps=h.eps, **kw)


@torch.no_grad()
def evaluate(model, corpus_heldout: np.ndarray, n_blocks: int, objective: str, h: Hyper, special: dict,
             vocab_size: int, device, autocast, micro: int) -> float:
    """Token-mean loss on the first n_blocks held-out blocks (masks fixed by block index, seed-free)."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for a in range(0, n_blocks, micro):
        idx = np.arange(a, min(a + micro, n_blocks))
        keys = [[_EVAL_SEED, _EVAL_STREAM, int(i)] for i in idx]
        inp, lab = make_batch(corpus_heldout[idx], objective, keys, h, special, vocab_size)
        inp_t = torch.from_numpy(inp).to(device)
        lab_t = torch.from_numpy(lab).to(device)
        with autocast():
            s = lm_loss(model, inp_t, lab_t, objective, pad_id=special["pad"])
        total += float(s)
        n = lab[:, 1:] if objective == "decoder" else lab
        count += int((n != -100).sum())
    model.train(was)
    return total / max(count, 1)


def _check_resolved(path: Path, resolved: dict) -> None:
    import yaml

    old = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    for key in sorted(set(old) | set(resolved)):
        if key in ("runtime",) or key in RUNTIME_KEYS:
            continue
        if old.get(key) != resolved.get(key):
            raise UserError(f"{path}: this run dir holds a run with a different {key!r} "
                            f"({old.get(key)!r} vs now {resolved.get(key)!r}); use a new --out")


def _setup_logging(out: Path, rank: int) -> logging.Handler | None:
    if rank != 0:
        return None
    handler = logging.FileHandler(out / "train.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


# ---------------------------------------------------------------------------------------------- train


def train(cfg: RunConfig, out: str | Path, threads: int | None = None, device: str | None = None,
          progress: bool = True) -> dict:
    """Train (or resume, or do nothing for a finished) run `cfg` into run dir `out`. Returns a summary
    {run, step, status: trained|resumed|finished, seconds, s_per_step}. Every input is validated before
    anything is written."""
    corpus = read_corpus(cfg.corpus)
    resolved, h = resolve_run(cfg, corpus)
    threads = threads if threads is not None else cfg.threads
    device_name = device if device is not None else cfg.device
    world, rank, local_rank = _dist_env()
    if h.batch_size % (world * h.grad_accum):
        raise UserError(f"overrides.batch_size: {h.batch_size} is not divisible by processes x grad_accum "
                        f"({world} x {h.grad_accum})")
    dev = _pick_device(device_name, local_rank)
    if threads:
        torch.set_num_threads(threads)
    out = Path(out)
    resolved["runtime"] = {"threads": threads, "device": str(dev.type), "world_size": world}

    dist = None
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")

    try:
        return _train(cfg, corpus, resolved, h, out, dev, world, rank, dist, progress)
    finally:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()


def _train(cfg, corpus: Corpus, resolved, h: Hyper, out: Path, dev, world, rank, dist, progress) -> dict:
    t_start = time.perf_counter()
    max_steps = resolved["max_steps"]
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        if (out / "run.yaml").is_file():
            _check_resolved(out / "run.yaml", resolved)
        else:
            tmp = out / ".run.yaml.tmp"
            tmp.write_text(_yaml_dump(resolved), encoding="utf-8")
            tmp.replace(out / "run.yaml")
    if dist is not None:
        dist.barrier()
    handler = _setup_logging(out, rank)
    try:
        state_dir = _find_state(out)
        start = 0
        if state_dir is not None:
            start = int(json.loads((state_dir / "state.json").read_text())["step"])
        if start >= max_steps:
            if rank == 0:
                log.info("run %s already finished at step %d: nothing to do", resolved["run"], start)
            return {"run": resolved["run"], "step": start, "status": "finished", "seconds": 0.0,
                    "s_per_step": None}

        special = corpus.special_tokens
        V = h.vocab_size
        model = build_model(cfg.size, cfg.objective, cfg.init, cfg.seed, special_tokens=special, _hyper=h)
        model.to(dev)
        model.train()
        opt = _optimizer(model, h, dev)
        prec = _precision(h, dev)
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
        scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None

        def autocast():
            if amp_dtype is None:
                return contextlib.nullcontext()
            return torch.autocast(dev.type, dtype=amp_dtype)

        loss_path = out / "loss.csv"
        if state_dir is not None:
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(state_dir / "model.safetensors"), device=str(dev)))
            tr = torch.load(state_dir / "training.pt", map_location=dev, weights_only=True)
            opt.load_state_dict(tr["optimizer"])
            if scaler is not None and tr.get("scaler"):
                scaler.load_state_dict(tr["scaler"])
            torch.set_rng_state(tr["rng"]["torch"].cpu())
            if dev.type == "cuda" and "cuda" in tr["rng"]:
                torch.cuda.set_rng_state_all([s.cpu() for s in tr["rng"]["cuda"]])
            rows = [r for r in _read_rows(loss_path) if int(r["step"]) <= start]
            if rank == 0:
                _write_rows(loss_path, rows)
                log.info("resuming run %s from %s at step %d", resolved["run"], state_dir, start)
        else:
            rows = []
            if rank == 0:
                _write_rows(loss_path, rows)
                log.info("starting run %s (%d steps, %s, %d process(es), %s)", resolved["run"], max_steps,
                         dev.type, world, prec)

        B, A = h.batch_size, h.grad_accum
        per_rank = B // world
        micro = per_rank // A
        order = _Order(int(corpus.train.shape[0]), cfg.seed)
        snaps = set(resolved["snapshot_steps"])
        evals = set(resolved["eval_steps"])
        state_every = resolved["state_every"]
        lam = resolved["regularizer"]["lambda"]
        ident = {k: resolved[k] for k in ("run", "size", "dataset", "objective", "init", "seed")}
        n_eval = resolved["eval_blocks"]

        loss_mod = _LossModule(model, cfg.objective, h.compile)
        fwd = loss_mod
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            fwd = DDP(loss_mod, device_ids=[dev.index] if dev.type == "cuda" else None)

        def eval_now(step):
            if rank != 0 or n_eval == 0 or step not in evals:
                return None
            e = evaluate(model, corpus.heldout, n_eval, cfg.objective, h, special, V, dev, autocast, max(micro, 1))
            log.info("step %d eval_loss %.6f", step, e)
            return e

        def fmt(x):
            return "" if x is None else repr(float(x))

        if start == 0:
            e0 = eval_now(0)
            if rank == 0:
                if 0 in snaps:
                    _save_snapshot(model, out, 0, resolved)
                if e0 is not None:
                    rows.append({**ident, "step": 0, "train_loss": "", "eval_loss": fmt(e0),
                                 "learning_rate": fmt(0.0)})
                    _write_rows(loss_path, rows)

        pending: list[tuple] = []  # (step, token-summed loss of this process, lr, global token count)
        window: list[float] = []  # per-update mean losses since the last row
        le = resolved["log_every"]
        row_steps = {s for s in range(start + 1, max_steps + 1)
                     if s % le == 0 or s in evals or s in snaps or s == max_steps
                     or (state_every and s % state_every == 0)}
        bar = None
        if rank == 0 and progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=max_steps, initial=start, desc=resolved["run"], unit="step", dynamic_ncols=True)

        def flush(eval_step, eval_loss):
            """Turn the pending per-step losses into loss.csv rows (one all-reduce for all of them). A row
            at every row step holds the mean train loss of the updates since the previous row."""
            nonlocal pending
            if not pending:
                return
            sums = torch.stack([p[1] for p in pending]).double()
            if dist is not None:
                dist.all_reduce(sums)
            for (s, _, lr, n_tok), total in zip(pending, sums.cpu().tolist()):
                window.append(total / max(n_tok, 1))
                if s in row_steps:
                    if rank == 0:
                        rows.append({**ident, "step": s, "train_loss": fmt(sum(window) / len(window)),
                                     "eval_loss": fmt(eval_loss) if s == eval_step else "",
                                     "learning_rate": fmt(lr)})
                    window.clear()
            pending = []
            if rank == 0:
                _write_rows(loss_path, rows)

        t_loop = time.perf_counter()
        for step in range(start + 1, max_steps + 1):
            g = global_indices(step, B)
            blocks = order(g)
            keys = [[cfg.seed, 0, step, int(x)] for x in g]
            inp, lab = make_batch(corpus.train[blocks], cfg.objective, keys, h, special, V)
            n_tokens = int(((lab[:, 1:] if cfg.objective == "decoder" else lab) != -100).sum())
            lr = lr_at(h, step)
            for group in opt.param_groups:
                group["lr"] = lr
            lo = rank * per_rank
            step_sum = torch.zeros((), device=dev)
            for a in range(A):
                s0 = lo + a * micro
                xb = inp[s0:s0 + micro]
                pad = special["pad"] if bool((xb == special["pad"]).any()) else None  # decided on the host
                x = torch.from_numpy(xb).to(dev, non_blocking=True)
                y = torch.from_numpy(lab[s0:s0 + micro]).to(dev, non_blocking=True)
                sync = fwd.no_sync() if world > 1 and a < A - 1 else contextlib.nullcontext()
                with sync:
                    with autocast():
                        s = fwd(x, y, pad)
                        loss = s * (world / max(n_tokens, 1))
                        if lam > 0 and a == A - 1:
                            loss = loss + lam * symmetry_penalty(model)
                    if scaler is not None:
                        scaler.scale(loss).backward()
                    else:
                        loss.backward()
                step_sum += s.detach().float()
            if scaler is not None:
                scaler.unscale_(opt)
            if h.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip, foreach=True)
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            pending.append((step, step_sum, lr, n_tokens))
            if bar is not None:
                bar.update(1)

            is_eval = step in evals
            is_snap = step in snaps
            is_state = is_snap or (state_every and step % state_every == 0) or step == max_steps
            if is_eval or is_snap or is_state or len(pending) >= 100:
                e = eval_now(step) if is_eval else None
                flush(step, e)
                if rank == 0 and is_snap:
                    _save_snapshot(model, out, step, resolved)
                if rank == 0 and is_state:
                    _save_state(model, opt, scaler, out, step, resolved)
                    log.info("step %d: state written%s", step, " and snapshot" if is_snap else "")
                if dist is not None and (is_snap or is_state):
                    dist.barrier()
        if bar is not None:
            bar.close()
        n_steps = max_steps - start
        seconds = time.perf_counter() - t_start
        per_step = (time.perf_counter() - t_loop) / max(n_steps, 1)
        if rank == 0:
            log.info("run %s done: %d steps in %.1f s (%.4f s/step in the loop)", resolved["run"], n_steps,
                     seconds, per_step)
        return {"run": resolved["run"], "step": max_steps, "status": "resumed" if start else "trained",
                "seconds": seconds, "s_per_step": per_step}
    finally:
        if handler is not None:
            log.removeHandler(handler)
            handler.close()
