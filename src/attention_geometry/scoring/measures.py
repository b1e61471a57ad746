"""Symmetry and directionality of a bilinear form M (the paper's conventions).

M is W_qk in the nn.Linear layout (q = W_q x): logit_ij = x_i^T M x_j, rows on the query side, columns on
the key side. Both scores accept any leading batch dimensions ([..., d, d]: heads, layers) and accumulate
in float64 on the matrix's own device.

- symmetry s = (||M_s||_F^2 - ||M_n||_F^2) / ||M||_F^2 with M_s = (M + M^T)/2, M_n = (M - M^T)/2.
  Since ||M_s||^2 + ||M_n||^2 = ||M||^2 and ||M_s||^2 - ||M_n||^2 = <M, M^T>, s = sum(M * M^T) / sum(M * M).
- directionality d = (R - C) / (R + C): r_i, c_j the row and column L2 norms; R = sum_i max(r_i - t_r, 0),
  C = sum_j max(c_j - t_c, 0), t = mean + num_std * std (Bessel-corrected, as torch.std); d = 0 when
  R + C = 0. A few dominant key-side columns give d < 0. num_std must be a finite number >= 0.

Both scores are invariant to M's scale, so each matrix is first scaled by a power of two (exact in binary
floating point) that brings its largest entry into [0.5, 1): squares of entries near 1e±154, which float64
cannot hold, do not turn the scores into NaN or zero. A score that still comes out non-finite is an error.
"""

from __future__ import annotations

import math

import torch

from attention_geometry.errors import UserError

__all__ = ["symmetry", "directionality", "scores", "ScoreError", "check_num_std"]


class ScoreError(UserError, ValueError):
    """A matrix that has no defined score (zero, non-finite or not square)."""


# Matrices whose largest entry is 2**e with |e| <= this are scored as they are (d**2 squares of entries up to
# 2**400 sum to well below float64's 2**1024); others are scaled by 2**-e first.
_SAFE_EXPONENT = 400


def _check(M: torch.Tensor) -> torch.Tensor:
    if not isinstance(M, torch.Tensor):
        M = torch.as_tensor(M)
    if M.ndim < 2 or M.shape[-1] != M.shape[-2]:
        raise ScoreError(f"scores need square matrices [..., d, d], got shape {tuple(M.shape)}")
    M = M.to(torch.float64)
    # NaN and Inf propagate into the sum: only a non-finite sum needs the elementwise check
    if not bool(torch.isfinite(M.sum())) and not bool(torch.isfinite(M).all()):
        raise ScoreError("matrix contains NaN or Inf entries; its scores are undefined")
    peak = torch.linalg.vector_norm(M, float("inf"), dim=(-2, -1), keepdim=True)  # the largest |entry|
    if bool((peak == 0).any()):
        raise ScoreError("matrix is all zeros; its symmetry and directionality are undefined")
    _, exponent = torch.frexp(peak)  # peak = mantissa * 2**exponent, mantissa in [0.5, 1)
    if bool((exponent.abs() > _SAFE_EXPONENT).any()):  # else squares and sums cannot leave float64's range
        half = exponent // 2  # in two steps, so that neither factor leaves float64's range
        M = torch.ldexp(torch.ldexp(M, -half.to(M.dtype)), (half - exponent).to(M.dtype))
    return M


def check_num_std(num_std: float, what: str = "num_std") -> float:
    """num_std as a float if it is a finite number >= 0, else a ScoreError naming it `what`."""
    try:
        value = float(num_std)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and value >= 0):
        raise ScoreError(f"{what} must be a finite number >= 0, got {num_std!r}")
    return value


def _finite(values: torch.Tensor, what: str) -> torch.Tensor:
    if not bool(torch.isfinite(values).all()):
        raise ScoreError(f"the {what} score is not finite; the matrix is out of float64's range")
    return values


# Rows per block when summing M * M^T, so that no second d x d matrix is allocated for large d.
_BLOCK = 256


def _sq_norm(M: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(M, dim=(-2, -1)) ** 2


def _inner_with_transpose(M: torch.Tensor) -> torch.Tensor:
    """<M, M^T> = sum_ij M_ij M_ji, over blocks of rows."""
    d = M.shape[-1]
    out = torch.zeros(M.shape[:-2], dtype=M.dtype, device=M.device)
    for a in range(0, d, _BLOCK):
        out += (M[..., a : a + _BLOCK, :] * M[..., :, a : a + _BLOCK].transpose(-1, -2)).sum(dim=(-2, -1))
    return out


def symmetry(M: torch.Tensor) -> torch.Tensor:
    """Symmetry score in [-1, 1] of each [d, d] matrix in M (float64, shape M.shape[:-2])."""
    M = _check(M)
    # <M, M^T> / ||M||^2 lies in [-1, 1] (Cauchy-Schwarz); for an exactly (anti)symmetric matrix, as at a tied
    # init, float64 rounding lands up to a few 1e-16 outside it (84 of 200 random symmetric 64x64 matrices):
    # clamp that rounding, so that s = 1 exactly where W_qk is symmetric
    return _finite(torch.clamp(_inner_with_transpose(M) / _sq_norm(M), -1.0, 1.0), "symmetry")


def _excess(norms: torch.Tensor, num_std: float) -> torch.Tensor:
    if norms.shape[-1] < 2:  # one row and column: no spread to exceed (torch.std of one value warns, gives NaN)
        return torch.zeros(norms.shape[:-1], dtype=norms.dtype, device=norms.device)
    threshold = norms.mean(dim=-1, keepdim=True) + num_std * norms.std(dim=-1, keepdim=True)
    return torch.clamp(norms - threshold, min=0).sum(dim=-1)


def directionality(M: torch.Tensor, num_std: float = 2.0) -> torch.Tensor:
    """Directionality score in [-1, 1] of each [d, d] matrix in M (float64; negative = column dominance)."""
    num_std = check_num_std(num_std)
    M = _check(M)
    rows = torch.linalg.vector_norm(M, dim=-1)  # r_i = ||M[i, :]||, one per query-side direction
    cols = torch.linalg.vector_norm(M, dim=-2)  # c_j = ||M[:, j]||, one per key-side direction
    R = _excess(rows, num_std)
    C = _excess(cols, num_std)
    total = R + C
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return _finite(torch.where(total > 0, (R - C) / safe, torch.zeros_like(total)), "directionality")


def scores(M: torch.Tensor, num_std: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(symmetry, directionality) of each matrix in M, checked once."""
    M = _check(M)
    return symmetry(M), directionality(M, num_std)
