"""The held-out loss of a run at its evaluation steps: the token mean over the first `eval_blocks` held-out blocks,
their masks fixed by block index (seed-free, so every run and step sees the same ones); for an image classifier the
mean cross-entropy and the accuracy (training/vit.py)."""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from attention_geometry.training.batches import eval_keys, make_batch, n_loss_tokens
from attention_geometry.training.hyper import Hyper
from attention_geometry.training.models import lm_loss
from attention_geometry.training.vit import evaluate_images

__all__ = ["evaluate", "held_out_at"]

log = logging.getLogger("attention_geometry.training")


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


def held_out_at(trainer, step: int) -> dict[str, float] | None:
    """The held-out columns at `step` on process 0 when `step` is an evaluation step ({"eval_loss"}, for an image
    classifier also "eval_accuracy"), else None. `trainer`: loop.Trainer, built."""
    run = trainer
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
