"""Proof harness: a model's own attention probabilities against x_i^T M_h (x_j - x_k).

Independent of the extraction's head/layout logic: it only sees what the model computed (probabilities from
`output_attentions`, inputs captured by a pre-hook on the attention module) and the per-head matrices M_h
that the extraction returned. Softmax removes per-row constants, so for every query i and allowed keys j, k:

    log p_ij - log p_ik = c_h * x_i^T M_h (x_j - x_k)

with one positive scale c_h per head (1/sqrt(d_head) or whatever the model uses). The check fits c_h by least
squares over all (batch, i, j) against a reference key per row and requires a relative error below `tol`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch


@contextmanager
def capture_inputs(modules: Sequence[torch.nn.Module], name: str = "hidden_states") -> Iterator[list[torch.Tensor]]:
    """Record the input hidden states of each call of each module (first positional argument, or kwarg `name`)."""
    seen: list[torch.Tensor] = []

    def hook(mod, args, kwargs):
        x = args[0] if args else kwargs[name]
        seen.append(x.detach())

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in modules]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def bilinear_error(
    probs: torch.Tensor,
    x: torch.Tensor,
    M: torch.Tensor,
    x_key: torch.Tensor | None = None,
    min_prob: float = 1e-30,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per head: (relative error, fitted scale c_h).

    probs [B, H, T, S] softmax probabilities; x [B, T, d] query-side inputs; x_key [B, S, d] key-side inputs
    (default x); M [H, d, d]. Keys with probability <= min_prob (masked) are left out of each row.
    """
    probs = probs.detach().to(torch.float64)
    x = x.detach().to(torch.float64)
    xk = x if x_key is None else x_key.detach().to(torch.float64)
    M = M.detach().to(torch.float64)
    B, H, T, S = probs.shape
    assert M.shape[0] == H, f"{M.shape[0]} matrices for {H} heads"
    valid = probs > min_prob
    logp = torch.where(valid, probs.clamp_min(min_prob).log(), torch.zeros_like(probs))
    # bilinear logits x_i^T M_h x_j for every head: [B, H, T, S]
    bil = torch.einsum("btd,hde,bse->bhts", x, M, xk)
    # reference key per row: the first valid one
    ref = valid.to(torch.int64).argmax(dim=-1, keepdim=True)
    lhs = logp - logp.gather(-1, ref)
    rhs = bil - bil.gather(-1, ref)
    lhs = torch.where(valid, lhs, torch.zeros_like(lhs))
    rhs = torch.where(valid, rhs, torch.zeros_like(rhs))
    dims = (0, 2, 3)
    c = (lhs * rhs).sum(dims) / (rhs * rhs).sum(dims)
    resid = lhs - c.view(1, H, 1, 1) * rhs
    err = torch.linalg.vector_norm(resid, dim=dims) / torch.linalg.vector_norm(lhs, dim=dims)
    return err, c


def assert_bilinear(probs, x, M, x_key=None, tol: float = 1e-4, what: str = "") -> None:
    """Every head's log-probability differences match c_h x_i^T M_h (x_j - x_k), c_h > 0, rel. error < tol."""
    err, c = bilinear_error(probs, x, M, x_key)
    assert bool(torch.isfinite(err).all()), f"{what}: non-finite error {err.tolist()}"
    assert bool((c > 0).all()), f"{what}: scale per head must be positive, got {c.tolist()}"
    assert bool((err < tol).all()), f"{what}: relative error per head {err.tolist()} (tol {tol})"
