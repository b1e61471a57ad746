"""Watch the structures emerge in anyone's training: per-layer symmetry and directionality in a Trainer's logs.

`SymmetryCallback(every=N)` is a transformers `TrainerCallback`. Every N optimizer steps it scores the model's
W_qk = sum_h W_q,h^T W_k,g(h) of every self-attention layer (the scorer's own layer_matrices and measures, so every
supported family, grouped-query included) and adds the values to the logs the Trainer writes at that step, so
they reach whatever `report_to` names (TensorBoard, Weights & Biases, MLflow, ...) and `trainer.state.log_history`:

    symmetry/{component}/layer_{i:02d}, directionality/{component}/layer_{i:02d}   (one per applied layer)
    symmetry/{component}/median, directionality/{component}/median                (over the stack's layers)

(component: encoder or decoder; the TensorBoard tags get the Trainer's `train/` prefix). `symmetry_logs(model)`
returns the same dict for any model, outside a Trainer. With `matrix="ov"` (or "both") they score the OV circuit
M_ov = sum_h W_o,h W_v,g(h) too (docs/contracts.md), under `symmetry_ov/...` and `directionality_ov/...` (the
authors' W&B callback logs its W_v W_o beside W_qk; docs/paper-code.md says how theirs differs).

Cost: it reads only the q/k weights (no forward pass, no data) and computes one d x d matrix per layer in float64
on the weights' device; benchmarks/callback_cost.py times one call on BERT-base shapes. On the main process only,
so under DDP each call costs one process that time; sharded weights (FSDP, DeepSpeed ZeRO-3) are not gathered.
A model with LoRA adapters (peft) is scored as its layers compute: each adapted weight with its active adapters'
deltas added (weights.loading, _merge_adapters), the model itself unchanged.

The Trainer hands its logs to the callbacks in list order and the reporting callbacks come before the ones a user
adds, so the callback moves itself to the front of the Trainer's callback list when the Trainer starts it
(on_init_end, on_train_begin); its values are then in the logs before any reporter sees them.
"""

from __future__ import annotations

import inspect
import math
import statistics
import warnings
from typing import Any

from transformers import TrainerCallback

from attention_geometry.errors import UserError
from attention_geometry.scoring.measures import ScoreError, check_num_std, scores
from attention_geometry.scoring.scorer import layer_matrices, matrices

__all__ = ["SymmetryCallback", "symmetry_logs"]


def _unwrap(model: Any) -> Any:
    while hasattr(model, "module") and not hasattr(model, "config"):  # DDP and similar wrappers
        model = model.module
    return model


# the key prefix of each matrix's values: W_qk's are the keys the callback always logged
_PREFIX = {"qk": "", "ov": "_ov"}


def _say(message: str) -> None:
    """A warning that never ends the training it is about: warnings.warn where the filters let it pass, and
    transformers' logger where a filter turns warnings into errors (`-W error`, pytest's `filterwarnings = error`)."""
    try:
        warnings.warn(message, stacklevel=4)
    except Warning:
        from transformers.utils import logging as hf_logging

        hf_logging.get_logger("attention_geometry.tools.callback").warning(message)


def symmetry_logs(
    model: Any, num_std: float = 2.0, device: Any = None, undefined: str = "raise", matrix: Any = "qk"
) -> dict[str, float]:
    """Per applied self-attention layer, s and d of W_qk (docs/contracts.md), and their medians per stack, keyed
    `symmetry/{component}/layer_{i:02d}`, `.../median` (and the same for directionality). `device`: where the
    float64 matrices are computed (default: the device of the model's weights). `undefined`: what a layer whose
    scores are undefined gives (a W_qk of zeros): "raise" (a ScoreError naming it) or "nan" (NaN values for that
    layer; the medians are over the other layers). Weights that are not finite (NaN or Inf after a divergence) are
    a UserError naming them either way (SymmetryCallback then turns itself off with one warning). `matrix`: "qk"
    (the default), "ov" (the OV circuit, keyed `symmetry_ov/...`, `directionality_ov/...`) or "both"."""
    if undefined not in ("raise", "nan"):
        raise UserError(f"symmetry_logs: undefined must be 'raise' or 'nan', got {undefined!r}")
    asked = matrices(matrix)
    model = _unwrap(model)
    meta = next((n for n, p in model.named_parameters() if p.is_meta), None)
    if meta is not None:
        raise UserError(
            f"symmetry_logs: {meta} is on the meta device (a model built without weights): load or materialize its "
            "weights before scoring it"
        )
    if device is None:
        device = next(model.parameters()).device
    out: dict[str, float] = {}
    per_stack: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for lm in layer_matrices(model, device=device, matrix=asked):
        ss, ds = per_stack.setdefault((_PREFIX[lm.matrix], lm.component), ([], []))
        try:
            s, d = (float(x) for x in scores(lm.M, num_std))
            ss.append(s)
            ds.append(d)
        except ScoreError as exc:
            if undefined == "raise":
                raise ScoreError(f"{lm.component} layer {lm.layer}{' OV' * (lm.matrix == 'ov')}: {exc}") from None
            s = d = math.nan
        p = _PREFIX[lm.matrix]
        out[f"symmetry{p}/{lm.component}/layer_{lm.layer:02d}"] = s
        out[f"directionality{p}/{lm.component}/layer_{lm.layer:02d}"] = d
    for (p, component), (ss, ds) in per_stack.items():
        out[f"symmetry{p}/{component}/median"] = statistics.median(ss) if ss else math.nan
        out[f"directionality{p}/{component}/median"] = statistics.median(ds) if ds else math.nan
    return out


