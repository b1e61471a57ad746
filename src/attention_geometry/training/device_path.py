"""The device source of the one update (`batch_path: device`; training/step.py, docs/training.md, "The device
path (GPU)"): what a GPU run needs so that an update is a few large launches without a host synchronization. The
update itself (autocast, the loss scaler, the regularizer, the optimizer step) is training/step.Step's, as for the
host source, which stays the default and what every CPU study trained.

- The train split lives on the device (`DeviceData`), in the narrowest integer type that holds the vocabulary;
  where it would take more than a quarter of the device's memory it stays on the host and each update's rows go
  over in one pinned copy. The data order is the host path's (`batches.Order`).
- The masking is drawn on the device for the whole global batch from a torch generator seeded by (seed, step)
  (`device_masks`): DataCollatorForLanguageModeling's rule (mlm_probability; of the selected, mask_token_fraction
  [MASK], random_token_fraction a uniform random id, the rest kept; never a special token of the recipe's list),
  another random stream than the host path's numpy one. Every process draws the global batch, so the masks do not
  depend on the number of processes.
- The micro-batches of an update run as `device_passes` passes (1: the process's whole batch at once), with
  per-token loss weights that keep `loss_mean` exact (`micro_batches`: each micro-batch's token mean, averaged;
  `tokens`: the token mean over the global batch).
- Static shapes: a masked objective's output layer takes a fixed number K of positions per pass (the selected
  ones in order, then ignored fillers); K is the expected count plus 10 standard deviations, and the masking keeps
  at most K selections per pass (its first; the chance that a pass selects more is below 1e-20). The clean
  decoder takes every position (padding has the ignore index). Attention is masked where the uncorrupted blocks
  are padded; a pass without a padded row runs without a mask (flash attention), decided on the host. With
  `padded_attention: varlen`, a padded pass whose rows have their real tokens first attends within segments instead
  (models.segment_bounds: variable-length flash attention on CUDA), and a causal one without a mask (no real token
  sees a later position, so none sees the padding).
- The passes run eagerly, through torch.compile (`capture: compile`), or replayed from CUDA graphs captured at
  the first update that needs them (`capture: cuda-graphs`; CUDA, one process); the Step's optimizer step (the
  loss scaler's unscale, clipping, fused AdamW, the scaler's update) stays eager and synchronization-free.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attention_geometry.errors import UserError
from attention_geometry.training.batches import IGNORE_INDEX, NEVER_MASKED, NEVER_MASKED_AUTHORS
from attention_geometry.training.hyper import CAUSAL_OBJECTIVES, MASKED_OBJECTIVES, Hyper
from attention_geometry.training.models import _head, hidden_states, segment_bounds

__all__ = [
    "DEVICE_MASK_STREAM",
    "DeviceBatches",
    "DeviceData",
    "Pass",
    "Passes",
    "capacity",
    "check_device_run",
    "device_mask_seed",
    "device_masks",
    "pass_loss",
]

DEVICE_MASK_STREAM = 4  # training/batches.py's generators use the streams 0-3
CAPACITY_SDS = 10  # K: the expected selections of a pass plus this many standard deviations
RESIDENT_SHARE = 0.25  # the train split stays on the host where it would take more of the device's memory
WARMUP_REPLAYS = 3  # eager forward and backward passes on a side stream before a CUDA graph is captured


def device_mask_seed(seed: int, step: int) -> int:
    """The seed of the device generator that draws the masks of update `step`: a 63-bit integer from the key
    (seed, DEVICE_MASK_STREAM, step)."""
    state = np.random.SeedSequence([int(seed), DEVICE_MASK_STREAM, int(step)]).generate_state(2, np.uint64)
    return int(state[0] >> np.uint64(1))


def capacity(n_positions: int, p: float) -> int:
    """K, the positions one pass's output layer takes: the expected selections of `n_positions` at rate `p` plus
    CAPACITY_SDS standard deviations (every position maskable: an upper bound), at most `n_positions`."""
    k = math.ceil(n_positions * p + CAPACITY_SDS * math.sqrt(n_positions * p * (1 - p))) + 1
    return min(n_positions, k)


def device_masks(
    ids: torch.Tensor, gen: torch.Generator, h: Hyper, special: dict, vocab_size: int, chunks: int = 1, cap=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT masking of `ids` [n, L] (int64) drawn from `gen` on their device: positions that are no special token of
    the recipe (NEVER_MASKED_AUTHORS under `recipe: authors`, else NEVER_MASKED) are selected with probability
    mlm_probability; of those, mask_token_fraction become [MASK], random_token_fraction a uniform random id in
    [0, vocab_size), the rest stay. `cap`: the rows split into `chunks` equal parts, each keeps at most `cap` of its
    selections (the first in row-major order; None: all). Returns (inputs, labels), labels = the original id where
    selected, IGNORE_INDEX elsewhere (DataCollatorForLanguageModeling's layout)."""
    n, L = ids.shape
    dev = ids.device
    u = torch.rand((n, L), generator=gen, device=dev)
    w = torch.rand((n, L), generator=gen, device=dev)
    r = torch.randint(0, vocab_size, (n, L), generator=gen, device=dev)
    sel = u < h.mlm_probability
    for name in NEVER_MASKED_AUTHORS if h.recipe == "authors" else NEVER_MASKED:
        sel &= ids != special[name]
    if cap is not None:
        parts = sel.view(chunks, -1)
        sel = (parts & (parts.cumsum(1) <= cap)).view(n, L)
    to_mask = sel & (w < h.mask_token_fraction)
    to_rand = sel & (w >= h.mask_token_fraction) & (w < h.mask_token_fraction + h.random_token_fraction)
    inputs = torch.where(to_mask, special["mask"], torch.where(to_rand, r, ids))
    return inputs, torch.where(sel, ids, IGNORE_INDEX)


