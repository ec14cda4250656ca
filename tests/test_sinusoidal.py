"""Tests for the sinusoidal-encoding auditor.

Every expected value comes from (a) a brute-force computation written here
separately (torch kernels, or numpy/ml_dtypes casts, full pairwise distances,
np.unique over rows), (b) a closed-form derivation stated in the comment, or
(c) mpmath at high precision.
"""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest
import torch
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.formats import get_format
from precision_audit.sinusoidal import (
    RECIPES,
    Recipe,
    SinusoidalRow,
    audit_sinusoidal,
    decay_curve,
    decay_exact,
    encoding_table,
    encoding_table_torch,
    exact_distances,
    exact_table,
    frequencies,
    get_recipe,
)

mpmath = pytest.importorskip("mpmath")

TORCH = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
      "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


# ---------------------------------------------------------------------------
# independent reference implementations (written from the paper, not the module)

def ref_exact(length: int, dim: int) -> np.ndarray:
    """float64 PE, concat layout: exp/log form of the frequencies (Annotated Transformer)."""
    div = np.exp(np.arange(0, dim, 2, dtype=np.float64) * -(math.log(10000.0) / dim))
    ang = np.arange(length, dtype=np.float64)[:, None] * div[None, :]
    return np.concatenate([np.sin(ang), np.cos(ang)], axis=1)


def stage_dtypes(recipe: str, dtype: str) -> tuple[str, str, str]:
    """(positions, compute, table) formats of the presets, from their documented meaning."""
    return {
        "lowp": (dtype, dtype, dtype),
        "lowp-positions": (dtype, "float32", dtype),
        "fp32": ("float32", "float32", dtype),
        "fp64": ("float64", "float64", dtype),
    }[recipe]


def exp_log_div_term(dim: int) -> torch.Tensor:
    """The Annotated Transformer's float64 frequencies: exp(2i * -(ln 10000 / d))."""
    return torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * -(math.log(10000.0) / dim))


def ref_torch_table(length: int, dim: int, recipe: str, dtype: str) -> np.ndarray:
    """The recipe as plain torch code: position ids cast, div_term, product, sin/cos, .to(dtype).

    div_term holds the float64 frequencies w_i = 10000 ** (-2i/d) as ``frequencies`` gives them (checked
    against mpmath above).  The exp-log form real code often uses differs from them by a few float64 ulps
    (test_exp_log_frequencies_within_derived_ulps); after rounding to the compute dtype the two agree
    except by chance, so a brute force built on them would pin one CPU's exp/pow bits.
    """
    pos_dt, comp_dt, tab_dt = (TORCH[x] for x in stage_dtypes(recipe, dtype))
    position = torch.arange(length).to(pos_dt).to(comp_dt)  # position_ids.to(dtype)
    div_term = torch.from_numpy(frequencies(dim))
    angle = position[:, None] * div_term.to(comp_dt)[None, :]
    pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).to(tab_dt)
    return pe.to(torch.float64).numpy()


