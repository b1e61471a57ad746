"""Scores against independent computations (numpy, explicit loops, closed forms)."""

import numpy as np
import pytest
import torch

from attention_geometry.errors import UserError
from attention_geometry.scoring.measures import ScoreError, directionality, scores, symmetry


def np_symmetry(M):
    Ms = (M + M.T) / 2
    Mn = (M - M.T) / 2
    return (np.linalg.norm(Ms) ** 2 - np.linalg.norm(Mn) ** 2) / np.linalg.norm(M) ** 2


def np_directionality(M, num_std=2.0):
    r = np.array([np.sqrt(sum(x * x for x in row)) for row in M])
    c = np.array([np.sqrt(sum(x * x for x in col)) for col in M.T])
    R = sum(max(v - (r.mean() + num_std * r.std(ddof=1)), 0.0) for v in r)
    C = sum(max(v - (c.mean() + num_std * c.std(ddof=1)), 0.0) for v in c)
    return 0.0 if R + C == 0 else (R - C) / (R + C)


def test_closed_forms():
    S = torch.randn(16, 16, dtype=torch.float64)
    assert symmetry(S + S.T).item() == pytest.approx(1.0, abs=1e-12)
    assert symmetry(S - S.T).item() == pytest.approx(-1.0, abs=1e-12)
    # a rotation by 90 degrees per 2x2 block is antisymmetric
    assert symmetry(torch.tensor([[0.0, 1.0], [-1.0, 0.0]])).item() == pytest.approx(-1.0)
    assert symmetry(torch.eye(5)).item() == pytest.approx(1.0)


def test_against_numpy_random_batches():
    rng = np.random.default_rng(0)
    for d, num_std in [(8, 2.0), (33, 1.0), (64, 2.5)]:
        Ms = rng.standard_normal((3, 4, d, d))
        Ms[0, 0, :, 3] *= 25  # one dominant key-side column -> strongly negative directionality
        Ms[1, 2, 5, :] *= 25  # one dominant query-side row -> positive
        t = torch.from_numpy(Ms)
        s, dirn = scores(t, num_std=num_std)
        assert s.shape == (3, 4) and dirn.shape == (3, 4)
        for a in range(3):
            for b in range(4):
                assert s[a, b].item() == pytest.approx(np_symmetry(Ms[a, b]), rel=1e-10, abs=1e-12)
                assert dirn[a, b].item() == pytest.approx(np_directionality(Ms[a, b], num_std), rel=1e-10, abs=1e-12)
        assert dirn[0, 0].item() < -0.2
        assert dirn[1, 2].item() > 0.2


def test_sign_convention_transpose_flips_directionality():
    M = torch.randn(20, 20, dtype=torch.float64)
    M[:, 0] *= 30
    assert directionality(M).item() < 0
    assert directionality(M.T).item() == pytest.approx(-directionality(M).item())
    assert symmetry(M.T).item() == pytest.approx(symmetry(M).item())


def test_directionality_zero_when_no_excess():
    # all rows and columns of equal norm: no norm exceeds mean + 2 std
    M = torch.ones(6, 6, dtype=torch.float64)
    assert directionality(M).item() == 0.0


def test_float32_input_accumulates_in_float64():
    M = torch.randn(32, 32)
    assert symmetry(M).dtype == torch.float64
    assert symmetry(M).item() == pytest.approx(np_symmetry(M.double().numpy()), rel=1e-12)


@pytest.mark.parametrize(
    "bad, msg",
    [
        (torch.zeros(4, 4), "zeros"),
        (torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), "NaN"),
        (torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), "NaN or Inf"),
        (torch.ones(3, 4), "square"),
    ],
)
def test_bad_matrices_raise_clear_errors(bad, msg):
    with pytest.raises(ScoreError, match=msg):
        scores(bad)
    assert issubclass(ScoreError, UserError)


def test_large_matrix_blocked_sum_matches_numpy():
    # d = 600 crosses several row blocks (with a remainder) in the blocked <M, M^T>
    rng = np.random.default_rng(1)
    A = rng.standard_normal((600, 600))
    M = A + 0.3 * A.T
    M[:, 7] *= 10
    s, d = scores(torch.from_numpy(M))
    assert s.item() == pytest.approx(np_symmetry(M), rel=1e-12)
    assert d.item() == pytest.approx(np_directionality(M), rel=1e-10)


def test_exactly_symmetric_and_antisymmetric_matrices_stay_within_minus_one_and_one():
    # float64 rounding used to put <M, M^T> / ||M||^2 a few 1e-16 outside [-1, 1] for such matrices (a tied init)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, 64, 64, generator=g, dtype=torch.float64)
    sym, anti = a + a.transpose(-1, -2), a - a.transpose(-1, -2)
    s, n = symmetry(sym), symmetry(anti)
    assert (s <= 1).all() and (s > 1 - 1e-14).all() and (s == 1).sum() > 84  # 84 were above 1 before
    assert (n >= -1).all() and (n < -1 + 1e-14).all()
    # an independent computation agrees with the clamped score where it is inside the bounds
    m = a.numpy()
    ref = np.einsum("bij,bji->b", m, m) / np.einsum("bij,bij->b", m, m)
    assert np.allclose(symmetry(a).numpy(), ref, atol=1e-14)