def pass_loss(model, objective: str, x, key_padding, pos, targets, weights) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum_t weights_t * ce_t, sum_t ce_t) of one pass: the cross-entropy ce_t of each of its labelled positions
    (IGNORE_INDEX targets count 0). Text: `x` the inputs [R, L], `key_padding` True at real keys (None: no mask;
    int32: segment bounds, models.hidden_states), the hidden states (a decoder's shifted by one) flattened, `pos`
    the K positions the output layer takes (None: all), `targets` and `weights` one per position taken. Images
    (`classifier`): `x` the pixels, `targets` the classes. Static shapes throughout, so that a pass can be compiled
    or captured."""
    if objective == "classifier":
        logits = model(pixel_values=x).logits.float()
    else:
        causal = objective in CAUSAL_OBJECTIVES
        hs = hidden_states(model, x, key_padding, causal)
        if causal:
            hs = hs[:, :-1]
        hs = hs.reshape(-1, hs.shape[-1])
        if pos is not None:
            hs = hs.index_select(0, pos)
        logits = _head(model, hs).float()
    ce = F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="none")
    return (ce * weights).sum(), ce.detach().sum()


class _Pass(nn.Module):
    """pass_loss as a module (what DDP wraps across processes); `fn`: pass_loss or its compiled form."""

    def __init__(self, model, objective: str, fn):
        super().__init__()
        self.model, self.objective, self.fn = model, objective, fn

    def forward(self, x, key_padding, pos, targets, weights):
        return self.fn(self.model, self.objective, x, key_padding, pos, targets, weights)


# ------------------------------------------------------------------------------------------------- the data


_TORCH = {np.int16: torch.int16, np.int32: torch.int32}


def _to_device(a: np.ndarray, dev: torch.device) -> torch.Tensor:
    """A host array on `dev`: from pinned memory without waiting on a CUDA device, as it is on the CPU."""
    t = torch.from_numpy(np.ascontiguousarray(a))
    return t.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else t


class DeviceData:
    """The train split of a run for the device path: token blocks with the host's record of which are padded and
    which have their real tokens first (`prefix`: no [PAD] before a real token), or images with their classes
    (normalized on the device as vit.pixel_batch does on the host)."""

    def __init__(self, corpus, dev: torch.device, image: bool, chunk_rows: int = 65536):
        self.dev, self.image = dev, image
        train = corpus.train
        if image:
            self.images = _to_device(np.array(train), dev)  # a copy: the set's arrays are read-only maps
            self.labels = _to_device(np.array(corpus.train_labels, dtype=np.int64), dev)
            self.mean = torch.tensor(corpus.mean, dtype=torch.float32, device=dev)[:, None, None]
            self.std = torch.tensor(corpus.std, dtype=torch.float32, device=dev)[:, None, None]
            self.resident = True
            return
        n, L = train.shape
        dtype = np.int16 if corpus.vocab_size <= 1 << 15 else np.int32
        pad = corpus.special_tokens["pad"]
        nbytes = n * L * np.dtype(dtype).itemsize
        self.resident = (
            dev.type != "cuda" or nbytes <= RESIDENT_SHARE * torch.cuda.get_device_properties(dev).total_memory
        )
        self.padded = np.empty(n, dtype=bool)  # one pass over the split, in chunks (a corpus can be gigabytes)
        self.prefix = np.empty(n, dtype=bool)
        self.blocks = torch.empty((n, L), dtype=_TORCH[dtype], device=dev) if self.resident else None
        for a in range(0, n, chunk_rows):
            part = np.asarray(train[a : a + chunk_rows])
            is_pad = part == pad
            self.padded[a : a + len(part)] = is_pad.any(axis=1)
            self.prefix[a : a + len(part)] = real_first(is_pad)
            if self.resident:
                self.blocks[a : a + len(part)].copy_(torch.from_numpy(part.astype(dtype)))
        self.host = None if self.resident else train

    def token_rows(self, idx: np.ndarray) -> torch.Tensor:
        """The blocks of train indices `idx` as int64 [len(idx), L] on the device."""
        if self.resident:
            return self.blocks.index_select(0, _to_device(idx, self.dev)).long()
        return _to_device(np.asarray(self.host[idx]), self.dev).long()

    def image_rows(self, idx: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(normalized float32 pixels, int64 classes) of train images `idx` on the device."""
        i = _to_device(idx, self.dev)
        x = self.images.index_select(0, i).float() * np.float32(1 / 255)
        return (x - self.mean) / self.std, self.labels.index_select(0, i)


def real_first(is_pad: np.ndarray) -> np.ndarray:
    """Per row of `is_pad` [n, L] (True at [PAD]) whether its real tokens come first: no [PAD] before a real
    token (a row without padding: True)."""
    n_pad = is_pad.sum(axis=1)
    first_pad = np.where(is_pad.any(axis=1), is_pad.argmax(axis=1), is_pad.shape[1])
    return first_pad + n_pad == is_pad.shape[1]


# ----------------------------------------------------------------------------------------------- one update


@dataclass
class Pass:
    """One pass of the device path, a piece of training/step.Step's update: `args` (x, key_padding or None, pos or
    None, targets, weights); `replay` is set where the pass runs as a captured CUDA graph."""

    module: Any
    args: tuple
    replay: Callable[[], torch.Tensor] | None = None

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(the weighted loss to backpropagate, the detached token-summed loss) of the pass."""
        return self.module(*self.args)


@dataclass
class Passes:
    """One update's passes on this process (`pieces`), and the global count of positions with a loss (a tensor on
    the device; an int for images)."""

    pieces: list[Pass]
    n_tokens: torch.Tensor | int

    @property
    def args(self) -> list[tuple]:
        return [p.args for p in self.pieces]

    def keys(self) -> list[str]:
        """Per pass its kind of attention (pass_kind; a CUDA graph per kind)."""
        return [pass_kind(a[1]) for a in self.args]


def pass_kind(key_padding: torch.Tensor | None) -> str:
    """A pass's kind of attention from its key_padding argument: `none`, `mask` (boolean) or `segments` (int32
    bounds)."""
    if key_padding is None:
        return "none"
    return "segments" if key_padding.dtype == torch.int32 else "mask"


def check_device_run(h: Hyper, dev: torch.device, world: int) -> None:
    """What the device path refuses once the device and the processes are known (train() calls it before anything
    is written): device_passes that do not divide a process's sequences, CUDA graphs off CUDA or under DDP."""
    rows = h.batch_size // world
    if rows % h.device_passes:
        raise UserError(
            f"overrides.device_passes: {h.device_passes} does not divide the {rows} sequences of a process's update"
        )
    if h.capture == "cuda-graphs" and (dev.type != "cuda" or world > 1):
        raise UserError(
            f"overrides.capture: cuda-graphs needs a CUDA device and one process (this run: {dev.type}, {world} "
            "process(es)); use eager or compile"
        )


