"""The thin driver of a run: `Trainer` (and `train()`, which runs one) handles what surrounds the updates:
validation before anything is written, the run folder and its lock, resume (bitwise: what is saved, restored and
drawn from the generators when), stop signals and the time budget, train.log, evaluation, loss.csv and snapshots.
The update itself is training/step.Step's, fed by the host source (step.HostBatches, the CPU default) or the device
source (device_path.DeviceBatches); DDP under torchrun. What is written where: training/snapshots.py.

Each process takes its contiguous slice of the global batch (training/batches.py: which examples and masks an
update sees). An image classifier (`classifier`, training/vit.py) goes through the same driver and Order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attention_geometry.errors import UserError
from attention_geometry.formats.files import pid_lock
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
from attention_geometry.training.batches import Order
from attention_geometry.training.budget import Budget, StopVote, TermSignal
from attention_geometry.training.cost import Throughput, peak_flops, sequence_positions, update_flops
from attention_geometry.training.evaluate import held_out_at
from attention_geometry.training.hyper import Hyper
from attention_geometry.training.launch import check_cpu_memory, check_disk
from attention_geometry.training.losslog import LossLog, fmt_held_out
from attention_geometry.training.models import build_model
from attention_geometry.training.run_config import (
    RunConfig,
    RunRuntime,
    is_image_run,
    read_run_data,
    resolve_run,
)
from attention_geometry.training.run_provenance import record_provenance, record_speed
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
    open_run_yaml,
    read_loss_rows,
    read_loss_window,
    remove_leftovers,
    save_snapshot,
    save_state,
)
from attention_geometry.training.step import ClassifierLoss, HostBatches, LossModule, Step, build_optimizer
from attention_geometry.training.vit import build_vit, qk_layers

__all__ = ["Trainer", "train"]

log = logging.getLogger("attention_geometry.training")


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
    return Trainer(cfg, out, threads=threads, device=device, budget=budget).train(progress)


class Trainer:
    """One run on this process. `Trainer(cfg, out, threads=None, device=None, budget=None)` reads the run's corpus,
    resolves its settings and checks them, the device, the memory and the disk, before anything is written;
    `train(progress)` runs it (or resumes it); `build(state_dir=None)` builds the model, optimizer, loss scaler and
    the one update (`step`), from the run's seed or a saved state, and `update(order, s)` runs update s alone
    (what the benchmarks time)."""

    def __init__(
        self,
        cfg: RunConfig,
        out: str | Path,
        threads: int | None = None,
        device: str | None = None,
        budget: Budget | None = None,
    ):
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
                f"overrides.per_device_batch_size: {h.per_device_batch_size} per process x grad_accum {h.grad_accum} "
                f"x {world} process(es) is not batch_size {h.batch_size}: set batch_size to "
                f"{h.per_device_batch_size * h.grad_accum * world} or start "
                f"{h.batch_size // (h.per_device_batch_size * h.grad_accum)} process(es) (training.gpus)"
            )
        dev = _pick_device(device_name, local_rank)
        if h.batch_path == "device":  # what the device source refuses on this device, before anything is written
            from attention_geometry.training.device_path import check_device_run

            check_device_run(h, dev, world)
        if dev.type == "cpu" and not is_image_run(cfg.objective):
            check_cpu_memory(h, h.batch_size // (world * h.grad_accum))
        keep_large_allocations_on_heap()
        if threads:
            torch.set_num_threads(threads)
        out = check_run_out(out) if rank == 0 else Path(out)
        if rank == 0:
            check_disk(resolved, out)
        self.cfg, self.corpus, self.out, self.dev, self.world, self.rank = cfg, corpus, out, dev, world, rank
        self.resolved = dataclasses.replace(
            resolved, runtime=RunRuntime(threads=threads, device=str(dev.type), world_size=world)
        )
        self.budget = budget or Budget()
        self.dist: Any = None
        self.model: Any = None
        self.opt: Any = None
        self.scaler: Any = None
        self.step: Step | None = None
        self.autocast: Callable[[], Any] = contextlib.nullcontext  # evaluation's (the update has its own)
        self.qk_pairs: Any = None  # the ViT's (query, key) layers for the regularizer; None: the BERT model's

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

    def order(self) -> Order:
        """The run's example order (batches.Order)."""
        return Order(int(self.corpus.train.shape[0]), self.cfg.seed)

    def build(self, state_dir: Path | None = None) -> str:
        """Build model, optimizer, grad scaler and the one update (from the run's seed), restored from `state_dir`
        when resuming; returns the precision."""
        cfg, h, dev = self.cfg, self.h, self.dev
        if self.image:
            d = self.corpus
            self.model = build_vit(
                cfg.size,
                cfg.init,
                cfg.seed,
                image_size=d.image_size,
                num_channels=d.num_channels,
                class_names=d.class_names,
                _hyper=h,
            )
        else:
            self.model = build_model(cfg.size, cfg.objective, cfg.init, cfg.seed, special_tokens=self.special, _hyper=h)
        self.model.to(dev)
        self.model.train()
        self.opt = build_optimizer(self.model, h)
        prec = _precision(h, dev)
        if self.rank == 0 and (slow := precision_warning(prec, dev)):
            warn_stderr(slow)
            log.warning("%s", slow)
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec)
        self.scaler = torch.amp.GradScaler(dev.type) if prec == "fp16" else None
        self.autocast = functools.partial(_autocast, dev, amp_dtype)
        if state_dir is not None:
            load_state(state_dir, self.model, self.opt, self.scaler, dev)
        if self.image:
            self.qk_pairs = qk_layers(self.model)
        if h.batch_path == "device":  # its own passes and loss module (DDP-wrapped there)
            from attention_geometry.training.device_path import DeviceBatches

            source = DeviceBatches(self.corpus, h, cfg.objective, cfg.seed, self.model, dev, self.world, self.rank)
        else:
            fwd = ClassifierLoss(self.model) if self.image else LossModule(self.model, cfg.objective, h.compile)
            if self.world > 1:
                from torch.nn.parallel import DistributedDataParallel as DDP

                fwd = DDP(fwd, device_ids=[dev.index] if dev.type == "cuda" else None)
            source = HostBatches(self.corpus, h, cfg.objective, cfg.seed, dev, fwd, self.world, self.rank)
        self.step = Step(
            self.model,
            self.opt,
            h,
            source,
            dev,
            amp=amp_dtype,
            scaler=self.scaler,
            seed=cfg.seed,
            rank=self.rank,
            qk_pairs=self.qk_pairs,
        )
        return prec

    def update(self, order: Order, step: int, lam: float = 0.0) -> tuple[torch.Tensor, float, Any]:
        """Update `step` (Step): (this process's token-summed loss, learning rate, global loss-token count)."""
        return self.step(order, step, lam)

    def throughput(self, start: int = 0) -> Throughput:
        """The run's Throughput (training/cost.py): one update's model FLOPs and positions over all processes, and
        their devices' peak (a CPU's measured at the run's threads)."""
        h, objective = self.h, self.cfg.objective
        if self.image:
            d = self.corpus
            n = sequence_positions(h, objective, d.image_size)
            flops = update_flops(h, objective, n, num_channels=d.num_channels, num_labels=len(d.class_names))
        else:
            n = sequence_positions(h, objective)
            flops = update_flops(h, objective, n)
        peak = peak_flops(self.dev, amp=_precision(h, self.dev) != "fp32")
        return Throughput(flops, h.batch_size * n, peak * self.world if peak else None, start)

    def checkpoint(self, step: int, is_snap: bool, is_state: bool, held_out: dict | None = None) -> None:
        """The snapshot and / or the resumable state of `step` (process 0 writes, every process waits); `held_out`:
        the step's held-out columns, for the snapshot's model card."""
        if self.rank == 0 and is_snap:
            save_snapshot(self.model, self.out, step, self.resolved, fmt_held_out(held_out) if held_out else None)
        if is_state:
            self.save_state(step, " and snapshot" if is_snap else "")
        elif is_snap:
            self.barrier()

    def save_state(self, step: int, note: str = "", window: list[float] | None = None) -> None:
        """The resumable state of `step` (process 0 writes, every process waits), with the loss window since the
        last row (`window`, for a state saved between rows); its duration goes to the run's budget."""
        t0 = self.budget.clock()
        if self.rank == 0:
            save_state(self.model, self.opt, self.scaler, self.out, step, self.resolved, loss_window=window)
            log.info("step %d: state written%s", step, note)
        self.barrier()
        self.budget.saved(self.budget.clock() - t0)

    def train(self, progress: bool = True) -> dict:
        """Run (or resume) the run: DDP's process group under torchrun, the run folder's lock, SIGTERM caught."""
        dist = None
        if self.world > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group("nccl" if self.dev.type == "cuda" else "gloo")
            self.dist = dist
        try:  # one writer per run dir: process 0 holds {out}.lock (the other processes are its DDP peers)
            out, lock = self.out, contextlib.nullcontext()
            if self.rank == 0:
                lock = pid_lock(lock_path(out), f"run {out}", warn=warn_stderr)
            with lock:
                with TermSignal() as term:
                    return _train(self, progress, term)
        finally:
            if dist is not None and dist.is_initialized():
                dist.destroy_process_group()