def ref_numpy_lowp(length: int, dim: int, dtype: str) -> np.ndarray:
    """All-low-precision table with ml_dtypes casts (for formats torch cannot compute in).

    Products of two <= 8-bit-significand numbers are exact in float32, so the
    float32 product rounded once to the format is the format's product.
    """
    t = NP[dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        pos = np.arange(length, dtype=np.float64).astype(t)
        div = np.power(10000.0, -np.arange(0, dim, 2) / dim).astype(t)
        ang = (pos.astype(np.float32)[:, None] * div.astype(np.float32)[None, :]).astype(t).astype(np.float64)
        return np.concatenate([np.sin(ang).astype(t), np.cos(ang).astype(t)], axis=1).astype(np.float64)


def brute_duplicates(table: np.ndarray) -> tuple[int, int]:
    """(duplicate rows, distinct rows) by np.unique over canonical row bit patterns."""
    t = table + 0.0  # -0 -> +0
    t[np.isnan(t)] = np.nan
    _, counts = np.unique(t.view(np.uint64), axis=0, return_counts=True)
    return int(counts[counts >= 2].sum()), len(counts)


def pairwise(table: np.ndarray) -> np.ndarray:
    diff = table[:, None, :] - table[None, :, :]
    d = np.sqrt(np.sum(diff * diff, axis=2))
    np.fill_diagonal(d, np.inf)
    return d


# ---------------------------------------------------------------------------
# the float64 oracle against mpmath

@pytest.mark.parametrize("dim", [2, 64, 512, 768])
def test_frequencies_match_mpmath(dim: int) -> None:
    # mpmath at 50 digits: w_i = 10000 ** (-2i/d); float64 power is within 2 ulp
    mpmath.mp.dps = 50
    w = frequencies(dim)
    for i in sorted({0, 1, dim // 4, dim // 2 - 1} & set(range(dim // 2))):
        ref = float(mpmath.power(10000, mpmath.mpf(-2 * i) / dim))
        assert abs(w[i] - ref) <= 2 * np.spacing(ref)


@pytest.mark.parametrize("k", [1, 2, 3, 710, 4097, 65535, 10**6])
def test_exact_distance_and_decay_match_mpmath(k: int) -> None:
    # closed forms |PE(p)-PE(p+k)|^2 = sum 4 sin^2(k w_i / 2), PE(p).PE(p+k) = sum cos(k w_i);
    # float64 angle k*w_i has relative error <= 3 * 2**-53, so the error is <= d/2 * (k * 3 * 2**-53 + 2**-52)
    mpmath.mp.dps = 50
    dim = 64
    ws = [mpmath.power(10000, mpmath.mpf(-2 * i) / dim) for i in range(dim // 2)]
    tol = dim / 2 * (k * 3 * 2.0**-53 + 2.0**-51)
    dist = mpmath.sqrt(sum((2 * mpmath.sin(k * w / 2)) ** 2 for w in ws))
    dec = sum(mpmath.cos(k * w) for w in ws)
    assert abs(exact_distances(dim, [k])[0] - float(dist)) <= tol
    assert abs(decay_exact(dim, [k])[0] - float(dec)) <= tol


def test_exact_table_matches_mpmath_and_layouts() -> None:
    mpmath.mp.dps = 40
    dim, length = 16, 3000
    inter = exact_table(length, dim)
    concat = exact_table(length, dim, layout="concat")
    for p, i in [(0, 0), (1, 0), (2999, 0), (2999, 7), (1234, 3)]:
        a = p * mpmath.power(10000, mpmath.mpf(-2 * i) / dim)
        tol = 4 * p * 2.0**-53 + 2.0**-52  # angle rounding (<= 3 half-ulps relative) + sin rounding
        assert abs(inter[p, 2 * i] - float(mpmath.sin(a))) <= tol
        assert abs(inter[p, 2 * i + 1] - float(mpmath.cos(a))) <= tol
        # fairseq / tensor2tensor layout: sin half then cos half
        assert concat[p, i] == inter[p, 2 * i] and concat[p, dim // 2 + i] == inter[p, 2 * i + 1]


def test_encoding_table_layouts_and_rounding() -> None:
    # the stored table holds values of the target format only
    t = encoding_table(300, 8, "lowp", "bfloat16")
    assert np.array_equal(t, t.astype(ml_dtypes.bfloat16).astype(np.float64))
    with pytest.raises(ValueError, match="unknown layout 'zigzag'"):
        encoding_table(4, 4, layout="zigzag")


# ---------------------------------------------------------------------------
# two engines

@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_engine_agrees_with_numpy_engine(recipe: str, dtype: str) -> None:
    # the rounding stages agree bit for bit; the only differences come from the sin/cos kernels
    # (torch sinf vs float64 sin) and torch's float64->float16 cast, which rounds through float32;
    # those move an entry by at most one unit in the last place of the stored format
    a = encoding_table(4096, 64, recipe, dtype)
    b = encoding_table_torch(4096, 64, recipe, dtype).to(torch.float64).numpy()
    c = ref_torch_table(4096, 64, recipe, dtype)
    b_concat = np.concatenate([b[:, 0::2], b[:, 1::2]], axis=1)
    assert np.array_equal(b_concat, c)  # torch engine == plain torch code, same kernels, same frequencies
    # How often the engines differ: only where the value lies within one float32 ulp of a table-format rounding
    # midpoint (faithful float32 sin/cos, or torch's float64 -> float32 -> float16 double rounding).  Spread
    # evenly over a table ulp that is a share 2 * 2**(p - 24) <= 2**-12 (p = 11 float16, 8 bfloat16), about 64
    # of 262144 entries; 2**-10 leaves a factor 4 for the unevenness of real angles.
    differ = a != b
    assert differ.mean() <= 2.0**-10
    ulp = np.ldexp(1.0, np.frexp(np.abs(a[differ]))[1] - get_format(dtype).significand_bits)
    assert np.all(np.abs(a[differ] - b[differ]) <= ulp)


@pytest.mark.parametrize("dim", [2, 64, 512, 768])
def test_exp_log_frequencies_within_derived_ulps(dim: int) -> None:
    # The exp-log form exp(2i * c), c = -(ln 10000 / d) (real torch code), against frequencies (numpy power).
    # Derivation: ln is faithful (rel. error <= 2**-52), the division and the product 2i * c each round once
    # (<= 2**-53), so the exponent x_i is off by at most |x_i| * 2**-51 (absolute), which exp turns into a
    # relative error |x_i| * 2**-51; exp and power are each faithful (<= 2**-52 relative).  A relative
    # difference r is at most r / 2**-53 ulps: 4 |x_i| + 4 ulps (|x_i| <= ln 10000 ~ 9.2, so <= 41).
    w = frequencies(dim)
    e = exp_log_div_term(dim).numpy()
    x = np.arange(0, dim, 2) * (math.log(10000.0) / dim)
    ulps = np.abs(w.view(np.int64) - e.view(np.int64))
    assert np.all(ulps <= np.ceil(4 * x + 4)), ulps.max()


def test_torch_engine_rejects_formats_torch_cannot_compute() -> None:
    with pytest.raises(ValueError, match="torch engine cannot compute in positions=float8_e4m3fn"):
        encoding_table_torch(4, 4, "lowp", "e4m3")
    with pytest.raises(ValueError, match="evaluates sin/cos in the angle dtype"):
        encoding_table_torch(4, 4, Recipe("mixed", angles="fp32", trig="fp16"), "fp16")


# ---------------------------------------------------------------------------
# duplicate rows against brute force

@pytest.mark.parametrize("recipe", list(RECIPES))
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_duplicates_match_torch_brute_force(recipe: str, dtype: str) -> None:
    # brute force: the whole table built with torch kernels, np.unique over rows, per length
    lengths = (200, 700, 2100, 5000)
    dim = 32
    rows = audit_sinusoidal(dim, [recipe], lengths, [dtype])
    full = ref_torch_table(lengths[-1], dim, recipe, dtype)
    for r in rows:
        dup, distinct = brute_duplicates(full[: r.length])
        assert (r.duplicate_rows, r.distinct_rows) == (dup, distinct), r.length


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_duplicates_float8_match_numpy_brute_force(dtype: str) -> None:
    # float8: positions overflow (e4m3fn -> nan past 464, e5m2 -> inf past 61439) and tables collide
    # heavily; brute force with ml_dtypes casts and np.unique (nan rows count as equal)
    lengths = (40, 300, 1000)
    rows = audit_sinusoidal(8, ["lowp"], lengths, [dtype])
    full = ref_numpy_lowp(lengths[-1], 8, dtype)
    for r in rows:
        dup, distinct = brute_duplicates(full[: r.length])
        assert (r.duplicate_rows, r.distinct_rows) == (dup, distinct), r.length
        assert r.nonfinite_rows == int(np.count_nonzero(~np.all(np.isfinite(full[: r.length]), axis=1)))


def test_far_collisions_found_without_window() -> None:
    # d = 2: one frequency w = 1, and 710 = 113 * 2pi + 6.0e-5 (355/113 ~ pi), so rows p and p+710
    # differ by ~6e-5, below float16's spacing near +-1: collisions 710 apart, not local
    rows = audit_sinusoidal(2, ["fp32"], [2000], ["float16"])
    full = ref_torch_table(2000, 2, "fp32", "float16")
    dup, distinct = brute_duplicates(full)
    assert dup > 0
    assert (rows[0].duplicate_rows, rows[0].distinct_rows) == (dup, distinct)
    assert rows[0].exact_nn_distance == pytest.approx(2 * abs(math.sin(710 / 2)), rel=1e-9)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("dim", [64, 256])
def test_fp32_recipe_keeps_rows_distinct(dtype: str, dim: int) -> None:
    # Derivation: every stored entry s of the fp32 recipe is within
    #   eps = 2**-(p+1)                (final rounding into a p-bit format, |s| <= 1)
    #       + 2 * L * 2**-24 + 2**-23  (float32 frequency and angle rounding for angles < L, float32 sin/cos)
    # of the exact entry, so |S(p) - PE(p)| <= sqrt(d) * eps.  If the exact nearest-neighbour distance
    # D_min exceeds 2 sqrt(d) eps, no two stored rows can be equal (triangle inequality).
    L = 8192
    eps = 2.0 ** -(get_format(dtype).significand_bits + 1) + 2 * L * 2.0**-24 + 2.0**-23
    # D_min from the float64 reference table: by translation invariance |PE(p)-PE(q)| = |PE(0)-PE(q-p)|
    ex = ref_exact(L, dim)
    d_min = float(np.min(np.sqrt(np.sum((ex[1:] - ex[0]) ** 2, axis=1))))
    assert d_min > 2 * math.sqrt(dim) * eps
    (r,) = audit_sinusoidal(dim, ["fp32"], L, [dtype])
    assert r.duplicate_rows == 0 and r.distinct_rows == L
    assert r.max_abs_error <= eps
    assert r.min_nn_distance >= d_min - 2 * math.sqrt(dim) * eps
    assert r.exact_nn_distance == pytest.approx(d_min, rel=1e-12)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_lowp_positions_duplicates_are_position_collisions(dtype: str) -> None:
    # lowp-positions: rows of distinct rounded positions (>= 1 apart) differ by >= D_min > 2 sqrt(d) eps
    # (as above, angles < 2L), so duplicates are exactly the positions whose cast position id is shared:
    # count them from torch's int64 -> dtype cast
    L, dim = 8192, 64
    ids = torch.arange(L).to(TORCH[dtype]).to(torch.float64).numpy()
    _, inv, counts = np.unique(ids, return_inverse=True, return_counts=True)
    expected = int(np.count_nonzero(counts[inv] >= 2))
    (r,) = audit_sinusoidal(dim, ["lowp-positions"], L, [dtype])
    assert (r.duplicate_rows, r.distinct_rows) == (expected, len(counts))


def test_float16_overflowing_positions_are_nonfinite() -> None:
    # float16 positions >= 65520 (Format.overflow_integer) become inf, their angles inf, sin/cos nan:
    # the 16 positions 65520..65535 share one all-nan row; metrics they poison are None in JSON
    (r,) = audit_sinusoidal(2, ["lowp"], 65536, ["float16"], max_lag=2)
    assert r.nonfinite_rows == 65536 - get_format("float16").overflow_integer == 16
    d = r.to_dict()
    assert d["max_abs_error"] is None and d["min_nn_distance"] is None and d["decay_max_dev"] is None
    assert json.dumps(d)


# ---------------------------------------------------------------------------
# error, nearest-neighbour and decay metrics against brute force

CASES = [("lowp", "bfloat16", 16), ("lowp", "float16", 8), ("fp32", "float16", 16),
         ("fp32", "bfloat16", 4), ("lowp-positions", "bfloat16", 16), ("fp64", "float16", 2)]


@pytest.mark.parametrize(("recipe", "dtype", "dim"), CASES)
def test_metrics_match_brute_force(recipe: str, dtype: str, dim: int) -> None:
    L, window, max_lag = 600, 3, 20
    (r,) = audit_sinusoidal(dim, [recipe], L, [dtype], nn_window=window, max_lag=max_lag)
    S = ref_torch_table(L, dim, recipe, dtype)
    E = ref_exact(L, dim)
    # torch's sin kernels may move a few entries by one ulp (see the engine test): allow that much
    ulp = 2.0 ** (1 - get_format(dtype).significand_bits)
    assert r.max_abs_error == pytest.approx(float(np.max(np.abs(S - E))), abs=ulp)
    # nearest neighbour over ALL other positions, O(L^2)
    nn_s, nn_e = pairwise(S).min(axis=1), pairwise(E).min(axis=1)
    assert r.exact_nn_distance == pytest.approx(float(nn_e.min()), rel=1e-9)
    if r.nn_certified:
        assert r.min_nn_distance == pytest.approx(float(nn_s.min()), abs=3 * math.sqrt(dim) * ulp)
        assert r.nn_shrink == pytest.approx(float(np.max(1 - nn_s / nn_e)), abs=3 * math.sqrt(dim) * ulp)
    else:  # window result: never below the global nearest neighbour
        assert r.min_nn_distance >= float(nn_s.min()) - 1e-12
    # decay curve: mean_p S(p).S(p+k) vs the exact sum_i cos(k w_i) (checked by mpmath above)
    ks = np.arange(max_lag + 1)
    means = np.array([np.mean(np.sum(S[: L - k] * S[k:], axis=1)) for k in ks])
    exact = np.array([np.mean(np.sum(E[: L - k] * E[k:], axis=1)) for k in ks])
    dev = np.abs(means - exact)
    assert r.decay_max_dev == pytest.approx(float(dev.max()), abs=2 * dim * ulp)


def test_nn_metrics_match_brute_force_exactly_on_numpy_table() -> None:
    # same stored table as the auditor (numpy engine), so the nearest-neighbour figures agree to rounding
    L, dim = 500, 32
    (r,) = audit_sinusoidal(dim, ["fp32"], L, ["float16"], nn_window=2, max_lag=5)
    assert r.nn_certified
    S = encoding_table(L, dim, "fp32", "float16")
    nn_s, nn_e = pairwise(S).min(axis=1), pairwise(ref_exact(L, dim)).min(axis=1)
    assert r.min_nn_distance == pytest.approx(float(nn_s.min()), rel=1e-12)
    assert r.nn_shrink == pytest.approx(float(np.max(1 - nn_s / nn_e)), rel=1e-9)


def test_lowp_bfloat16_loses_identity() -> None:
    # bf16 positions 257 -> 256 (closed form: 8 significant bits), so rows collide: min NN 0, shrink 100 %,
    # which are the global extremes whatever the window
    (r,) = audit_sinusoidal(16, ["lowp"], 300, ["bfloat16"])
    assert r.duplicate_rows >= 2 and r.min_nn_distance == 0.0 and r.nn_shrink == 1.0 and r.nn_certified


@pytest.mark.parametrize(("dim", "dtype"), [(8, "float16"), (2, "bfloat16")])
def test_far_nearest_neighbours_are_found(dim: int, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # small d: the exact nearest neighbour of position 0 is far outside the +-4 window (brute force);
    # the far-lag search still finds every stored nearest neighbour (O(L^2) brute force agrees)
    L = 700
    E = ref_exact(L, dim)
    k_nn = int(np.argmin(np.sqrt(np.sum((E[1:] - E[0]) ** 2, axis=1)))) + 1
    assert k_nn > 4
    (r,) = audit_sinusoidal(dim, ["fp32"], L, [dtype])
    S = encoding_table(L, dim, "fp32", dtype)
    nn_s, nn_e = pairwise(S).min(axis=1), pairwise(E).min(axis=1)
    assert r.nn_certified
    assert r.min_nn_distance == pytest.approx(float(nn_s.min()), rel=1e-12)
    assert r.nn_shrink == pytest.approx(float(np.max(1 - nn_s / nn_e)), rel=1e-9, abs=1e-12)
    # without the far search the window result cannot be proven, and the CLI says so
    monkeypatch.setattr("precision_audit.sinusoidal.neighbours.FAR_SEARCH_BUDGET", 0)
    (w,) = audit_sinusoidal(dim, ["fp32"], L, [dtype])
    assert not w.nn_certified and w.min_nn_distance >= r.min_nn_distance
    res = CliRunner().invoke(main, ["sinusoidal", "-l", str(L), "--dim", str(dim), "-d", dtype, "-r", "fp32"])
    assert res.exit_code == 0 and "window" in res.output.splitlines()[2]


# ---------------------------------------------------------------------------
# streaming: prefix reductions and chunking do not change the answer

def test_prefix_lengths_equal_separate_runs_and_chunking() -> None:
    lengths = [1, 2, 5, 257, 1000, 3001]
    kw = dict(dim=16, dtypes=["bfloat16", "float16"], recipes=["lowp", "fp32"], nn_window=3, max_lag=7)
    together = audit_sinusoidal(lengths=lengths, **kw)
    chunked = audit_sinusoidal(lengths=lengths, **kw, chunk=7)
    separate = [row for L in lengths for row in audit_sinusoidal(lengths=L, **kw)]
    key = lambda r: (r.dtype, r.length, r.recipe)  # noqa: E731
    separate.sort(key=lambda r: (["bfloat16", "float16"].index(r.dtype), r.length, r.recipe != "lowp"))
    assert [key(r) for r in together] == [key(r) for r in separate] == [key(r) for r in chunked]
    for a, b, c in zip(together, separate, chunked):
        da, db, dc = a.to_dict(), b.to_dict(), c.to_dict()
        for name, va in da.items():
            if isinstance(va, float):
                assert va == pytest.approx(db[name], rel=1e-12) and va == pytest.approx(dc[name], rel=1e-12), name
            else:
                assert va == db[name] == dc[name], name


def test_length_one_has_no_neighbours() -> None:
    (r,) = audit_sinusoidal(4, ["fp32"], 1, ["float16"])
    assert (r.distinct_rows, r.duplicate_rows) == (1, 0)
    assert r.to_dict()["exact_nn_distance"] is None and r.decay_max_dev_lag == 0


# ---------------------------------------------------------------------------
# validation

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"dim": 7}, "dim 7 must be a positive even integer"),
    ({"dim": 0}, "dim 0 must be a positive even integer"),
    ({"dim": -4}, "dim -4 must be a positive even integer"),
    ({"recipes": ["fp16"]}, "unknown sinusoidal recipe 'fp16'"),
    ({"dtypes": ["fp7"]}, "unknown dtype 'fp7'"),
    ({"nn_window": 0}, "nn_window 0 must be a positive integer"),
    ({"max_lag": -1}, "max_lag -1 must be a non-negative integer"),
    ({"base": 1.0}, "base 1.0 must be a finite number greater than 1"),
    ({"base": 2**1100}, r"base 2\*\*1100 is beyond float64's range"),
    ({"dtypes": 16}, "dtypes 16 must be a format name or an iterable of them"),
    ({"recipes": []}, r"no sinusoidal recipe given \(recipes \[\] is empty\)"),
    ({"chunk": 0}, "chunk 0 must be at least 1"),
    ({"lengths": 0}, "length 0 must be at least 1"),
])
def test_bad_arguments_raise(kwargs: dict, message: str) -> None:
    args = {"lengths": 8, "dim": 4, "recipes": "lowp", **kwargs}
    with pytest.raises(ValueError, match=message):
        audit_sinusoidal(**args)


def test_a_bare_name_is_one_name() -> None:
    # "float16" is one dtype (as audit_positions takes it), not the letters f, l, o, ...
    one = audit_sinusoidal(4, "fp32", 8, "float16")
    assert [r.to_dict() for r in one] == [r.to_dict() for r in audit_sinusoidal(4, ["fp32"], 8, ["float16"])]


def test_recipe_and_row_validation() -> None:
    with pytest.raises(ValueError, match="recipe 'r', stage table: unknown dtype 'fp9'"):
        Recipe("r", table="fp9")
    with pytest.raises(ValueError, match="recipe name ''"):
        Recipe("")
    assert get_recipe(" FP32 ") is RECIPES["fp32"]
    (r,) = audit_sinusoidal(4, ["fp32"], 8, ["float16"])
    good = r.to_dict()
    for field, bad in [("dim", 3), ("duplicate_rows", 9), ("distinct_rows", 0), ("nn_window", 0)]:
        with pytest.raises(ValueError, match=field):
            SinusoidalRow(**{**good, field: bad})


# ---------------------------------------------------------------------------
# CLI

def test_cli_table_side_by_side() -> None:
    res = CliRunner().invoke(main, ["sinusoidal", "--length", "512", "--dim", "32", "--dtype", "bf16",
                                    "--recipe", "lowp", "--recipe", "fp32"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "dup rows" in lines[0] and "NN shrink" in lines[0]
    body = [ln.split() for ln in lines[2:4]]
    assert [b[2] for b in body] == ["lowp", "fp32"]
    # bf16 positions 257..511 collide as derived in the module docstring: 191 duplicates, 385 distinct
    assert body[0][3:5] == ["385", "191"] and body[1][3:5] == ["512", "0"]


def test_cli_json() -> None:
    res = CliRunner().invoke(main, ["sinusoidal", "-l", "300", "-l", "3K", "--dim", "8", "-d", "fp16",
                                    "-r", "fp32", "-r", "lowp", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["auditor"] == "sinusoidal"
    rows = data["results"]
    assert [(r["length"], r["recipe"]) for r in rows] == [(300, "fp32"), (300, "lowp"), (3072, "fp32"), (3072, "lowp")]
    for r in rows:
        assert {"recipe", "dtype", "length", "dim", "duplicate_rows", "distinct_rows", "max_abs_error",
                "exact_nn_distance", "min_nn_distance", "nn_shrink", "decay_max_dev"} <= set(r)
        assert r["dtype"] == "float16" and r["dim"] == 8
    # float16 integers are exact to 2048: at 3072 the lowp positions 2049..3071 collide
    assert rows[1]["duplicate_rows"] == 0 and rows[3]["duplicate_rows"] > 0 and rows[2]["duplicate_rows"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--dim", "7"], "dim 7 must be a positive even integer"),
    (["--dim", "0"], "0 is not in the range 2<=x<=65536"),
    (["--dim", "-2"], "-2 is not in the range 2<=x<=65536"),
    (["--recipe", "bogus"], "'bogus' is not one of"),
    (["--length", "0"], "length 0 must be at least 1"),
    (["--length", "1.5k"], "is not a whole number of tokens"),
    (["--dtype", "fp7"], "unknown dtype 'fp7'"),
    (["--nn-window", "0"], "Invalid value for '--nn-window'"),
])
def test_cli_bad_input_exits_2(args: list[str], message: str) -> None:
    res = CliRunner().invoke(main, ["sinusoidal", *args])
    assert res.exit_code == 2
    assert message in res.output


# ---------------------------------------------------------------------------
# decay curve and figures

@pytest.mark.parametrize(("recipe", "dtype"), [("lowp", "bfloat16"), ("fp32", "float16"), ("fp64", "float64")])
def test_decay_curve_matches_brute_force(recipe: str, dtype: str) -> None:
    # brute force: mean over p of row dot products of the whole torch-built table
    L, dim, max_lag = 1000, 16, 12
    S = ref_torch_table(L, dim, recipe, dtype)
    expected = [np.mean(np.sum(S[: L - k] * S[k:], axis=1)) for k in range(max_lag + 1)]
    got = decay_curve(L, dim, recipe, dtype, max_lag=max_lag, chunk=97)
    ulp = 2.0 ** (1 - get_format(dtype).significand_bits)  # torch sin kernels: a few entries 1 ulp apart
    assert got == pytest.approx(expected, abs=2 * dim * ulp)
    if dtype == "float64":  # the exact curve sum_i cos(k w_i)
        assert got == pytest.approx(decay_exact(dim, np.arange(max_lag + 1)), abs=1e-12)


@pytest.mark.parametrize(("recipe", "dtype", "dim"), [("lowp", "bfloat16", 8), ("fp32", "float16", 2)])
def test_hash_collisions_are_verified(recipe: str, dtype: str, dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # with a hash that maps every row to one value, exactness rests on the element-wise verification
    # alone; the counts must still equal the np.unique brute force
    monkeypatch.setattr("precision_audit.sinusoidal.duplicates._row_hash", lambda bits: np.zeros(len(bits), dtype=np.uint64))
    lengths = (300, 1500)
    rows = audit_sinusoidal(dim, [recipe], lengths, [dtype], chunk=100)
    full = ref_torch_table(lengths[-1], dim, recipe, dtype)
    for r in rows:
        assert (r.duplicate_rows, r.distinct_rows) == brute_duplicates(full[: r.length])


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["lowp", "fp32"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_duplicates_at_1m_match_torch_row_digests(recipe: str, dtype: str) -> None:
    # brute force at L = 2**20, d = 512: the table built with torch in slices, every row's bytes
    # digested with blake2b (nan canonicalised), duplicates counted with a Counter
    import hashlib
    from collections import Counter

    L, dim, step = 2**20, 512, 2**15
    pos_dt, comp_dt, tab_dt = (TORCH[x] for x in stage_dtypes(recipe, dtype))
    div_term = torch.from_numpy(frequencies(dim)).to(comp_dt)  # the frequencies, as in ref_torch_table
    digests = []
    for a in range(0, L, step):
        position = torch.arange(a, a + step).to(pos_dt).to(comp_dt)
        angle = position[:, None] * div_term[None, :]
        pe = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).to(tab_dt).to(torch.float64).numpy()
        pe = pe + 0.0
        pe[np.isnan(pe)] = np.nan
        digests += [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in pe]
    counts = Counter(digests)
    expected = sum(c for c in counts.values() if c >= 2)
    (r,) = audit_sinusoidal(dim, [recipe], L, [dtype], max_lag=1)
    assert (r.duplicate_rows, r.distinct_rows) == (expected, len(counts))


def test_progress_reports_every_position_of_every_pass():
    # one streaming pass per (recipe, dtype), each over max(lengths) positions
    seen: list[int] = []
    audit_sinusoidal(16, ["lowp", "fp32"], [100, 3000], ["bfloat16"], chunk=512, progress=seen.append)
    assert sum(seen) == 2 * 3000 and max(seen) <= 512


def test_rows_identical_for_any_number_of_workers() -> None:
    # chunks run on threads and merge in position order: the sums are the single thread's, to the bit
    kw = dict(dim=16, dtypes=["bfloat16", "float16"], recipes=["lowp", "fp32", "fp64"], nn_window=3, max_lag=7,
              chunk=300)
    runs = [audit_sinusoidal(lengths=[100, 2000, 5000], workers=w, **kw) for w in (1, 3)]
    assert [r.to_dict() for r in runs[0]] == [r.to_dict() for r in runs[1]]
