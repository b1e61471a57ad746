"""The one optimizer update of a run (`Step`), and the host source of its batches.

An update is: the batch of the step from a source, the learning rate of the step, dropout seeded by (seed, step,
process), then forward and backward of each of the batch's pieces (its micro-batches or passes) under one autocast
and one loss scaler, the regularizer joined to the last piece, and one optimizer step (unscale, clip, AdamW, the
scaler's update, the gradients cleared). Two sources feed it:

- `HostBatches` (`batch_path: host`, the CPU default and what every committed study trained): the global batch and
  its masks drawn on the host in numpy (training/batches.py), sliced into `grad_accum` micro-batches, each copied
  to the device as it runs;
- `DeviceBatches` (`batch_path: device`, training/device_path.py): device-resident blocks, masks drawn on the
  device, a few passes of static shape, eager, compiled or replayed from CUDA graphs.

A piece gives `forward() -> (loss to backpropagate, detached token-summed loss)`; a piece replayed from a CUDA graph
gives `replay()` instead (its forward and backward were captured). The loss normalisation (`loss_mean`) is the
source's: each piece's loss is already scaled so that the summed gradient is that of the update's loss.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_geometry.training.batches import (
    Order,
    dropout_seed,
    global_indices,
    lr_at,
    make_batch,
    mask_keys,
    n_loss_tokens,
)
from attention_geometry.training.hyper import Hyper, uses_dropout
from attention_geometry.training.models import hidden_states, lm_loss, symmetry_penalty
from attention_geometry.training.vit import classification_loss, pixel_batch

__all__ = [
    "Step",
    "HostBatches",
    "HostPiece",
    "LossModule",
    "ClassifierLoss",
    "build_optimizer",
    "trainer_decay_names",
]


class LossModule(nn.Module):
    """The model's token-summed training loss as a module, so DDP (and torch.compile) wrap one forward."""

    def __init__(self, model, objective: str, compile_: bool = False):
        super().__init__()
        self.model, self.objective = model, objective
        # only the transformer stack is compiled (static shapes); the masked-position gather, output layer
        # and loss have data-dependent shapes and stay eager
        self.hidden_fn = torch.compile(hidden_states) if compile_ else None

    def forward(self, inputs, labels, pad_id: int | None, key_padding=None):
        return lm_loss(
            self.model, inputs, labels, self.objective, pad_id=pad_id, hidden_fn=self.hidden_fn, key_padding=key_padding
        )


class ClassifierLoss(nn.Module):
    """An image classifier's summed cross-entropy as a module (what DDP wraps for objective classifier)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, labels, pad_id: int | None = None):
        return classification_loss(self.model, inputs, labels)


def trainer_decay_names(model) -> set[str]:
    """The parameter names transformers' Trainer decays (its get_decay_parameter_names): those not inside a
    LayerNorm and whose name matches none of its patterns (bias, layernorm, rmsnorm, norm as a name part)."""
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


def build_optimizer(model, h: Hyper) -> torch.optim.AdamW:
    """AdamW over the model's trainable parameters in two groups: decayed (`weight_decay_params`: `ndim`, the
    matrices; `trainer`, transformers' Trainer's choice) and not decayed."""
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


# ---------------------------------------------------------------------------------------------- the update


class Step:
    """The one optimizer update. `step(order, s)` -> (this process's token-summed loss, learning rate, global count
    of positions with a loss) for update `s`, whose global batch is train examples order(global_indices(s, B)).

    `model`, `opt`: what it trains; `source`: HostBatches or device_path.DeviceBatches (bound to this step: it
    reads the step's autocast and backward); `amp`: the autocast dtype (None: fp32); `scaler`: fp16's loss scaler;
    `seed`, `rank`: the run's seed and this process (dropout is keyed by both); `qk_pairs`: the regularizer's
    layers (None: the BERT model's)."""

    def __init__(
        self,
        model,
        opt,
        h: Hyper,
        source,
        dev: torch.device,
        *,
        amp: torch.dtype | None = None,
        scaler=None,
        seed: int = 0,
        rank: int = 0,
        qk_pairs=None,
    ):
        self.model, self.opt, self.h, self.dev = model, opt, h, dev
        self.amp, self.scaler, self.seed, self.rank = amp, scaler, seed, rank
        self.qk_pairs = qk_pairs
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.source = source
        source.bind(self)

    def autocast(self):
        """The one autocast of a forward. A source that replays CUDA graphs turns the cast cache off: a captured
        graph must cast the weights it reads at every replay."""
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.dev.type, dtype=self.amp, cache_enabled=not self.source.replays)

    def backward(self, loss: torch.Tensor) -> None:
        """The one backward: through the loss scaler under fp16."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def __call__(self, order: Order, step: int, lam: float = 0.0) -> tuple[torch.Tensor, float, Any]:
        h = self.h
        pieces, n_tokens = self.source.batch(step, order(global_indices(step, h.batch_size)))
        lr = lr_at(h, step)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.source.prepare(pieces)  # CUDA graphs captured before the dropout seed: capturing draws nothing used
        if uses_dropout(h):  # dropout keyed by (seed, step, process), as the masks are: reproducible, resumable
            torch.manual_seed(dropout_seed(self.seed, step, self.rank))
        total = self.accumulate(pieces, lam)
        self.optimizer_step()
        return total, lr, n_tokens

    def accumulate(self, pieces: Sequence, lam: float = 0.0) -> torch.Tensor:
        """Forward and backward of every piece (gradients accumulated; under DDP synchronized at the last), the
        regularizer `lam` x symmetry_penalty joined to the last piece's loss (its own backward after a replayed
        last piece); returns this process's token-summed loss."""
        total = torch.zeros((), device=self.dev)
        penalty_done = lam <= 0
        for j, piece in enumerate(pieces):
            last = j == len(pieces) - 1
            replay = getattr(piece, "replay", None)
            if replay is not None:  # a CUDA graph: forward and backward were captured
                total = total + replay()
                continue
            with self.source.no_sync(not last):
                with self.autocast():
                    loss, plain = piece.forward()
                    if last and not penalty_done:
                        loss = loss + lam * symmetry_penalty(self.model, self.qk_pairs)
                        penalty_done = True
                self.backward(loss)
            total = total + plain
        if not penalty_done:
            with self.autocast():
                penalty = lam * symmetry_penalty(self.model, self.qk_pairs)
            self.backward(penalty)
        return total

    def optimizer_step(self) -> None:
        """The one optimizer step: unscale (fp16), clip, AdamW, the scaler's update; then the gradients are cleared
        (set to None; zeroed in place where a CUDA graph's captured backward writes them)."""
        if self.scaler is not None:
            self.scaler.unscale_(self.opt)
        if self.h.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.params, self.h.grad_clip, foreach=True)
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        if self.source.replays:
            torch._foreach_zero_([p.grad for p in self.params if p.grad is not None])
        else:
            self.opt.zero_grad(set_to_none=True)