def _setup_logging(out: Path, rank: int) -> logging.Handler | None:
    if rank != 0:
        return None
    handler = logging.FileHandler(out / TRAIN_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    return handler


def _warn(message: str) -> None:
    """A warning of process 0: a `warning:` line on stderr and in train.log."""
    log.warning(message)
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _resume_state(run: Trainer) -> Path | None:
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


def _stopped(run: Trainer, losses: LossLog, step: int, saved: int, why: int, t_start: float, speed) -> dict:
    """Stop after update `step` (time limit or SIGTERM): its state is saved as a periodic one is (with the loss
    window since the last row) unless it is on disk already, the start's speed goes into provenance.csv, and the
    summary says `stopped`."""
    if step > saved:
        losses.flush(step, None)
        run.save_state(step, window=losses.window)
    if run.rank == 0:
        record_speed(run.out, *speed.mean_rates(step))
    reason = "on SIGTERM" if why == StopVote.SIGNAL else f"for the {run.budget.describe()}"
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


def _rebuild_final_snapshot(run: Trainer, state_dir: Path, step: int) -> bool:
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
    run.build(state_dir)
    # the card's held-out columns as loss.csv has them (the same card as the lost snapshot's)
    row = next((r for r in read_loss_rows(run.out) if int(r["step"]) == step), {})
    held_out = {k: v for k, v in row.items() if k.startswith("eval_") and v}
    save_snapshot(run.model, run.out, step, run.resolved, held_out or None)
    return True


def _train(run: Trainer, progress: bool, term: TermSignal) -> dict:
    t_start = time.perf_counter()
    resolved, out = run.resolved, run.out
    name, max_steps = resolved.run, resolved.max_steps
    change = open_run_yaml(out, resolved) if run.rank == 0 else None
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
        prec = run.build(state_dir)
        # a resumed run drops the rows after its state's step, and takes up the window of updates since its
        # last row where the state was saved inside one (a run stopped early)
        losses = LossLog(run, kept, row_steps, read_loss_window(state_dir) if state_dir is not None else None)
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
            e0 = held_out_at(run, 0)
            if run.rank == 0 and 0 in snaps:
                save_snapshot(run.model, out, 0, resolved, fmt_held_out(e0) if e0 else None)
            if run.rank == 0 and e0 is not None:
                losses.add_eval0(e0)

        n_blocks = int(run.corpus.train.shape[0])
        if run.rank == 0 and start == 0 and run.h.batch_size > n_blocks:
            _warn(
                f"batch_size {run.h.batch_size} is larger than the {n_blocks} training blocks of the corpus: "
                "every batch repeats blocks (lower batch_size, or use a larger corpus)"
            )
        order = Order(n_blocks, run.cfg.seed)
        lam = resolved.regularizer["lambda"]
        bar = None
        if run.rank == 0 and progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=max_steps, initial=start, desc=name, unit="step", dynamic_ncols=True)
        speed = run.throughput(start)
        t_loop = time.perf_counter()
        budget = run.budget
        stop, saved = StopVote(run.budget, term, run.dist), start  # saved: the step of the newest state on disk
        for step in range(start + 1, max_steps + 1):
            why = stop.why()
            if why != StopVote.NO:
                if bar is not None:
                    bar.close()
                return _stopped(run, losses, step - 1, saved, why, t_start, speed)
            budget.start_step()
            step_sum, lr, n_tokens = run.update(order, step, lam)
            losses.pending.append((step, step_sum, lr, n_tokens))
            if bar is not None:
                bar.update(1)
            if run.rank == 0 and step % resolved.log_every == 0:
                log.info("%s", speed.line(step))
            is_eval, is_snap = step in evals, step in snaps
            is_state = is_snap or (state_every and step % state_every == 0) or step == max_steps
            if is_eval or is_snap or is_state or len(losses.pending) >= 100:
                held_out = held_out_at(run, step) if is_eval else None
                losses.flush(step, held_out)
                run.checkpoint(step, is_snap, is_state, held_out)
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
            log.info("run %s: %s in the loop on average", name, speed.mean(max_steps))
            record_speed(out, *speed.mean_rates(max_steps))
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
