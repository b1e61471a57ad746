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


# ------------------------------------------------------------------------------------------ the OV circuit


def ov_error(probs: torch.Tensor, x: torch.Tensor, M: torch.Tensor, out: torch.Tensor) -> float:
    """How far a layer's attention output before any residual is from sum_h P_h X M_h^T plus a constant row.

    probs [B, H, T, S] the model's attention probabilities; x [B, S, d] the inputs of its value projection; M
    [H, d, d] per-head OV matrices (rows: output side); out [B, T, d] what the output projection returned. Every
    row of P_h sums to 1, so the biases (sum_h W_o,h b_v,g(h) + b_o) add one constant row: the residual
    out - sum_h P_h X M_h^T must be the same for every token. Returns its spread over tokens relative to the
    spread of `out` itself (both centred over batch and position); where `out` has no spread, its absolute value."""
    p, xs, Ms, y = (t.detach().to(torch.float64) for t in (probs, x, M, out))
    assert Ms.shape[0] == p.shape[1], f"{Ms.shape[0]} matrices for {p.shape[1]} heads"
    pred = torch.einsum("bhts,bsd,hed->bte", p, xs, Ms)
    resid = y - pred
    spread = resid - resid.mean(dim=(0, 1), keepdim=True)
    scale = torch.linalg.vector_norm(y - y.mean(dim=(0, 1), keepdim=True))
    if scale == 0:  # every token got the same output (inputs all equal: DETR's first decoder layer sees zeros)
        return float(torch.linalg.vector_norm(spread))
    return float(torch.linalg.vector_norm(spread) / scale)


def assert_ov(probs, x, M, out, what: str = "") -> None:
    """The layer's attention output equals sum_h P_h X M_h^T + a constant row. Where the model's probability rows
    sum to 1 in float64 (within 1e-12) the error must be below 1e-8 (float64 models give ~1e-15). A model that
    takes its softmax in float32 (GPT-NeoX, Phi) has rows that sum to 1 within ~1e-7 only, so its bias term is not
    quite constant: there the bound is the 1e-4 of the W_qk proof, still two orders below what a wrong matrix gives
    (> 1e-2)."""
    rows = probs.detach().to(torch.float64).sum(-1)
    exact = bool(((rows - 1).abs() < 1e-12).all())
    tol = 1e-8 if exact else 1e-4
    err = ov_error(probs, x, M, out)
    assert err < tol, f"{what}: OV relative error {err} (tol {tol}; rows of P sum to 1 within 1e-12: {exact})"