# ---------------------------------------------------------------------------------------------- the host source


@dataclass
class HostPiece:
    """One micro-batch of the host path: numpy inputs and labels, the [PAD] id where keys equal to it are masked
    (None: no mask), the authors' real-key mask (None: none), and the scale that turns its token-summed loss into
    its share of the update's loss."""

    fwd: Any
    dev: torch.device
    x: np.ndarray
    y: np.ndarray
    pad: int | None
    real: np.ndarray | None
    scale: float

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        kp = None
        if self.real is not None and not bool(self.real.all()):
            kp = torch.from_numpy(np.ascontiguousarray(self.real)).to(self.dev, non_blocking=True)
        x = torch.from_numpy(self.x).to(self.dev, non_blocking=True)
        y = torch.from_numpy(self.y).to(self.dev, non_blocking=True)
        s = self.fwd(x, y, self.pad) if kp is None else self.fwd(x, y, self.pad, kp)
        return s * self.scale, s.detach().float()


class HostBatches:
    """The host source (`batch_path: host`): update t's global batch and masks made on the host (batches.make_batch,
    keyed by (seed, step, example)), this process's contiguous slice of it in `grad_accum` micro-batches. The loss of
    an update is the token mean over the global batch (each micro-batch's sum over the global count, which every
    process knows without communication), or under `loss_mean: micro_batches` the mean of each micro-batch's token
    mean; an image classifier's is the mean over the global batch's images."""

    replays = False

    def __init__(self, corpus, h: Hyper, objective: str, seed: int, dev: torch.device, fwd, world: int = 1, rank=0):
        self.corpus, self.h, self.objective, self.seed = corpus, h, objective, seed
        self.dev, self.fwd, self.world, self.rank = dev, fwd, world, rank
        self.image = objective == "classifier"

    def bind(self, step: Step) -> None:
        self.step = step

    def prepare(self, pieces) -> None:
        return None

    def no_sync(self, skip: bool):
        """DDP's gradient synchronization skipped for all but the last piece."""
        return self.fwd.no_sync() if self.world > 1 and skip else contextlib.nullcontext()

    def batch(self, step: int, idx: np.ndarray) -> tuple[list[HostPiece], int]:
        """The pieces of update `step` (global batch: train examples `idx`) and the global count of loss positions."""
        h, c = self.h, self.corpus
        if self.image:  # the global batch's images, normalized, and their classes; the loss is a mean over images
            inp = pixel_batch(c.train[idx], c.mean, c.std).numpy()
            lab = np.asarray(c.train_labels[idx], dtype=np.int64)
            return self.pieces(inp, lab, len(idx), None, None), len(idx)
        special = c.special_tokens
        blocks = c.train[idx]
        g = global_indices(step, h.batch_size)
        inp, lab = make_batch(blocks, self.objective, mask_keys(self.seed, step, g), h, special, h.vocab_size)
        n_tokens = n_loss_tokens(lab, self.objective)
        # the authors' attention mask is the tokenizer's (where it padded), not where the corruption put [PAD]
        real = np.asarray(blocks) != special["pad"] if h.recipe == "authors" else None
        return self.pieces(inp, lab, n_tokens, special, real), n_tokens

    def pieces(self, inp, lab, n_tokens: int, special: dict | None, real=None) -> list[HostPiece]:
        """This process's micro-batches of a global batch (inputs, labels; `n_tokens` its global loss positions).
        `real`: where keys are real tokens (the authors' recipe: the uncorrupted ids' padding), else keys equal to
        [PAD] are masked."""
        h, world = self.h, self.world
        micro, A = h.batch_size // world // h.grad_accum, h.grad_accum
        lo = self.rank * (h.batch_size // world)
        out = []
        for a in range(A):
            s0 = lo + a * micro
            xb, yb = inp[s0 : s0 + micro], lab[s0 : s0 + micro]
            pad = special["pad"] if special and bool((xb == special["pad"]).any()) else None  # decided on the host
            rb = None
            if real is not None:
                rb, pad = real[s0 : s0 + micro], None
            if h.loss_mean == "micro_batches" and not self.image:  # each micro-batch's token mean, averaged
                scale = 1.0 / (A * max(n_loss_tokens(yb, self.objective), 1))
            else:
                scale = world / max(n_tokens, 1)
            out.append(HostPiece(self.fwd, self.dev, xb, yb, pad, rb, scale))
        return out
