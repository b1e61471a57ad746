"""The training loop: a lean plain-PyTorch loop (nanoGPT-style), DDP under torchrun, bitwise resume.

Each process takes its contiguous slice of the global batch (training/batches.py says which examples and
masks an update sees), then splits it into `grad_accum` micro-batches. The loss of an update is the token
mean over the whole global batch (each process divides its token-summed loss by the global token count,
which every process knows without communication). What is written where: training/snapshots.py.

A run with `batch_path: device` (GPU runs) takes each update from training/device_path.py instead of `_update`
(batches and masks made on the device, the micro-batches in a few passes); everything else is this loop's.

An image classifier (objective `classifier`, training/vit.py) goes through the same loop: example g of update t
is train image perm_e[g mod n] (the same Order), the loss of an update is the mean cross-entropy over the
global batch's images, and the held-out rows also carry the accuracy (loss.csv's `eval_accuracy` column).

Why over 600 lines: the steps of a run (build, update, evaluate, checkpoint, stop, resume) all read and write one
private `_Run`; bitwise resume depends on their order (what is saved, restored and drawn from the generators
when), which is checked here in one file rather than across modules that would share that private state.
What can stand alone already does: batches, snapshots, hyper-parameters, models, budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import IMAGE_LOSS_COLUMNS, LOSS_COLUMNS
from attention_geometry.formats.corpus import Corpus, ImageSet
from attention_geometry.formats.files import mem_available_bytes, pid_lock
from attention_geometry.formats.rundir import (
    CHECKPOINTS,
    PROVENANCE_CSV,
    TRAIN_LOG,
    check_run_out,
    find_state,
    is_complete_snapshot,
    lock_path,
    missing_provenance,
    snapshot_dir,
    state_step,
    warn_stderr,
)
from attention_geometry.training.batches import (
    Order,
    dropout_seed,
    eval_keys,
    global_indices,
    lr_at,
    make_batch,
    mask_keys,
    n_loss_tokens,
)
from attention_geometry.training.budget import Budget, TermSignal
from attention_geometry.training.hyper import Hyper, uses_dropout
from attention_geometry.training.launch import cpu_batch_bytes
from attention_geometry.training.models import build_model, hidden_states, lm_loss, symmetry_penalty
from attention_geometry.training.run_config import (
    ResolvedRun,
    RunConfig,
    RunRuntime,
    is_image_run,
    read_run_data,
    resolve_run,
)
from attention_geometry.training.runtime import (
    _autocast,
    _dist_env,
    _pick_device,
    _precision,
    keep_large_allocations_on_heap,
    precision_warning,
)
from attention_geometry.training.snapshots import (
    adopt_state,
    check_loss_rows,
    load_state,
    read_loss_rows,
    read_loss_window,
    record_provenance,
    remove_leftovers,
    save_snapshot,
    save_state,
    set_aside,
    write_loss_rows,
    write_run_yaml,
)
from attention_geometry.training.vit import build_vit, classification_loss, evaluate_images, pixel_batch, qk_layers

__all__ = [
    "train",
    "evaluate",
    "trainer_decay_names",
]

log = logging.getLogger("attention_geometry.training")


class _LossModule(nn.Module):
    """The model's token-summed training loss as a module, so DDP (and torch.compile) wrap one forward."""

    def __init__(self, model, objective: str, compile_: bool):
        super().__init__()
        self.model, self.objective = model, objective
        # only the transformer stack is compiled (static shapes); the masked-position gather, output layer
        # and loss have data-dependent shapes and stay eager
        self.hidden_fn = torch.compile(hidden_states) if compile_ else None

    def forward(self, inputs, labels, pad_id: int | None, key_padding=None):
        return lm_loss(
            self.model, inputs, labels, self.objective, pad_id=pad_id, hidden_fn=self.hidden_fn, key_padding=key_padding
        )


