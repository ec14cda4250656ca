"""The fused kernels (precision_audit.rope.fused, numba) against the numpy stages they replace, bit for bit: the
oracle over whole 1M-position passes of several schedules (wrapped blocks included), and the angle errors of
blocks that need no wrap, need one first in a later block, or hold nan and inf."""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import pytest

from precision_audit.rope import fused
from precision_audit.rope.chunk_stats import _WRAP_T, _AngleJob, _angle_errors, _CacheJob, _Reduction, _rotation_errors
from precision_audit.rope.engine import _Work
from precision_audit.rope.oracle import _oracle_into, _split
from precision_audit.rope.schedules import RopeSchedule

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba not installed")


@contextlib.contextmanager
def _numpy_stages():
    """The engine's numpy stages (the fused kernels off), the reference."""
    old = os.environ.get("PRECISION_AUDIT_FUSED")
    os.environ["PRECISION_AUDIT_FUSED"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["PRECISION_AUDIT_FUSED"]
        else:
            os.environ["PRECISION_AUDIT_FUSED"] = old


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint64)


@pytest.mark.parametrize("base, head_dim, start", [(10000.0, 128, 0), (500000.0, 128, 2**20), (1e6, 64, 2**26 - 2**14)])
def test_oracle_same_bits(base: float, head_dim: int, start: int) -> None:
    hi, lo = _split(RopeSchedule(head_dim=head_dim, base=base).inv_freq())
    nf = hi.size
    rows = 2**18 // nf
    work = _Work(rows, nf)
    p1, p2, ex = (np.empty((rows, nf)) for _ in range(3))
    for a in range(start, start + 2**14 * 8, rows):
        m = np.arange(a, a + rows, dtype=np.float64)
        w = work.rows(rows)
        _oracle_into(m, hi, lo, w)
        fused.oracle_into(m, hi, lo, p1, p2, ex)
        for got, want in ((p1, w.p1), (p2, w.p2), (ex, w.ex)):
            assert np.array_equal(_bits(got), _bits(want))


def _numpy_angle_errors(blocks, p1s, p2s):
    job = _AngleJob.__new__(_AngleJob)
    job.wraps, job.ang = False, _Reduction()
    out = []
    for angle, p1, p2 in zip(blocks, p1s, p2s):
        n, nf = angle.shape
        w = _Work(n, nf).rows(n)
        w.p1[:], w.p2[:] = p1, p2
        with np.errstate(invalid="ignore", over="ignore"), _numpy_stages():  # as the engine calls it
            _angle_errors(angle, w, job)
        out.append((job.ang.max.copy(), job.ang.sum.copy(), job.wraps))
    return out


def test_angle_errors_same_bits() -> None:
    rng = np.random.default_rng(0)
    n, nf = 257, 8
    p1s = [rng.uniform(-1e4, 1e4, (n, nf)) for _ in range(4)]
    p2s = [rng.uniform(-1e-12, 1e-12, (n, nf)) for _ in range(4)]
    blocks = [p + q + rng.normal(0, 1e-3, (n, nf)) for p, q in zip(p1s, p2s)]
    blocks[1][5, 3] += 4.0  # a wrap needed from block 1 on
    blocks[2][7, 0] = np.nan
    blocks[3][9, 1] = np.inf
    blocks[3][0, 0] = -0.0
    want = _numpy_angle_errors(blocks, p1s, p2s)
    wraps, acc, gmax = False, None, None
    for (angle, p1, p2), (wmax, wsum, wwraps) in zip(zip(blocks, p1s, p2s), want):
        bmax, acc, wraps = fused.angle_errors(angle, p1, p2, wraps, _WRAP_T, acc)
        gmax = bmax if gmax is None else np.maximum(gmax, bmax)
        assert wraps == wwraps
        assert np.array_equal(_bits(gmax), _bits(wmax))
        assert np.array_equal(_bits(acc), _bits(wsum))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("with_job", [False, True])
def test_rotation_errors_same_bits(keep: bool, with_job: bool) -> None:
    rng = np.random.default_rng(1)
    n, nf = 129, 6
    exs = [rng.uniform(-math.pi, math.pi, (n, nf)) for _ in range(4)]
    rots = [np.arctan2(np.sin(e + rng.normal(0, 1e-3, e.shape)), np.cos(e)) for e in exs]
    rots[1][3, 2] = -rots[1][3, 2] if abs(exs[1][3, 2]) > 3.1 else math.pi - 1e-3  # near the branch cut
    exs[1][3, 2] = -math.pi + 1e-4
    rots[2][4, 4] = np.nan
    rots[3][0, 0] = exs[3][0, 0]  # a zero error
    job_np = _CacheJob.__new__(_CacheJob) if with_job else None
    job_fu = _CacheJob.__new__(_CacheJob) if with_job else None
    for j in (job_np, job_fu):
        if j is not None:
            j.wraps = False
    red_np, red_fu = _Reduction(), _Reduction()
    for rot, ex in zip(rots, exs):
        w = _Work(n, nf).rows(n)
        w.ex[:] = ex
        s_np, s_fu = (np.full((n, nf), 7.0) if keep else None for _ in range(2))
        with np.errstate(invalid="ignore", over="ignore"), _numpy_stages():
            nan_np = _rotation_errors(rot, w, red_np, job_np, s_np)
        nan_fu = _rotation_errors(rot, w, red_fu, job_fu, s_fu)
        assert nan_np == nan_fu
        assert np.array_equal(_bits(red_np.max), _bits(red_fu.max))
        assert np.array_equal(_bits(red_np.sum), _bits(red_fu.sum))
        if with_job:
            assert job_np.wraps == job_fu.wraps
        if keep:
            assert np.array_equal(_bits(s_np), _bits(s_fu))
