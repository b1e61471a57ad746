"""loss.csv as the loop fills it: the per-update losses of a process pending until a flush, one row at every row
step (the mean train loss of the updates since the previous row), the held-out columns at evaluation steps, and the
stop with one line on a loss that is not finite. What a row holds: formats/columns.py (LOSS_COLUMNS); written by
training/snapshots.write_loss_rows."""

from __future__ import annotations

import math

import torch

from attention_geometry.errors import UserError
from attention_geometry.formats.columns import IMAGE_LOSS_COLUMNS, LOSS_COLUMNS
from attention_geometry.training.snapshots import write_loss_rows

__all__ = ["LossLog", "fmt", "fmt_held_out"]


def fmt(x) -> str:
    """A loss.csv number: repr of the float ('' for None)."""
    return "" if x is None else repr(float(x))


def fmt_held_out(ev: dict[str, float]) -> dict[str, str]:
    """The held-out columns of a loss.csv row (eval_loss; an image classifier's eval_accuracy too)."""
    return {k: fmt(v) for k, v in ev.items()}


class LossLog:
    """loss.csv of a run (`trainer`: loop.Trainer): the per-update losses of this process pending until a flush,
    turned into one row at every row step (the mean train loss of the updates since the previous row), one
    all-reduce per flush."""

    def __init__(self, trainer, rows: list[dict], row_steps: set[int], window: list[float] | None = None):
        self.run, self.rows, self.row_steps = trainer, rows, row_steps
        self.ident = trainer.resolved.labels()
        self.columns = IMAGE_LOSS_COLUMNS if trainer.image else LOSS_COLUMNS
        self.blank = {c: "" for c in self.columns if c.startswith("eval_")}  # a row without evaluation
        self.pending: list[tuple] = []  # (step, token-summed loss of this process, lr, global token count)
        # per-update mean losses since the last row (a state saved inside a window carries it: save_state)
        self.window: list[float] = list(window or [])

    def write(self) -> None:
        if self.run.rank == 0:
            write_loss_rows(self.run.out, self.rows, self.columns)

    def add_eval0(self, ev: dict[str, float]) -> None:
        self.rows.append({**self.ident, "step": 0, "train_loss": "", **fmt_held_out(ev), "learning_rate": fmt(0.0)})
        self.write()

    def flush(self, eval_step: int, ev: dict[str, float] | None) -> None:
        if not self.pending:
            return
        sums = torch.stack([p[1] for p in self.pending]).double()
        if self.run.dist is not None:
            self.run.dist.all_reduce(sums)
        counts = [p[3] for p in self.pending]
        if isinstance(counts[0], torch.Tensor):  # the device source counts the labelled positions on the device
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
                            "train_loss": fmt(sum(self.window) / len(self.window)),
                            **(fmt_held_out(ev) if s == eval_step and ev is not None else self.blank),
                            "learning_rate": fmt(lr),
                        }
                    )
                self.window.clear()
        self.pending = []
        self.write()