class _ClassifierLoss(nn.Module):
    """An image classifier's summed cross-entropy as a module (what DDP wraps for objective classifier)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, labels, pad_id: int | None = None):
        return classification_loss(self.model, inputs, labels)


def trainer_decay_names(model) -> set[str]:
    """The parameter names transformers' Trainer decays (its get_decay_parameter_names): those not inside a
    LayerNorm and whose name matches none of its patterns (bias, layernorm, rmsnorm, norm as a name part)."""
    import re

    patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
    inside_norm = {
        f"{m_name}.{p_name}" if m_name else p_name
        for m_name, m in model.named_modules()
        if isinstance(m, nn.LayerNorm)
        for p_name, _ in m.named_parameters(recurse=False)
    }
    return {
        n
        for n, _ in model.named_parameters()
        if n not in inside_norm and not any(re.search(pat, n.lower()) for pat in patterns)
    }


def _optimizer(model, h: Hyper, device: torch.device):
    decay, no_decay = [], []
    if h.weight_decay_params == "trainer":
        names = trainer_decay_names(model)
        for n, p in model.named_parameters():  # named_parameters() yields a tied weight once
            if p.requires_grad:
                (decay if n in names else no_decay).append(p)
    else:
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
def evaluate(
    model,
    corpus_heldout: np.ndarray,
    n_blocks: int,
    objective: str,
    h: Hyper,
    special: dict,
    vocab_size: int,
    device,
    autocast,
    micro: int,
) -> float:
    """Token-mean loss on the first n_blocks held-out blocks (masks fixed by block index, seed-free)."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for a in range(0, n_blocks, micro):
        idx = np.arange(a, min(a + micro, n_blocks))
        blocks = np.asarray(corpus_heldout[idx])
        inp, lab = make_batch(blocks, objective, eval_keys(idx), h, special, vocab_size)
        inp_t = torch.from_numpy(inp).to(device)
        lab_t = torch.from_numpy(lab).to(device)
        real = blocks != special["pad"]
        kp = torch.from_numpy(real).to(device) if h.recipe == "authors" and not bool(real.all()) else None
        with autocast():
            s = lm_loss(model, inp_t, lab_t, objective, pad_id=special["pad"], key_padding=kp)
        total += float(s)
        count += n_loss_tokens(lab, objective)
    model.train(was)
    return total / count if count else math.nan  # no labelled held-out position: undefined, never 0