class SymmetryCallback(TrainerCallback):
    """Adds `symmetry_logs(model)` to the Trainer's logs every `every` optimizer steps (and at the last step).

    every: steps between two measurements (a log is forced at those steps, whatever `logging_steps` says);
    num_std: directionality's threshold (docs/contracts.md; 2 as in the paper); device: where the matrices are
    computed (default: the weights' device); matrix: "qk" (W_qk, the default), "ov" (the OV circuit) or "both"
    (symmetry_logs)."""

    def __init__(self, every: int = 100, num_std: float = 2.0, device: Any = None, matrix: Any = "qk"):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise UserError(f"SymmetryCallback: every must be an integer >= 1, got {every!r}")
        self.every = every
        self.num_std = check_num_std(num_std)
        self.device = device
        self.matrix = matrices(matrix)
        self._pending: dict[str, float] | None = None
        self._placed = False
        self.off: str | None = None  # why it turned itself off (a model it cannot score); None while it measures

    # ----------------------------------------------------------------------------------- placement
    def _go_first(self) -> None:
        """Move this callback to the front of the calling CallbackHandler's list (see the module docstring)."""
        if self._placed:
            return
        frame = inspect.currentframe()
        try:
            for _ in range(6):
                frame = frame.f_back if frame is not None else None
                handler = frame.f_locals.get("self") if frame is not None else None
                callbacks = getattr(handler, "callbacks", None)
                if isinstance(callbacks, list) and any(c is self for c in callbacks):
                    callbacks.remove(self)
                    callbacks.insert(0, self)
                    self._placed = True
                    return
        finally:
            del frame
        _say(
            "SymmetryCallback: could not find the Trainer's callback list; reporters listed before it will miss "
            "its values (add it with trainer.callback_handler.callbacks.insert(0, callback))"
        )
        self._placed = True

    def on_init_end(self, args, state, control, **kwargs):
        self._go_first()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._go_first()
        # a monitor never ends the training it watches: a model it cannot score (an unsupported family, weights it
        # cannot read) is found here, with one warning, and the callback turns itself off
        if model is not None and state.is_world_process_zero:
            try:
                symmetry_logs(model, self.num_std, self.device, undefined="nan", matrix=self.matrix)
            except Exception as exc:  # noqa: BLE001 - whatever the reason, training goes on without it
                self._turn_off(f"{type(exc).__name__}: {exc}")

    def _turn_off(self, why: str) -> None:
        self.off = " ".join(why.split())
        _say(f"SymmetryCallback: cannot score this model ({self.off}); it turns itself off and training goes on")

    # ------------------------------------------------------------------------------------ measuring
    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if self.off or model is None or not (step % self.every == 0 or step == state.max_steps):
            return control
        if state.is_world_process_zero:
            try:  # an undefined layer (zero W_qk, NaN weights) logs NaN; anything else turns the callback off
                self._pending = symmetry_logs(model, self.num_std, self.device, undefined="nan", matrix=self.matrix)
            except Exception as exc:  # noqa: BLE001 - a monitor never ends the training it watches
                self._turn_off(f"{type(exc).__name__}: {exc}")
                return control
        control.should_log = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is None or logs is None:
            return control
        logs.update(self._pending)
        # the Trainer appended a copy of these logs to log_history before calling the callbacks
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(self._pending)
        self._pending = None
        return control
