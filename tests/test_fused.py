"""The fused kernels (precision_audit.rope.fused, numba) against the numpy stages they replace, bit for bit (the
numpy stages are the reference: every figure is specified by them): the oracle over blocks of several schedules
(wrapped blocks included); the angle, rotation and pair errors of blocks that need no wrap, need one first in a
later block, or hold nan and inf; the narrow-cache estimate and its rounding for every eligible cache format,
with and without an attention factor; and whole audits, the kernels forced on against off."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from precision_audit.rope import fused
from precision_audit.rope.chunk_stats import _WRAP_T, _AngleJob, _angle_errors, _CacheJob, _Reduction, _rotation_errors
from precision_audit.rope.engine import _Work
from precision_audit.rope.oracle import _oracle_into, _split
from precision_audit.rope.schedules import RopeSchedule

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba not installed")


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
        with np.errstate(invalid="ignore", over="ignore"):  # as the engine calls it (w.fused off: numpy)
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
        w, wf = _Work(n, nf).rows(n), _Work(n, nf, fused=True).rows(n)
        w.ex[:] = wf.ex[:] = ex
        s_np, s_fu = (np.full((n, nf), 7.0) if keep else None for _ in range(2))
        with np.errstate(invalid="ignore", over="ignore"):
            nan_np = _rotation_errors(rot, w, red_np, job_np, s_np)
        nan_fu = _rotation_errors(rot, wf, red_fu, job_fu, s_fu)
        assert nan_np == nan_fu
        assert np.array_equal(_bits(red_np.max), _bits(red_fu.max))
        assert np.array_equal(_bits(red_np.sum), _bits(red_fu.sum))
        if with_job:
            assert job_np.wraps == job_fu.wraps
        if keep:
            assert np.array_equal(_bits(s_np), _bits(s_fu))


_NARROW = ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"]  # the cache formats on the narrow-cache path


def _angles(rng: np.random.Generator, n: int) -> np.ndarray:
    """Angles as the engine meets them: large ones, near multiples of pi/2 (a zero cos or sin, a sign change), tiny
    ones (the exact path below the smallest normal number), ties of the cache format (cos and sin of float32 angles
    rounded from cos and sin near a midpoint are found among many values)."""
    big = rng.uniform(-2.0**25, 2.0**25, n)
    near = np.round(rng.uniform(-1e5, 1e5, n)) * (math.pi / 2) + rng.normal(0, 1e-6, n)
    tiny = rng.uniform(-1e-6, 1e-6, n)
    f32 = rng.uniform(0, 2.0**20, n).astype(np.float32).astype(np.float64)
    return np.concatenate([big, near, tiny, f32, [0.0, -0.0, 2.0**-30]])


@pytest.mark.parametrize("cache", _NARROW)
@pytest.mark.parametrize("trig", ["float32", "float64"])
@pytest.mark.parametrize("scale", [1.0, 0.7071067811865476, 512.0])
def test_narrow_cache_same_bits(cache: str, trig: str, scale: float) -> None:
    from precision_audit.formats import get_format
    from precision_audit.rope import narrow_cache as nc

    ft, fc = get_format(trig), get_format(cache)
    assert nc.eligible(ft, fc, scale)
    a = _angles(np.random.default_rng(2), 5000)
    n = a.size
    got = {}
    for fuse in (False, True):
        est_buf = np.empty(n)
        scratch3 = tuple(np.full(n, 3.0) for _ in range(3))
        est = nc.estimate(a, est_buf, scratch3, False, fuse)
        assert est is not None
        out = np.full(2 * n, 5.0)
        nc.stored_into(est, ft, fc, scale, out, tuple(np.full(n, 3.0) for _ in range(4)), fuse)
        got[fuse] = (est.both.copy(), out)
    assert np.array_equal(got[False][0], got[True][0])  # the float32 estimates, bit for bit
    assert np.array_equal(_bits(got[False][1]), _bits(got[True][1]))  # the stored values
    # and both are the exactly computed values (the path's own guarantee, checked here on its inputs)
    want = np.concatenate([nc.exact_stored(a, "cos", ft, fc, scale), nc.exact_stored(a, "sin", ft, fc, scale)])
    assert np.array_equal(_bits(got[True][1]), _bits(want))


@pytest.mark.parametrize("scale", [1.0, 0.7071067811865476, 3.0])
def test_float32_cache_same_bits(scale: float) -> None:
    # the float32 cache's polynomial estimate, its flags and rounding in one kernel against the numpy stage, and
    # both against the engine's definition (float64 np.cos / np.sin, then every rounding)
    from precision_audit.formats import get_format
    from precision_audit.rope import float32_cache as fc
    from precision_audit.rope import narrow_cache as nc

    f32 = get_format("float32")
    a = _angles(np.random.default_rng(4), 5000)
    a = a[np.abs(a) < fc.MAX_ANGLE]
    n = a.size
    got = {}
    for fuse in (False, True):
        out = np.full(2 * n, 5.0)
        fc.stored_into(a, f32, f32, scale, out, tuple(np.full(n, 3.0) for _ in range(3)), fuse)
        got[fuse] = out
    assert np.array_equal(_bits(got[False]), _bits(got[True]))
    want = np.concatenate([nc.exact_stored(a, "cos", f32, f32, scale), nc.exact_stored(a, "sin", f32, f32, scale)])
    assert np.array_equal(_bits(got[True]), _bits(want))


@pytest.mark.parametrize("bad", [np.nan, np.inf, 2.0**26, -(2.0**27)])
def test_narrow_estimate_refuses_like_numpy(bad: float) -> None:
    from precision_audit.rope import narrow_cache as nc

    a = np.array([0.5, 1.0, bad, 2.0])
    for fuse in (False, True):
        assert nc.estimate(a, np.empty(4), tuple(np.empty(4) for _ in range(3)), False, fuse) is None


def _numpy_fold(cur: np.ndarray, prev: np.ndarray) -> tuple[np.ndarray, float]:
    from precision_audit.rope.pairs import fold_pairs

    x = np.empty_like(cur)
    np.subtract(cur, prev, out=x)
    with np.errstate(invalid="ignore"):
        mx, sm, _ = fold_pairs(x, np.empty_like(cur))
    return mx, sm


@pytest.mark.parametrize("shape", [(1, 2), (7, 3), (4096, 64), (1000, 5)])
@pytest.mark.parametrize("case", ["small", "wrap", "nan"])
def test_pair_fold_same_bits(shape: tuple[int, int], case: str) -> None:
    rng = np.random.default_rng(3)
    scale = 1e-3 if case == "small" else math.pi
    cur, prev = (np.clip(rng.uniform(-scale, scale, shape), -math.pi, math.pi) for _ in range(2))
    if case == "wrap":
        cur[0, 0], prev[0, 0] = math.pi, -math.pi + 1e-9
    if case == "nan":
        cur[-1, -1] = np.nan
    want_max, want_sum = _numpy_fold(cur, prev)
    x = np.full(shape, 9.0)
    got_max, got_sum, wrapped = fused.pair_fold(cur, prev, x)
    assert np.array_equal(_bits(got_max), _bits(want_max))
    assert float(got_sum).hex() == float(want_sum).hex()
    assert wrapped == (case != "small")


def _hexed(v: Any) -> Any:
    """A row's dict with every float as its hex form (nan equal to nan, -0.0 told from 0.0)."""
    if isinstance(v, float):
        return v.hex()
    if isinstance(v, dict):
        return {k: _hexed(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_hexed(x) for x in v]
    return v


def test_whole_audits_same_rows_with_the_kernels_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # every stage through the kernels (the size threshold at 0) against the numpy engine: the four presets in
    # two cache dtypes, stacks with a float32 cache and with the YaRN attention factor, pairwise errors at the
    # default distances (carried, recomputed and twin chunks), several lengths and workers
    from precision_audit.rope import audit, preset, stack

    calls: list[str] = []
    for name in ("oracle_into", "angle_errors", "rotation_errors", "estimate", "stored", "pair_fold", "f32_stored"):
        orig = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, _o=orig, _n=name: calls.append(_n) or _o(*a))
    s = RopeSchedule(head_dim=32, scaling="yarn", factor=8, original_max_position_embeddings=4096)
    recipes = [preset(n, d) for n in ("lowp", "lowp-inv-freq", "fp32", "fp64") for d in ("bf16", "fp16")]
    recipes += [stack(n, "bf16", s) for n in ("transformers", "sglang", "llama.cpp-cpu")]
    lengths = [1000, 9000, 40000]
    monkeypatch.setattr(fused, "MIN_ANGLES", 0)
    on = _hexed([r.to_dict() for r in audit(s, recipes, lengths, workers=2, chunk=4096)])
    assert set(calls) == {"oracle_into", "angle_errors", "rotation_errors", "estimate", "stored", "pair_fold", "f32_stored"}
    monkeypatch.setenv("PRECISION_AUDIT_FUSED", "0")
    calls.clear()
    off = _hexed([r.to_dict() for r in audit(s, recipes, lengths, workers=2, chunk=4096)])
    assert not calls
    assert on == off
