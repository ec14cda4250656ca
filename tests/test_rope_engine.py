"""The chunked, threaded RoPE audit engine against a straightforward computation.

The reference below evaluates each recipe stage with the public ``round_to``
on whole arrays (no buffers, no skipped roundings, no conditional wraps), the
oracle with ``exact_angles`` / the two-term product, and reduces chunk by chunk
in position order (the engine's documented summation order).  Rows must agree
to the bit, and must not depend on the number of worker threads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from precision_audit.formats import round_to
from precision_audit.rope import STAGES, Recipe, RopeSchedule, audit, preset, stored_inv_freq, wrap

TWO_PI = float.fromhex("0x1.921fb54442d18p+2")


def _reference(schedule: RopeSchedule, recipe: Recipe, lengths: list[int], chunk: int) -> list[dict]:
    theta = schedule.inv_freq()
    nf = theta.size
    scale = schedule.cos_sin_scale
    # two-term product of m and theta (Veltkamp split), Cody-Waite reduction
    t = theta * 134217729.0
    hi = t - (t - theta)
    lo = theta - hi
    c1 = float.fromhex("0x1.921fb5p+2")
    c2 = TWO_PI - c1
    c3 = float.fromhex("0x1.1a62633145c07p-52")
    ang_max, ang_sum, rot_max, rot_sum = (np.zeros(nf) for _ in range(4))
    collisions, prev = 0, None
    rows, start = [], 0
    for L in sorted(lengths):
        while start < L:
            stop = min(L, start + chunk)
            m = np.arange(start, stop, dtype=np.float64)
            p1, p2 = m[:, None] * hi, m[:, None] * lo
            k = np.rint((p1 + p2) / TWO_PI)
            exact = wrap(((p1 - k * c1) - k * c2) + (p2 - k * c3))
            pos = round_to(m, recipe.positions)
            # the recipe's own inv_freq (the formula in its format: tested against transformers in
            # test_schedules.py); the attention factor, a float32 scalar (float64 for a float64 trig
            # stage), multiplies cos/sin in the trig format before the cast to the cache
            inv = round_to(stored_inv_freq(recipe, schedule), recipe.inv_freq)
            k = float(round_to(scale, "float64" if recipe.trig == "float64" else "float32")[()])
            with np.errstate(invalid="ignore", over="ignore"):
                angle = round_to(round_to(pos[:, None] * inv[None, :], recipe.angle), recipe.trig)
                cos = round_to(round_to(round_to(np.cos(angle), recipe.trig) * k, recipe.trig), recipe.cache)
                sin = round_to(round_to(round_to(np.sin(angle), recipe.trig) * k, recipe.trig), recipe.cache)
                ang = np.abs(wrap((angle - p1) - p2))
                rot = np.abs(wrap(np.arctan2(sin, cos) - exact))
            ang[~np.isfinite(ang)] = math.pi
            rot[~np.isfinite(rot)] = math.pi
            ang_max, rot_max = np.maximum(ang_max, ang.max(axis=0)), np.maximum(rot_max, rot.max(axis=0))
            ang_sum += ang.sum(axis=0)
            rot_sum += rot.sum(axis=0)
            cs = np.concatenate([cos, sin], axis=1)
            both = cs if prev is None else np.concatenate([prev[None, :], cs])
            same = (both[1:] == both[:-1]) | (np.isnan(both[1:]) & np.isnan(both[:-1]))
            collisions += int(np.count_nonzero(same.all(axis=1)))
            prev = cs[-1]
            start = stop
        rows.append(
            {
                "length": L,
                "max_angle_error": float(ang_max.max()),
                "mean_angle_error": float(ang_sum.sum() / (L * nf)),
                "max_rotation_error": float(rot_max.max()),
                "mean_rotation_error": float(rot_sum.sum() / (L * nf)),
                "colliding_positions": collisions,
                "angle_error_profile": tuple(ang_max.tolist()),
                "mean_angle_error_profile": tuple((ang_sum / L).tolist()),
                "rotation_error_profile": tuple(rot_max.tolist()),
                "mean_rotation_error_profile": tuple((rot_sum / L).tolist()),
            }
        )
    return rows


CASES = [
    pytest.param(RopeSchedule(head_dim=64), preset("fp32", "bf16"), [300, 5000], id="fp32-bf16"),
    pytest.param(RopeSchedule(head_dim=32), preset("lowp", "fp16"), [2049, 70000], id="lowp-fp16-overflow"),
    pytest.param(RopeSchedule(head_dim=16), preset("lowp", "e4m3"), [1, 600], id="lowp-e4m3-nan"),
    pytest.param(RopeSchedule(head_dim=32, scaling="yarn", factor=4), preset("lowp-inv-freq", "bf16"), [4096], id="yarn-scale"),
    pytest.param(RopeSchedule(head_dim=16), Recipe("odd", "e5m2", "fp16", "e5m2", "e5m2fnuz", "fp4"), [700], id="fnuz-fp4"),
    pytest.param(RopeSchedule(head_dim=16), preset("fp64", "fp32"), [2, 3000], id="fp64"),
    pytest.param(RopeSchedule(head_dim=32), preset("fp32", "fp16"), [5000], id="fp32-fp16"),
    pytest.param(RopeSchedule(head_dim=32), preset("fp32", "e4m3"), [5000], id="fp32-e4m3"),
    pytest.param(RopeSchedule(head_dim=16), Recipe("inf-angle", "fp32", "fp32", "fp16", "fp32", "bf16"), [70000], id="nan-trig-bf16"),
    # the angle table (16-bit angle) and the pair table (16-bit cache) with an attention factor
    pytest.param(RopeSchedule(head_dim=32, scaling="yarn", factor=16), preset("lowp", "bf16"), [5000], id="lowp-bf16-yarn"),
    pytest.param(RopeSchedule(head_dim=32, scaling="yarn", factor=16), preset("fp32", "fp16"), [5000], id="fp32-fp16-yarn"),
    pytest.param(RopeSchedule(head_dim=16), Recipe("e5m2-angle", "fp32", "fp32", "e5m2", "fp32", "bf16"), [900], id="fp8-angle"),
    pytest.param(RopeSchedule(head_dim=16), preset("lowp", "fp4"), [50], id="lowp-fp4"),
    pytest.param(RopeSchedule(head_dim=16), preset("lowp", "fp6_e3m2"), [50], id="lowp-fp6"),
]


@pytest.mark.parametrize("tables", [True, False], ids=["tables", "computed"])
@pytest.mark.parametrize(("schedule", "recipe", "lengths"), CASES)
def test_engine_equals_straightforward_reference(
    schedule: RopeSchedule, recipe: Recipe, lengths: list[int], tables: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the lookup tables (16-bit angles, 16-bit caches) serve long passes only: both paths are checked
    from precision_audit.rope import lookup

    monkeypatch.setattr(lookup, "_TABLE_MIN_ELEMENTS", 0 if tables else 2**62)
    chunk = max(256, 4096 // schedule.n_freq)  # several chunks per length, boundaries inside runs of collisions
    ref = _reference(schedule, recipe, lengths, chunk)
    rows = audit(schedule, recipe, lengths, chunk=chunk, workers=2)
    for row, want in zip(rows, ref):
        got = {k: getattr(row, k) for k in want}
        assert got == want  # floats compared exactly (no nan can reach a row)


def test_rows_identical_for_any_number_of_workers() -> None:
    schedule = RopeSchedule(head_dim=32, scaling="yarn", factor=8)
    recipes = [preset(name, d) for name in ("lowp", "fp32") for d in ("bf16", "fp16")]
    lengths = [100, 1000, 9000]
    runs = [audit(schedule, recipes, lengths, budget=True, chunk=256, workers=w) for w in (1, 2, 3)]
    dicts = [[r.to_dict() for r in rows] for rows in runs]
    assert dicts[0] == dicts[1] == dicts[2]
    assert len(dicts[0]) == len(recipes) * len(lengths)
    assert all(set(r["error_budget"]) == set(STAGES) for r in dicts[0])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_workers_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="workers"):
        audit(RopeSchedule(head_dim=8), preset("fp32"), 10, workers=bad)  # type: ignore[arg-type]


def test_zero_frequencies_skipped_without_changing_rows() -> None:
    # proportional RoPE: pairs with theta = 0 have error 0 and equal rows in every recipe; the audit skips them.
    # Reference: the same pass over every frequency (nothing skipped), reduced the same way.
    from precision_audit.rope.audit import _pass

    s = RopeSchedule(head_dim=32, rotary_dim=8, scaling="proportional", base=1e6)
    recs = [preset("lowp", "bf16"), preset("fp32", "fp16")]
    rows = audit(s, recs, [100, 3000], chunk=512, workers=2)
    theta = s.inv_freq()
    assert (theta == 0).sum() == 12
    snaps = _pass(recs, theta, [stored_inv_freq(r, s) for r in recs], [100, 3000], 1.0, 256, workers=1)
    for i, r in enumerate(recs):
        for (acc, L), row in zip(snaps[i], [x for x in rows if x.recipe == r.name]):
            assert row.length == L and row.colliding_positions == acc.collisions
            assert row.rotation_error_profile == tuple(acc.rot_max.tolist())
            # sums of the same L terms in another order (numpy's axis-0 reduction depends on the row width):
            # they differ by at most L * 2**-52 relative, far inside 1e-12 for L <= 3000
            assert row.mean_rotation_error == pytest.approx(float(acc.rot_sum.sum() / (L * 16)), rel=1e-12)
            assert row.angle_error_profile == tuple(acc.ang_max.tolist())


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn"])
@pytest.mark.parametrize("scale", [1.0, 1.3465735902799727])
def test_pair_table_is_arctan2_of_any_pair(fmt: str, scale: float) -> None:
    # The oracle is the definition: np.arctan2 of the same stored pair.  Pairs on the circle (the table's
    # bands), far off it (the fallback), and zeros, infinities and nans of the format.
    from precision_audit.formats import get_format
    from precision_audit.rope.engine import _Work
    from precision_audit.rope.lookup import _PairTable

    f = get_format(fmt)
    rng = np.random.default_rng(7)
    a = rng.uniform(-40.0, 40.0, 3000)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-30, 300.0]
    cos = np.concatenate([scale * np.cos(a), rng.uniform(-2, 2, 1000), np.repeat(specials, len(specials))])
    sin = np.concatenate([scale * np.sin(a), rng.uniform(-2, 2, 1000), np.tile(specials, len(specials))])
    with np.errstate(invalid="ignore", over="ignore"):
        cc, ss = round_to(cos, f).reshape(-1, 1), round_to(sin, f).reshape(-1, 1)
        want = np.arctan2(ss, cc)
    table = _PairTable.build(fmt, scale)
    assert table is not None
    got = table.lookup(cc, ss, np.empty_like(cc), _Work(cc.shape[0], 1).rows(cc.shape[0]))
    np.testing.assert_array_equal(got, want)  # bit for bit, nan where nan


def test_tables_only_for_narrow_formats() -> None:
    from precision_audit.rope.lookup import _AngleTable, _PairTable

    assert _PairTable.build("float32", 1.0) is None
    assert _AngleTable.build(preset("fp32", "bf16"), 1.0) is None
    assert _AngleTable.build(preset("lowp", "bf16"), 1.0) is not None
    # a trig stage narrower than the angle would round the argument again: no table
    assert _AngleTable.build(Recipe("x", "bf16", "bf16", "fp16", "e4m3", "bf16"), 1.0) is None


@pytest.mark.parametrize("scaling", ["default", "proportional"])
def test_several_dtypes_in_one_call_give_the_rows_of_one_call_per_dtype(scaling: str) -> None:
    # stages shared across dtypes (positions, angles, cos/sin) must not change a row; the frequencies a pass
    # skips (proportional RoPE's theta = 0 tail) are chosen per dtype, as separate calls choose them (fp8
    # inverse frequencies underflow to 0 where theta is not)
    kw = {"rotary_dim": 16, "scaling": "proportional", "base": 1e6} if scaling == "proportional" else {}
    s = RopeSchedule(head_dim=64, **kw)
    dtypes, lengths = ["bf16", "e4m3", "fp16"], [300, 5000]
    together = audit(s, [preset(n, d) for d in dtypes for n in ("lowp", "lowp-inv-freq", "fp32", "fp64")], lengths,
                     budget=True, chunk=256, workers=2)
    separate = [r for d in dtypes for r in audit(s, [preset(n, d) for n in ("lowp", "lowp-inv-freq", "fp32", "fp64")],
                                                 lengths, budget=True, chunk=256, workers=1)]
    assert [r.to_dict() for r in together] == [r.to_dict() for r in separate]


@pytest.mark.parametrize("trig", ["float32", "float64"])
@pytest.mark.parametrize("cache", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2fnuz"])
@pytest.mark.parametrize("scale", [1.0, 1.3465735902799727])
def test_fast_cache_is_the_rounding_chain(trig: str, cache: str, scale: float) -> None:
    # The verified float32 estimate (rope/narrow_cache.py) must give the stored values of the definition:
    # np.cos/np.sin of the angle, rounded to the trig format, times the factor there, cast to the cache.
    # Angles spread over [0, 2**26), and clustered at multiples of pi/2 (cos or sin near 0) and pi/4.
    from precision_audit.formats import get_format
    from precision_audit.rope import narrow_cache

    rng = np.random.default_rng(5)
    k = rng.integers(0, 2**24, 4096).astype(np.float64)
    a = np.concatenate([rng.uniform(0, 2**26, 8192), k * (np.pi / 2) + rng.normal(0, 1e-5, 4096),
                        (k + 0.5) * (np.pi / 2), rng.uniform(0, 1, 4096)])
    a = round_to(a, trig).reshape(-1, 64)
    T, C = get_format(trig), get_format(cache)
    assert narrow_cache.eligible(T, C, scale)
    bufs = [np.empty_like(a) for _ in range(8)]
    est = narrow_cache.estimate(a, bufs[0], (bufs[1], bufs[2], bufs[3]))
    out = np.empty(2 * a.size)
    narrow_cache.stored_into(est, T, C, scale, out, tuple(bufs[4:]))
    factor = float(round_to(scale, "float64" if trig == "float64" else "float32")[()])
    for fn, got in ((np.cos, out[: a.size]), (np.sin, out[a.size :])):
        v = round_to(fn(a.reshape(-1)), trig)
        if scale != 1.0:
            v = round_to(v * factor, trig)
        np.testing.assert_array_equal(got.view(np.uint64), round_to(v, cache).view(np.uint64))


def test_rotation_wrap_threshold_is_pi() -> None:
    # the rotation errors wrap |x| above T by taking min(|x|, |2pi - |x||), which needs T == pi: float64
    # 2*pi is exactly twice float64 pi, so pi / 2pi = 0.5, and the next float64 above pi gives
    # 0.5 + 2**-51 / 2pi, more than half an ulp (2**-54) above 0.5: it rounds up, and wrap moves it
    from precision_audit.rope.chunk_stats import _WRAP_T

    assert _WRAP_T == math.pi
    assert wrap(math.pi) == math.pi
    assert wrap(math.nextafter(math.pi, 4.0)) < 0


def _midpoint_angles(rng: np.random.Generator, fn: object, count: int) -> np.ndarray:
    """float32 angles whose float64 cos (or sin) lies within 2**12 float64 ulps of a float32 rounding midpoint
    (found by search: about one angle in 2**16), where a float64 estimate could round either way."""
    found: list[np.ndarray] = []
    while sum(x.size for x in found) < count:
        a = rng.uniform(0, 2**20, 2**21).astype(np.float32).astype(np.float64)
        v = fn(a)  # type: ignore[operator]
        low = v.view(np.uint64) & np.uint64(2**29 - 1)
        near = np.abs(low.astype(np.int64) - 2**28) <= 2**12
        found.append(a[near & (np.abs(v) >= 2.0**-6)])
    return np.concatenate(found)[:count]


@pytest.mark.parametrize("scale", [1.0, 1.3465735902799727])
def test_float32_cache_path_is_the_rounding_chain(scale: float) -> None:
    # rope/float32_cache.py: a float32 trig stage stored in a float32 cache from a float64 polynomial estimate must
    # give the stored values of the definition (np.cos/np.sin rounded to float32, times the factor in
    # float32) bit for bit.  Angles spread over [0, 2**26), at multiples of pi/2 and pi/4 (cos or sin near 0 or
    # equal), tiny, and found near a float32 midpoint of cos or sin (the guard must send them to np.cos).
    from precision_audit.formats import get_format
    from precision_audit.rope import float32_cache

    rng = np.random.default_rng(11)
    k = rng.integers(0, 2**24, 4096).astype(np.float64)
    a = np.concatenate([rng.uniform(0, 2**26, 8192), k * (np.pi / 2) + rng.normal(0, 1e-5, 4096),
                        (k + 0.5) * (np.pi / 2), rng.uniform(0, 1, 4096), 2.0 ** -rng.uniform(1, 40, 1024),
                        _midpoint_angles(rng, np.cos, 256), _midpoint_angles(rng, np.sin, 256)])
    a = round_to(a, "float32")
    T = C = get_format("float32")
    assert float32_cache.eligible(T, C, scale)
    out = np.empty(2 * a.size)
    float32_cache.stored_into(a, T, C, scale, out, tuple(np.empty_like(a) for _ in range(3)))
    factor = float(round_to(scale, "float32")[()])
    for fn, got in ((np.cos, out[: a.size]), (np.sin, out[a.size :])):
        v = round_to(fn(a), "float32")
        if scale != 1.0:
            v = round_to(v * factor, "float32")
        np.testing.assert_array_equal(got.view(np.uint64), v.view(np.uint64))


def test_float32_cache_estimate_within_its_bound() -> None:
    # the module's claim: cos and sin within 2**-49 of the exact values (mpmath, 200 bits) for |a| < 2**26:
    # float32 angles next to multiples of pi/4 (the reduction's edges and the quadrant switches), spread
    # over every binade up to 2**26, and tiny ones
    import mpmath

    from precision_audit.rope import float32_cache

    rng = np.random.default_rng(12)
    near = np.float32(rng.integers(1, 2**26 // 1, 1500).astype(np.float64) * (np.pi / 4))
    near = near[near < 2**26]
    a = np.concatenate([near, np.nextafter(near, np.float32(0)), np.nextafter(near, np.float32(np.inf)),
                        np.float32(2.0 ** rng.uniform(-30, 26, 1500))]).astype(np.float64)
    a = a[a < float32_cache.MAX_ANGLE]
    c, s = np.empty_like(a), np.empty_like(a)
    float32_cache.estimate(a, c, s, tuple(np.empty_like(a) for _ in range(3)))
    with mpmath.workprec(200):
        worst = max(max(abs(mpmath.cos(mpmath.mpf(x)) - cx), abs(mpmath.sin(mpmath.mpf(x)) - sx))
                    for x, cx, sx in zip(a.tolist(), c.tolist(), s.tolist()))
    assert worst <= 2.0**-49


def test_float32_cache_rows_equal_the_engine_rows() -> None:
    # the audit of float32-cache stacks with the path on and off (np.cos per element): every row identical
    import importlib

    float32_cache = importlib.import_module("precision_audit.rope.float32_cache")
    from precision_audit.rope import stack

    s = RopeSchedule(head_dim=32, scaling="yarn", factor=8, original_max_position_embeddings=4096)
    recipes = [stack(n, "bf16", s) for n in ("sglang", "tensorrt-llm", "llama.cpp-cuda")]
    recipes.append(Recipe("f32-all", "fp32", "fp32", "fp32", "fp32", "fp32"))
    calls = []
    orig, orig_stored = float32_cache.eligible, float32_cache.stored_into
    try:
        float32_cache.stored_into = lambda *a: calls.append(1) or orig_stored(*a)
        on = [r.to_dict() for r in audit(s, recipes, [1000, 40000], workers=2)]
        assert calls  # the path ran
        float32_cache.eligible = lambda *a: False
        off = [r.to_dict() for r in audit(s, recipes, [1000, 40000], workers=2)]
    finally:
        float32_cache.eligible, float32_cache.stored_into = orig, orig_stored
    assert on == off


@pytest.mark.parametrize("size", [0, 1, 2**19 - 1, 2**19, 3 * 2**19 + 5])
def test_huge_region_is_aligned_when_large(size: int) -> None:
    # closed form: from 2 huge pages (2**19 float64 = 4 MiB) on, the region starts at a 2 MiB boundary
    from precision_audit.rope.engine import _huge_region

    r = _huge_region(size)
    assert r.shape == (size,) and r.dtype == np.float64 and r.flags.c_contiguous
    if size >= 2**19:
        assert r.ctypes.data % 2**21 == 0


def test_work_buffers_are_disjoint_views_of_one_region() -> None:
    from precision_audit.rope.engine import _Work

    w = _Work(4096, 64)
    rows = w.rows(1000)
    bufs = [getattr(rows, n) for n in (*_Work.NAMES, "kz", "cc", "ss")]
    assert all(b.shape == (1000, 64) and b.flags.c_contiguous for b in bufs[:-3] + bufs[-2:])
    assert rows.kz.shape == (1001, 64) and np.shares_memory(rows.kz[1:], rows.k)
    for i, a in enumerate(bufs):
        assert np.shares_memory(a, w.scratch())
        for b in bufs[i + 1 :]:
            assert not np.shares_memory(a, b)
    assert rows.ccss.size == 2 * 1000 * 64 and np.shares_memory(rows.ccss, rows.cc) and np.shares_memory(rows.ccss, rows.ss)
