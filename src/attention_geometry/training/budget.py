"""When the trainer stops before its last step: a wall-clock budget (`train --time-limit MINUTES`) and SIGTERM
(what SLURM sends before it kills a job at its time limit or on preemption, SIGKILL following after KillWait,
30 s by default). Either way the loop stops between two updates, writes its resumable state as a periodic state
save does, and the command exits with EXIT_STOPPED, so that a requeued job (rule train_model's `retries`)
running the same command resumes from that state. Torch-free: the CLI imports it before torch."""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["EXIT_STOPPED", "Budget", "StopVote", "TermSignal", "is_process_command", "out_of_time"]

EXIT_STOPPED = 75  # os.EX_TEMPFAIL: "try again later"; the state is saved and the same command resumes


def out_of_time(elapsed: float, limit: float | None, longest_step: float, longest_save: float) -> bool:
    """Whether to stop now, before the next update: True when the next update (as long as the longest one so
    far, evaluation and checkpoints included) and the state save after it (as long as the longest so far)
    could end past `limit` seconds. No limit: never."""
    return limit is not None and elapsed + longest_step + longest_save > limit


@dataclass
class Budget:
    """The wall-clock budget of one trainer process: `limit` seconds (None: none) counted from `started`
    (a `clock()` value: the CLI's start, so that imports and loading count too); it keeps the longest
    update and the longest state save seen, which `out_of_time` reserves."""

    limit: float | None = None
    started: float | None = None
    clock: Callable[[], float] = time.monotonic
    longest_step: float = 0.0
    longest_save: float = 0.0
    _mark: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.limit is not None and not self.limit > 0:
            raise ValueError(f"time limit must be above 0 seconds, got {self.limit}")
        if self.started is None:
            self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def start_step(self) -> None:
        self._mark = self.clock()

    def end_step(self) -> None:
        """The update since start_step() (with its evaluation, loss flush and checkpoints) is done."""
        if self._mark is not None:
            self.longest_step = max(self.longest_step, self.clock() - self._mark)
            self._mark = None

    def saved(self, seconds: float) -> None:
        """A state save took `seconds`."""
        self.longest_save = max(self.longest_save, seconds)

    def exhausted(self) -> bool:
        """out_of_time now. Only once an update has been timed: a job always trains at least one update,
        so a limit shorter than the start-up still makes progress from one requeue to the next."""
        return self.longest_step > 0 and out_of_time(self.elapsed(), self.limit, self.longest_step, self.longest_save)

    def describe(self) -> str:
        return f"time limit ({self.limit / 60:.4g} min; {self.elapsed() / 60:.4g} min elapsed)"


class TermSignal:
    """Within `with TermSignal() as term:`, SIGTERM sets `term.received` instead of ending the process (the loop
    then stops between updates); the previous handler is restored on exit. A SIGTERM that an enclosing
    TermSignal received before this one was entered counts as received here too. With `keep`, the handler stays
    after the block, to the end of the process: the `train` command holds it from its start, so that a SIGTERM
    after the run finished (while the process prints its summary and exits) leaves the exit status what the
    run earned (0 for a finished run) instead of 143. Outside the main thread (where Python cannot set
    handlers) it does nothing."""

    def __init__(self, keep: bool = False) -> None:
        self.received = False
        self.keep = keep
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.received = True

    def __enter__(self) -> TermSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            outer = getattr(self._previous, "__self__", None)
            if isinstance(outer, TermSignal) and outer.received:
                self.received = True
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None and not self.keep:
            signal.signal(signal.SIGTERM, self._previous)
        self._previous = None


def is_process_command(name: str) -> bool:
    """Whether subcommand `name` is this process's own command line (`python -m attention_geometry NAME ...`,
    `attention-geometry NAME ...`, under torchrun too), not a call of the CLI inside another program (a test):
    only then may it hold a signal handler to the end of the process."""
    return sys.argv[1:2] == [name]


class StopVote:
    """Whether the loop stops before its next update: SIGTERM received (`term`) or the time budget spent (`budget`),
    by any process (under DDP, `dist`, one all-reduce per update over a CPU group, so all stop after the same step).
    `why()`: NO, TIME or SIGNAL."""

    NO, TIME, SIGNAL = 0, 1, 2

    def __init__(self, budget: Budget, term: TermSignal, dist=None):
        self.budget, self.term, self.dist = budget, term, dist
        self.group = None
        if dist is not None and dist.get_backend() != "gloo":  # nccl: a CPU flag needs a gloo group
            self.group = dist.new_group(backend="gloo")

    def why(self) -> int:
        local = self.SIGNAL if self.term.received else self.TIME if self.budget.exhausted() else self.NO
        if self.dist is None:
            return local
        import torch

        flag = torch.tensor([local], dtype=torch.int32)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX, group=self.group)
        return int(flag.item())
