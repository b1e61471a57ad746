"""What each update of a run sees: the learning-rate schedule, the order of the training examples, and the
masked-LM corruption (the objectives' batches).

Data order: the global batch of update t (1-based) holds the global examples g = (t-1)*B ... t*B-1; example
g is block perm_e[g mod n] of the train split, perm_e a permutation seeded by (seed, epoch e = g // n).
MLM masks come from a generator seeded by (seed, 0, t, g), so any number of processes sees the same
examples and masks; held-out masks from (EVAL_SEED, 1, block index), the same for every run. Dropout (a run with
hidden or attention dropout > 0) draws from torch's generator seeded at each update by (seed, 3, t, process rank):
the same config and seed give the same dropout masks, and a resumed run draws what it would have drawn.
"""

from __future__ import annotations

import numpy as np

from attention_geometry.training.hyper import CAUSAL_OBJECTIVES, MASKED_OBJECTIVES, Hyper

__all__ = [
    "lr_at",
    "Order",
    "global_indices",
    "mask_tokens",
    "maskable",
    "corrupt",
    "make_batch",
    "n_loss_tokens",
    "mask_keys",
    "eval_keys",
    "dropout_seed",
    "EVAL_SEED",
    "IGNORE_INDEX",
    "NEVER_MASKED",
    "NEVER_MASKED_AUTHORS",
]

MASK_STREAM, EVAL_STREAM, ORDER_STREAM, DROPOUT_STREAM = 0, 1, 2, 3
EVAL_SEED = 20250214  # eval masks do not depend on the run's seed: one fixed held-out set for all runs
IGNORE_INDEX = -100  # the label of a position without loss
NEVER_MASKED = ("cls", "sep", "pad", "mask")  # special tokens never selected for masked LM ([UNK] can be)
# under the authors' recipe: every special token, as DataCollatorForLanguageModeling's special-tokens mask
NEVER_MASKED_AUTHORS = ("cls", "sep", "pad", "mask", "unk")


def lr_at(h: Hyper, step: int) -> float:
    """Learning rate of update `step` (1-based): linear warmup over warmup_steps to h.lr, then linear decay
    reaching lr / (max_steps - warmup_steps + 1) at the last update ('linear'), or flat ('constant').
    'trainer-linear': transformers' get_linear_schedule_with_warmup as the Trainer steps it, whose update t
    uses lr * lambda(t - 1), lambda(s) = s / warmup below warmup, else max(0, (max_steps - s) / (max_steps -
    warmup)): 0 at the first update, lr / (max_steps - warmup) at the last, 0 at max_steps (tested against the
    Trainer's own scheduler)."""
    if h.schedule == "trainer-linear":
        s = step - 1
        if s < h.warmup_steps:
            return h.lr * float(s) / float(max(1, h.warmup_steps))
        return h.lr * max(0.0, float(h.max_steps - s) / float(max(1, h.max_steps - h.warmup_steps)))
    if h.warmup_steps > 0 and step <= h.warmup_steps:
        return h.lr * step / h.warmup_steps
    if h.schedule == "constant":
        return h.lr
    return h.lr * (h.max_steps - step + 1) / (h.max_steps - h.warmup_steps + 1)


# -------------------------------------------------------------------------------------------- data


class Order:
    """Global example index -> train block index, through per-epoch seeded permutations (cached)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self._cache = n, seed, {}

    def perm(self, epoch: int) -> np.ndarray:
        p = self._cache.get(epoch)
        if p is None:
            p = np.random.default_rng([self.seed, ORDER_STREAM, epoch]).permutation(self.n)
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
    never = NEVER_MASKED_AUTHORS if h.recipe == "authors" else NEVER_MASKED
    return corrupt(ids, maskable(ids, special, never) & (u < h.mlm_probability), w, r, h, special)


def maskable(ids: np.ndarray, special: dict[str, int], never: tuple[str, ...] = NEVER_MASKED) -> np.ndarray:
    """Where masked LM may select a position: not one of the special tokens `never` (NEVER_MASKED)."""
    return ~np.isin(ids, [special[k] for k in never])


def corrupt(ids: np.ndarray, sel: np.ndarray, w: np.ndarray, r: np.ndarray, h: Hyper, special: dict[str, int]):
    """BERT's corruption of the selected positions `sel` given the draws (the one rule; mask_tokens and the
    update scores' held-out masks draw differently): w < mask_token_fraction -> [MASK], the next
    random_token_fraction of w -> the random id r, else unchanged. Returns (inputs, labels), labels = the
    original id at selected positions, -100 elsewhere."""
    to_mask = sel & (w < h.mask_token_fraction)
    to_rand = sel & (w >= h.mask_token_fraction) & (w < h.mask_token_fraction + h.random_token_fraction)
    inputs = np.where(to_mask, special["mask"], np.where(to_rand, r, ids))
    labels = np.where(sel, ids, IGNORE_INDEX)
    return inputs, labels


def make_batch(blocks: np.ndarray, objective: str, keys, h: Hyper, special: dict, vocab_size: int):
    """(inputs, labels) int64 numpy arrays of one batch of blocks: the masked-LM corruption for `encoder` and
    `decoder-paper`, the clean ids (pad ignored) for `decoder`."""
    ids = np.asarray(blocks, dtype=np.int64)
    if objective in MASKED_OBJECTIVES:
        return mask_tokens(ids, keys, h, special, vocab_size)
    return ids, np.where(ids == special["pad"], IGNORE_INDEX, ids)


def mask_keys(seed: int, step: int, g: np.ndarray) -> list[list[int]]:
    """The MLM generator keys of the training examples g of update `step`."""
    return [[seed, MASK_STREAM, step, int(x)] for x in g]


def dropout_seed(seed: int, step: int, rank: int = 0) -> int:
    """The seed of torch's generator for the dropout of update `step` on process `rank`: a 63-bit integer from
    the key (seed, DROPOUT_STREAM, step, rank)."""
    state = np.random.SeedSequence([int(seed), DROPOUT_STREAM, int(step), int(rank)]).generate_state(2, np.uint64)
    return int(state[0] >> np.uint64(1))


def eval_keys(idx: np.ndarray) -> list[list[int]]:
    """The MLM generator keys of held-out blocks idx (seed-free: the same held-out set for every run)."""
    return [[EVAL_SEED, EVAL_STREAM, int(i)] for i in idx]


def n_loss_tokens(labels: np.ndarray, objective: str) -> int:
    """The positions with a loss (a decoder predicts from the second position on)."""
    return int(((labels[:, 1:] if objective in CAUSAL_OBJECTIVES else labels) != IGNORE_INDEX).sum())