def _setup_logging(out: Path, rank: int) -> logging.Handler | None:
    if rank != 0:
        return None
    handler = logging.FileHandler(out / TRAIN_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


# ------------------------------------------------------------------------------------------- one run


@dataclass
class _Run:
    """Everything the loop of one process works with."""

    cfg: RunConfig
    corpus: Corpus | ImageSet  # an ImageSet for an image classifier (`image`)
    resolved: ResolvedRun
    out: Path
    dev: torch.device
    world: int
    rank: int
    dist: Any
    model: Any = None
    opt: Any = None
    scaler: Any = None
    autocast: Callable[[], Any] = contextlib.nullcontext
    fwd: Any = None
    qk_pairs: Any = None  # the ViT's (query, key) layers for the regularizer; None: the BERT model's
    # the device path's update (`batch_path: device`, training/device_path.py); None: the host path's _update
    device_update: Any = None
    budget: Budget = field(default_factory=Budget)  # the wall-clock limit (training/budget.py)

    @property
    def image(self) -> bool:
        return is_image_run(self.cfg.objective)

    @property
    def h(self) -> Hyper:
        return self.resolved.hyper

    @property
    def special(self) -> dict[str, int]:
        return self.corpus.special_tokens

    @property
    def micro(self) -> int:
        return self.h.batch_size // self.world // self.h.grad_accum

    def barrier(self) -> None:
        if self.dist is not None:
            self.dist.barrier()


def _build(run: _Run, state_dir: Path | None) -> str:
    """Build model, optimizer and grad scaler (from the run's seed), restored from `state_dir` when
    resuming; returns the precision."""
    cfg, h, dev = run.cfg, run.h, run.dev
    if run.image:
        d = run.corpus
        run.model = build_vit(
            cfg.size,
            cfg.init,
            cfg.seed,
            image_size=d.image_size,
            num_channels=d.num_channels,
            class_names=d.class_names,
            _hyper=h,
        )
    else:
        run.model = build_model(cfg.size, cfg.objective, cfg.init, cfg.seed, special_tokens=run.special, _hyper=h)
    run.model.to(dev)
    run.model.train()
    run.opt = _optimizer(run.model, h, dev)
    prec = _precision(h, dev)
    if run.rank == 0 and (slow := precision_warning(prec, dev)):
        warn_stderr(slow)
        log.warning("%s", slow)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
    run.scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None
    run.autocast = functools.partial(_autocast, dev, amp_dtype)
    if state_dir is not None:
        load_state(state_dir, run.model, run.opt, run.scaler, dev)
    if run.image:
        run.fwd = _ClassifierLoss(run.model)
        run.qk_pairs = qk_layers(run.model)
    else:
        run.fwd = _LossModule(run.model, cfg.objective, h.compile)
    if h.batch_path == "device":  # its own passes and loss module (DDP-wrapped there)
        from attention_geometry.training.device_path import DeviceUpdate

        run.device_update = DeviceUpdate(run)
    elif run.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        run.fwd = DDP(run.fwd, device_ids=[dev.index] if dev.type == "cuda" else None)
    return prec


def _fmt(x) -> str:
    return "" if x is None else repr(float(x))


def _fmt_eval(ev: dict[str, float]) -> dict[str, str]:
    """The held-out columns of a loss.csv row (eval_loss; an image classifier's eval_accuracy too)."""
    return {k: _fmt(v) for k, v in ev.items()}


class _LossLog:
    """loss.csv: the per-update losses of this process pending until a flush, turned into one row at every
    row step (the mean train loss of the updates since the previous row), one all-reduce per flush."""

    def __init__(self, run: _Run, rows: list[dict], row_steps: set[int], window: list[float] | None = None):
        self.run, self.rows, self.row_steps = run, rows, row_steps
        self.ident = run.resolved.labels()
        self.columns = IMAGE_LOSS_COLUMNS if run.image else LOSS_COLUMNS
        self.blank = {c: "" for c in self.columns if c.startswith("eval_")}  # a row without evaluation
        self.pending: list[tuple] = []  # (step, token-summed loss of this process, lr, global token count)
        # per-update mean losses since the last row (a state saved inside a window carries it: save_state)
        self.window: list[float] = list(window or [])

    def write(self) -> None:
        if self.run.rank == 0:
            write_loss_rows(self.run.out, self.rows, self.columns)

    def add_eval0(self, ev: dict[str, float]) -> None:
        self.rows.append({**self.ident, "step": 0, "train_loss": "", **_fmt_eval(ev), "learning_rate": _fmt(0.0)})
        self.write()

    def flush(self, eval_step: int, ev: dict[str, float] | None) -> None:
        if not self.pending:
            return
        sums = torch.stack([p[1] for p in self.pending]).double()
        if self.run.dist is not None:
            self.run.dist.all_reduce(sums)
        counts = [p[3] for p in self.pending]
        if isinstance(counts[0], torch.Tensor):  # the device path counts the labelled positions on the device
            counts = [int(n) for n in torch.stack(counts).cpu().tolist()]
        for (s, _, lr, _), n_tok, total in zip(self.pending, counts, sums.cpu().tolist()):
            mean = total / n_tok if n_tok else math.nan  # no labelled token: the loss is undefined, never 0
            if not math.isfinite(mean):
                self.pending = []
                self.write()
                why = "no position of its batch has a label" if not n_tok else f"the loss is {mean} (diverged)"
                raise UserError(
                    f"step {s}: the training loss is not finite: {why}; the run stops here (its newest saved state "
                    "is kept; nothing after it is written). Check the run's settings (lr, precision, "
                    "mlm_probability)"
                )
            self.window.append(mean)
            if s in self.row_steps:
                if self.run.rank == 0:
                    self.rows.append(
                        {
                            **self.ident,
                            "step": s,
                            "train_loss": _fmt(sum(self.window) / len(self.window)),
                            **(_fmt_eval(ev) if s == eval_step and ev is not None else self.blank),
                            "learning_rate": _fmt(lr),
                        }
                    )
                self.window.clear()
        self.pending = []
        self.write()


def _eval_at(run: _Run, step: int) -> dict[str, float] | None:
    """The held-out columns at `step` on process 0 when `step` is an eval step ({"eval_loss"}, for an image
    classifier also "eval_accuracy"), else None."""
    n_eval = run.resolved.eval_blocks
    if run.rank != 0 or n_eval == 0 or step not in run.resolved.eval_steps:
        return None
    if run.image:
        d = run.corpus
        loss, acc = evaluate_images(
            run.model, d.heldout, d.heldout_labels, n_eval, d.mean, d.std, run.dev, run.autocast, max(run.micro, 1)
        )
        log.info("step %d eval_loss %.6f eval_accuracy %.4f", step, loss, acc)
        return {"eval_loss": loss, "eval_accuracy": acc}
    e = evaluate(
        run.model,
        run.corpus.heldout,
        n_eval,
        run.cfg.objective,
        run.h,
        run.special,
        run.h.vocab_size,
        run.dev,
        run.autocast,
        max(run.micro, 1),
    )
    log.info("step %d eval_loss %.6f", step, e)
    return {"eval_loss": e}


def update_of(run: _Run) -> Callable:
    """The update function of the run's batch path: _update (host) or its DeviceUpdate (training/device_path.py),
    both called as f(run, order, step, lam)."""
    return run.device_update if run.device_update is not None else _update


def _update(run: _Run, order: Order, step: int, lam: float) -> tuple[torch.Tensor, float, int]:
    """One optimizer update: (token-summed loss of this process, learning rate, global loss-token count)."""
    cfg, h = run.cfg, run.h
    g = global_indices(step, h.batch_size)
    if run.image:  # the global batch's images, normalized, and their classes; the loss is a mean over images
        special = None
        idx = order(g)
        inp = pixel_batch(run.corpus.train[idx], run.corpus.mean, run.corpus.std).numpy()
        lab = np.asarray(run.corpus.train_labels[idx], dtype=np.int64)
        n_tokens = len(g)
        real = None
    else:
        special = run.special
        blocks = run.corpus.train[order(g)]
        inp, lab = make_batch(blocks, cfg.objective, mask_keys(cfg.seed, step, g), h, special, h.vocab_size)
        n_tokens = n_loss_tokens(lab, cfg.objective)
        # the authors' attention mask is the tokenizer's (where it padded), not where the corruption put [PAD]
        real = np.asarray(blocks) != special["pad"] if h.recipe == "authors" else None
    lr = lr_at(h, step)
    for group in run.opt.param_groups:
        group["lr"] = lr
    if uses_dropout(h):  # dropout keyed by (seed, step, process), as the masks are: reproducible, resumable
        torch.manual_seed(dropout_seed(cfg.seed, step, run.rank))
    step_sum = accumulate(run, inp, lab, n_tokens, special, lam, real)
    _optimizer_step(run)
    return step_sum, lr, n_tokens


def accumulate(run: _Run, inp, lab, n_tokens: int, special, lam: float = 0.0, real=None) -> torch.Tensor:
    """Forward and backward of this process's micro-batches of one update's global batch (inputs, labels);
    returns this process's token-summed loss. The gradient is that of the token mean over the global batch
    (loss_mean `tokens`: each micro-batch's sum over the global count `n_tokens`), or of the mean over
    micro-batches and processes of each micro-batch's token mean (`micro_batches`). `real`: where keys are
    real tokens (the authors' recipe: the uncorrupted ids' padding), else keys equal to [PAD] are masked."""
    h, dev, world = run.h, run.dev, run.world
    objective = run.cfg.objective
    micro, A = run.micro, h.grad_accum
    lo = run.rank * (h.batch_size // world)
    step_sum = torch.zeros((), device=dev)
    for a in range(A):
        s0 = lo + a * micro
        xb = inp[s0 : s0 + micro]
        yb = lab[s0 : s0 + micro]
        pad = special["pad"] if special and bool((xb == special["pad"]).any()) else None  # decided on the host
        kp = None
        if real is not None:
            rb = real[s0 : s0 + micro]
            pad = None
            kp = None if bool(rb.all()) else torch.from_numpy(np.ascontiguousarray(rb)).to(dev, non_blocking=True)
        x = torch.from_numpy(xb).to(dev, non_blocking=True)
        y = torch.from_numpy(yb).to(dev, non_blocking=True)
        if h.loss_mean == "micro_batches" and not run.image:  # each micro-batch's token mean, averaged
            scale = 1.0 / (A * max(n_loss_tokens(yb, objective), 1))
        else:
            scale = world / max(n_tokens, 1)
        sync = run.fwd.no_sync() if world > 1 and a < A - 1 else contextlib.nullcontext()
        with sync:
            with run.autocast():
                s = run.fwd(x, y, pad) if kp is None else run.fwd(x, y, pad, kp)
                loss = s * scale
                if lam > 0 and a == A - 1:
                    loss = loss + lam * symmetry_penalty(run.model, run.qk_pairs)
            if run.scaler is not None:
                run.scaler.scale(loss).backward()
            else:
                loss.backward()
        step_sum += s.detach().float()
    return step_sum


def _optimizer_step(run: _Run) -> None:
    if run.scaler is not None:
        run.scaler.unscale_(run.opt)
    if run.h.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.h.grad_clip, foreach=True)
    if run.scaler is not None:
        run.scaler.step(run.opt)
        run.scaler.update()
    else:
        run.opt.step()
    run.opt.zero_grad(set_to_none=True)


def _checkpoint(run: _Run, step: int, is_snap: bool, is_state: bool, held_out: dict | None = None) -> None:
    """The snapshot and / or the resumable state of `step` (process 0 writes, every process waits); `held_out`:
    the step's held-out columns, for the snapshot's model card."""
    if run.rank == 0 and is_snap:
        save_snapshot(run.model, run.out, step, run.resolved, _fmt_eval(held_out) if held_out else None)
    if is_state:
        _save_state(run, step, " and snapshot" if is_snap else "")
    elif is_snap:
        run.barrier()


def _save_state(run: _Run, step: int, note: str = "", window: list[float] | None = None) -> None:
    """The resumable state of `step` (process 0 writes, every process waits), with the loss window since the
    last row (`window`, for a state saved between rows); its duration goes to the run's budget."""
    t0 = run.budget.clock()
    if run.rank == 0:
        save_state(run.model, run.opt, run.scaler, run.out, step, run.resolved, loss_window=window)
        log.info("step %d: state written%s", step, note)
    run.barrier()
    run.budget.saved(run.budget.clock() - t0)


class _Stop:
    """Whether the loop stops before its next update: SIGTERM received or the time budget spent (Budget), by
    any process (under DDP one all-reduce per update over a CPU group, so all stop after the same step)."""

    NO, TIME, SIGNAL = 0, 1, 2

    def __init__(self, run: _Run, term: TermSignal):
        self.run, self.budget, self.term = run, run.budget, term
        self.group = None
        if run.dist is not None and run.dist.get_backend() != "gloo":  # nccl: a CPU flag needs a gloo group
            self.group = run.dist.new_group(backend="gloo")

    def why(self) -> int:
        local = self.SIGNAL if self.term.received else self.TIME if self.budget.exhausted() else self.NO
        if self.run.dist is None:
            return local
        flag = torch.tensor([local], dtype=torch.int32)
        self.run.dist.all_reduce(flag, op=self.run.dist.ReduceOp.MAX, group=self.group)
        return int(flag.item())


# ---------------------------------------------------------------------------------------------- train


def train(
    cfg: RunConfig,
    out: str | Path,
    threads: int | None = None,
    device: str | None = None,
    progress: bool = True,
    budget: Budget | None = None,
) -> dict:
    """Train (or resume, or do nothing for a finished) run `cfg` into run dir `out`. Returns a summary
    {run, step, status: trained|resumed|finished|stopped, seconds, s_per_step}. Every input is validated
    before anything is written. `budget`: a wall-clock limit (training/budget.py; None: none); when it is
    spent, or on SIGTERM, the run stops between two updates with its state saved (status `stopped`, `step`
    the state's step; the same call again resumes from it)."""
    corpus = read_run_data(cfg.corpus, cfg.objective)
    resolved = resolve_run(cfg, corpus)
    h = resolved.hyper
    threads = threads if threads is not None else cfg.threads
    device_name = device if device is not None else cfg.device
    world, rank, local_rank = _dist_env()
    if h.batch_size % (world * h.grad_accum):
        raise UserError(
            f"overrides.batch_size: {h.batch_size} is not divisible by processes x grad_accum "
            f"({world} x {h.grad_accum})"
        )
    if h.per_device_batch_size is not None and h.batch_size != h.per_device_batch_size * h.grad_accum * world:
        raise UserError(
            f"overrides.per_device_batch_size: {h.per_device_batch_size} per process x grad_accum {h.grad_accum} x "
            f"{world} process(es) is not batch_size {h.batch_size}: set batch_size to "
            f"{h.per_device_batch_size * h.grad_accum * world} or start "
            f"{h.batch_size // (h.per_device_batch_size * h.grad_accum)} process(es) (training.gpus)"
        )
    dev = _pick_device(device_name, local_rank)
    if h.batch_path == "device":  # what the device path refuses on this device, before anything is written
        from attention_geometry.training.device_path import check_device_run

        check_device_run(h, dev, world)
    if dev.type == "cpu" and not is_image_run(cfg.objective):
        _check_cpu_memory(h, h.batch_size // (world * h.grad_accum))
    keep_large_allocations_on_heap()
    if threads:
        torch.set_num_threads(threads)
    out = check_run_out(out) if rank == 0 else Path(out)
    if rank == 0:
        _check_disk(resolved, out)
    resolved = dataclasses.replace(
        resolved, runtime=RunRuntime(threads=threads, device=str(dev.type), world_size=world)
    )

    dist = None
    if world > 1:
        import torch.distributed as dist

        if not dist.is_initialized():
            dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")

    try:  # one writer per run dir: process 0 holds {out}.lock (the other processes are its DDP peers)
        lock = pid_lock(lock_path(out), f"run {out}", warn=warn_stderr) if rank == 0 else contextlib.nullcontext()
        with lock:
            run = _Run(cfg, corpus, resolved, out, dev, world, rank, dist, budget=budget or Budget())
            with TermSignal() as term:
                return _train(run, progress, term)
    finally:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()


def _check_cpu_memory(h: Hyper, micro: int) -> None:
    """One UserError, before anything is written, when one micro-batch cannot fit in the memory available (a batch
    of 100,000 sequences used to be killed by the kernel halfway into writing its run folder)."""
    need, avail = cpu_batch_bytes(h, micro), mem_available_bytes()
    if avail is not None and need > avail:
        raise UserError(
            f"overrides.batch_size: one micro-batch of {micro} sequences x {h.seq_len} tokens needs about "
            f"{need / 2**30:.1f} GiB here, {avail / 2**30:.1f} GiB are available: lower batch_size or raise grad_accum"
        )


def _check_disk(resolved, out: Path) -> None:
    """One UserError, before anything is written, when the snapshots and states a run still plans cannot fit on the
    disk that holds OUT (issue 59.8: max_steps 9999999 with snapshot_every 1 passed every check and filled the disk,
    a 104 MB run.yaml copied into every snapshot)."""
    import shutil

    from attention_geometry.formats.rundir import snapshot_name
    from attention_geometry.training.launch import run_disk_bytes

    steps = resolved.snapshot_steps
    folder = out / "checkpoints"
    have = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    todo = len(steps) if not have else sum(1 for s in steps if snapshot_name(s) not in have)
    settings = resolved.settings  # run.yaml's size, about: its step lists as numbers of 8 characters
    run_yaml = 2_000 + 8 * sum(len(v) for v in settings.values() if isinstance(v, (list, tuple)))
    vocab = int(resolved.hyper.vocab_size or 0) if not is_image_run(resolved.objective) else 0
    need = run_disk_bytes(resolved.hyper, vocab, todo, run_yaml)
    where = out if out.exists() else next(p for p in out.absolute().parents if p.exists())
    free = shutil.disk_usage(where).free
    if need > free:
        raise UserError(
            f"{out}: the run plans {todo:,} more snapshot(s) (snapshot_steps / snapshot_every) of about "
            f"{need / max(todo, 1) / 2**20:,.1f} MiB each with its state: about {need / 2**30:,.1f} GiB, more than "
            f"the {free / 2**30:,.1f} GiB free there; snapshot less often, or free space"
        )


def _warn(message: str) -> None:
    """A warning of process 0: a `warning:` line on stderr and in train.log."""
    log.warning(message)
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _resume_state(run: _Run) -> Path | None:
    """The state to resume from (None: step 0). Process 0 removes what an interrupted run left, picks the
    newest intact state (rundir.find_state: else the previous one, with a warning) and makes it state/ again
    (snapshots.adopt_state); the other processes then take state/."""
    state = None
    if run.rank == 0:
        for p in remove_leftovers(run.out):
            log.info("removed %s (left by an interrupted run)", p)
        chosen = find_state(run.out, warn=_warn)
        state = adopt_state(run.out, chosen) if chosen is not None else None
    run.barrier()
    return state if run.rank == 0 else find_state(run.out, warn=lambda _m: None)


def _stopped(run: _Run, losses: _LossLog, step: int, saved: int, why: int, t_start: float) -> dict:
    """Stop after update `step` (time limit or SIGTERM): its state is saved as a periodic one is (with the loss
    window since the last row) unless it is on disk already, and the summary says `stopped`."""
    if step > saved:
        losses.flush(step, None)
        _save_state(run, step, window=losses.window)
    reason = "on SIGTERM" if why == _Stop.SIGNAL else f"for the {run.budget.describe()}"
    if run.rank == 0:
        log.warning(
            "run %s: stopped %s at step %d, %s: running the same command resumes from step %d",
            run.resolved.run,
            reason,
            step,
            "its state saved" if step > 0 else "before its first update",
            step,
        )
    return {
        "run": run.resolved.run,
        "step": step,
        "status": "stopped",
        "reason": reason,
        "seconds": time.perf_counter() - t_start,
        "s_per_step": None,
    }


def _rebuild_final_snapshot(run: _Run, state_dir: Path, step: int) -> bool:
    """A finished run whose final snapshot is gone: the training state holds the same weights, so the snapshot
    is written again from it (True). A missing earlier snapshot cannot be rebuilt: one UserError saying so."""
    missing = [
        s for s in run.resolved.snapshot_steps if s <= step and not is_complete_snapshot(snapshot_dir(run.out, s))
    ]
    if not missing:
        return False
    if missing != [step]:
        raise UserError(
            f"{run.out / CHECKPOINTS}: no snapshot of step(s) {', '.join(map(str, missing))}; only the final step's "
            f"can be rewritten (from the training state at step {step}): move the run aside and train it again"
        )
    _build(run, state_dir)
    # the card's held-out columns as loss.csv has them (the same card as the lost snapshot's)
    row = next((r for r in read_loss_rows(run.out) if int(r["step"]) == step), {})
    held_out = {k: v for k, v in row.items() if k.startswith("eval_") and v}
    save_snapshot(run.model, run.out, step, run.resolved, held_out or None)
    return True


def _write_run_yaml(run: _Run) -> str | None:
    """Process 0 writes run.yaml (or compares it with the run dir's); returns what changed, for the log."""
    resolved, out = run.resolved, run.out
    out.mkdir(parents=True, exist_ok=True)
    action, keys = write_run_yaml(out, resolved)
    if action == "restart":  # other settings: the old run is kept beside, the new one starts afresh
        aside = set_aside(out)
        out.mkdir(parents=True)
        write_run_yaml(out, resolved)
        return f"settings changed ({', '.join(keys)}): the previous run is kept at {aside}; starting afresh"
    if action == "extend":
        return f"max_steps raised to {resolved.max_steps} under a constant schedule: continuing from the newest state"
    if action == "moved":
        return f"corpus moved ({keys[0]}), the same content (corpus_sha256): continuing"
    return None


def _train(run: _Run, progress: bool, term: TermSignal) -> dict:
    t_start = time.perf_counter()
    resolved, out = run.resolved, run.out
    name, max_steps = resolved.run, resolved.max_steps
    change = _write_run_yaml(run) if run.rank == 0 else None
    run.barrier()
    handler = _setup_logging(out, run.rank)
    if change:
        log.warning("run %s: %s", name, change)
    try:
        state_dir = _resume_state(run)
        start = state_step(state_dir) if state_dir is not None else 0
        if start >= max_steps:
            if run.rank == 0 and _rebuild_final_snapshot(run, state_dir, start):
                log.warning(
                    "run %s: the snapshot of step %d was missing: rewritten from the training state", name, start
                )
            elif run.rank == 0:
                log.info("run %s already finished at step %d: nothing to do", name, start)
            if run.rank == 0 and not (out / PROVENANCE_CSV).exists():  # into train.log (the CLI says it too)
                log.warning("%s", missing_provenance(out, name))
            return {"run": name, "step": start, "status": "finished", "seconds": 0.0, "s_per_step": None}

        snaps, evals = set(resolved.snapshot_steps), set(resolved.eval_steps)
        state_every = resolved.state_every

        def row_step(s: int) -> bool:
            return (
                s % resolved.log_every == 0
                or s in evals
                or s in snaps
                or s == max_steps
                or bool(state_every and s % state_every == 0)
            )

        row_steps = {s for s in range(start + 1, max_steps + 1) if row_step(s)}
        kept = (
            [r for r in read_loss_rows(out, required=True) if int(r["step"]) <= start] if state_dir is not None else []
        )
        if state_dir is not None and run.rank == 0:  # the rows up to the state's step are not recomputed
            check_loss_rows(
                out,
                kept,
                {s for s in range(1, start + 1) if row_step(s)} | ({0} if resolved.eval_blocks > 0 else set()),
            )
        prec = _build(run, state_dir)
        # a resumed run drops the rows after its state's step, and takes up the window of updates since its
        # last row where the state was saved inside one (a run stopped early)
        losses = _LossLog(run, kept, row_steps, read_loss_window(state_dir) if state_dir is not None else None)
        losses.write()
        if run.rank == 0:
            record_provenance(out, name, start, max_steps)
            if state_dir is not None:
                log.info("resuming run %s from %s at step %d", name, state_dir, start)
            else:
                log.info(
                    "starting run %s (%d steps, %s, %d process(es), %s)", name, max_steps, run.dev.type, run.world, prec
                )
        if start == 0:
            e0 = _eval_at(run, 0)
            if run.rank == 0 and 0 in snaps:
                save_snapshot(run.model, out, 0, resolved, _fmt_eval(e0) if e0 else None)
            if run.rank == 0 and e0 is not None:
                losses.add_eval0(e0)

        n_blocks = int(run.corpus.train.shape[0])
        if run.rank == 0 and start == 0 and run.h.batch_size > n_blocks:
            _warn(
                f"batch_size {run.h.batch_size} is larger than the {n_blocks} training blocks of the corpus: "
                "every batch repeats blocks (lower batch_size, or use a larger corpus)"
            )
        order = Order(n_blocks, run.cfg.seed)
        update = update_of(run)
        lam = resolved.regularizer["lambda"]
        bar = None
        if run.rank == 0 and progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=max_steps, initial=start, desc=name, unit="step", dynamic_ncols=True)
        t_loop = time.perf_counter()
        budget = run.budget
        stop, saved = _Stop(run, term), start  # saved: the step of the newest state on disk
        for step in range(start + 1, max_steps + 1):
            why = stop.why()
            if why != _Stop.NO:
                if bar is not None:
                    bar.close()
                return _stopped(run, losses, step - 1, saved, why, t_start)
            budget.start_step()
            step_sum, lr, n_tokens = update(run, order, step, lam)
            losses.pending.append((step, step_sum, lr, n_tokens))
            if bar is not None:
                bar.update(1)
            is_eval, is_snap = step in evals, step in snaps
            is_state = is_snap or (state_every and step % state_every == 0) or step == max_steps
            if is_eval or is_snap or is_state or len(losses.pending) >= 100:
                held_out = _eval_at(run, step) if is_eval else None
                losses.flush(step, held_out)
                _checkpoint(run, step, is_snap, is_state, held_out)
            if is_state:
                saved = step
            budget.end_step()
        if bar is not None:
            bar.close()
        n_steps = max_steps - start
        seconds = time.perf_counter() - t_start
        per_step = (time.perf_counter() - t_loop) / max(n_steps, 1)
        if run.rank == 0:
            log.info("run %s done: %d steps in %.1f s (%.4f s/step in the loop)", name, n_steps, seconds, per_step)
        return {
            "run": name,
            "step": max_steps,
            "status": "resumed" if start else "trained",
            "seconds": seconds,
            "s_per_step": per_step,
        }
    finally:
        if handler is not None:
            log.removeHandler(handler)
            handler.close()