class DeviceBatches:
    """The device source of training/step.Step (`batch_path: device`): `batch(step, idx)` -> (this process's passes
    of update `step`, whose global batch is train examples `idx`, and the global loss-token count). The train split
    goes to the device at the first update."""

    def __init__(self, corpus, h: Hyper, objective: str, seed: int, model, dev: torch.device, world: int = 1, rank=0):
        self.corpus, self.h, self.objective, self.seed = corpus, h, objective, seed
        self.image = objective == "classifier"
        self.dev, self.world, self.rank = dev, world, rank
        check_device_run(h, dev, world)
        self.rows = h.batch_size // world  # this process's sequences per update
        self.n_pass = h.device_passes
        self.pass_rows = self.rows // self.n_pass
        fn = torch.compile(pass_loss, dynamic=False) if h.capture == "compile" else pass_loss
        self.fwd = _Pass(model, objective, fn)
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            self.fwd = DDP(self.fwd, device_ids=[dev.index] if dev.type == "cuda" else None)
        L = h.seq_len or 0
        self.width = L - 1 if objective in CAUSAL_OBJECTIVES else L  # positions with a label per row
        self.cap = capacity(self.pass_rows * self.width, h.mlm_probability) if objective in MASKED_OBJECTIVES else None
        self.gen = torch.Generator(device=dev)
        self.replays = h.capture == "cuda-graphs"
        self.graphs: _Graphs | None = None
        self.data: DeviceData | None = None

    def bind(self, step) -> None:
        """Bound to the Step it feeds: the graphs run its autocast and backward."""
        self.step = step
        self.graphs = _Graphs(step, self) if self.replays else None

    def no_sync(self, skip: bool):
        """DDP's gradient synchronization skipped for all but the last pass."""
        return self.fwd.no_sync() if self.world > 1 and skip else contextlib.nullcontext()

    def prepare(self, passes: list[Pass]) -> None:
        """Under CUDA graphs: each kind of pass captured at the first update that needs it, then replayed."""
        if self.graphs is not None:
            self.graphs.ensure(passes)

    # the batch ------------------------------------------------------------------------------------------------
    def batch(self, step: int, idx: np.ndarray) -> tuple[list[Pass], torch.Tensor | int]:
        """This process's passes of update `step`, whose global batch is train examples `idx` (batches.Order), and
        the global count of loss positions."""
        passes = self.batch_passes(step, idx)
        return passes.pieces, passes.n_tokens

    def batch_passes(self, step: int, idx: np.ndarray) -> Passes:
        if self.data is None:
            self.data = DeviceData(self.corpus, self.dev, self.image)
        if self.image:
            x, y = self.data.image_rows(idx)
            return self.passes(x, y, None, [False] * self.n_pass, n_tokens=len(idx))
        special, h = self.corpus.special_tokens, self.h
        ids = self.data.token_rows(idx)
        if self.objective in MASKED_OBJECTIVES:
            self.gen.manual_seed(device_mask_seed(self.seed, step))
            chunks = self.world * self.n_pass
            inputs, labels = device_masks(ids, self.gen, h, special, h.vocab_size, chunks, self.cap)
        else:
            inputs, labels = ids, torch.where(ids == special["pad"], IGNORE_INDEX, ids)
        mine = idx[self.rank * self.rows : (self.rank + 1) * self.rows]
        padded = self.data.padded[mine].reshape(self.n_pass, -1).any(axis=1)
        varlen = self.data.prefix[mine].reshape(self.n_pass, -1).all(axis=1) & (h.padded_attention == "varlen")
        return self.passes(inputs, labels, ids != special["pad"], padded.tolist(), varlen=varlen.tolist())

    def passes(
        self, inputs, labels, real, padded: list[bool], n_tokens: int | None = None, varlen: list[bool] | None = None
    ) -> Passes:
        """The passes of a global batch on the device (inputs, labels [B, L]; `real` True where a key is a real
        token; an image batch: pixels and classes, `real` None): this process's rows, `padded[j]` whether pass j
        needs its attention mask, and the per-position weights of the loss (`loss_mean`). `varlen[j]`: pass j's
        rows have their real tokens first and attend within segments (segment_bounds; a causal pass: no mask)."""
        h, P, R, lo = self.h, self.n_pass, self.pass_rows, self.rank * self.rows
        mine = slice(lo, lo + self.rows)
        x = inputs[mine].reshape(P, R, *inputs.shape[1:])
        if self.image:  # the mean over the global batch's images (as the host path)
            w = torch.full((P, R), self.world / max(int(n_tokens), 1), device=self.dev)
            y = labels[mine].reshape(P, R)
            return Passes([Pass(self.fwd, (x[j], None, None, y[j], w[j])) for j in range(P)], int(n_tokens))
        lab = labels[:, 1:] if self.objective in CAUSAL_OBJECTIVES else labels
        valid = lab != IGNORE_INDEX
        count = valid.sum()
        if h.loss_mean == "micro_batches":  # each micro-batch's token mean, averaged over micro-batches (and DDP)
            A = h.grad_accum
            per_micro = valid[mine].reshape(A, -1).sum(1).clamp_min(1).float()
            c_row = (1.0 / (A * per_micro)).repeat_interleave(self.rows // A)
        else:  # the token mean over the global batch (DDP averages: times the processes)
            c_row = (self.world / count.clamp_min(1).float()).expand(self.rows)
        width = lab.shape[1]
        tgt = lab[mine].reshape(P, R * width)
        wt = c_row.reshape(P, R, 1).expand(P, R, width).reshape(P, R * width)
        pos = [None] * P
        if self.cap is not None:  # the first K labelled positions of each pass, then ignored fillers
            rank = (tgt != IGNORE_INDEX).cumsum(1)
            want = torch.arange(1, self.cap + 1, device=self.dev).expand(P, self.cap).contiguous()
            at = torch.searchsorted(rank, want).clamp_max(R * width - 1)
            ok = want <= rank[:, -1:]
            tgt = torch.where(ok, tgt.gather(1, at), IGNORE_INDEX)
            wt = torch.where(ok, wt.gather(1, at), 0.0)
            pos = list(at)
        kp = real[mine].reshape(P, R, -1) if real is not None else None
        causal = self.objective in CAUSAL_OBJECTIVES
        varlen = varlen or [False] * P

        def keys(j: int):
            if not padded[j]:
                return None
            if varlen[j]:
                return None if causal else segment_bounds(kp[j])
            return kp[j]

        return Passes([Pass(self.fwd, (x[j], keys(j), pos[j], tgt[j], wt[j])) for j in range(P)], count)


class _Graphs:
    """The passes as CUDA graphs, one per kind of attention (pass_kind): static input buffers, a forward and
    backward (the Step's autocast and backward) that accumulates into the parameters' gradients, and the pass's
    plain loss sum. After `ensure`, each pass of the update carries its `replay`."""

    def __init__(self, step, source: DeviceBatches):
        self.step, self.source = step, source
        self.graphs: dict[str, tuple] = {}

    def ensure(self, passes: list[Pass]) -> None:
        """Capture the graph of each kind of pass in `passes` not captured yet (warm-up passes first, on a side
        stream, whose gradients are cleared afterwards), and set each pass's replay."""
        for p in passes:
            key = pass_kind(p.args[1])
            if key not in self.graphs:
                self.graphs[key] = self._capture(p.args)
            p.replay = functools.partial(self.replay, p.args)

    def _run(self, statics):
        with self.step.autocast():
            weighted, plain = self.source.fwd(*statics)
        self.step.backward(weighted)
        return plain

    def _capture(self, args) -> tuple:
        statics = tuple(None if a is None else a.clone() for a in args)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_REPLAYS):
                self._run(statics)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # the kinds share one memory pool: their passes never run at once, and what outlives a replay (the inputs,
        # the gradients, the loss scale) is allocated outside the graphs
        pool = next(iter(self.graphs.values()))[0].pool() if self.graphs else None
        with torch.cuda.graph(graph, pool=pool):
            plain = self._run(statics)
        torch._foreach_zero_([p.grad for p in self.step.params if p.grad is not None])
        return graph, statics, plain

    def replay(self, args) -> torch.Tensor:
        graph, statics, plain = self.graphs[pass_kind(args[1])]
        for s, a in zip(statics, args):
            if s is not None:
                s.copy_(a)
        graph.replay()
        return plain.clone()
