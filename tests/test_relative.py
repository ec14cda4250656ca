"""Tests for the relative-position bucket auditor (T5, DeBERTa).

Expected values come from (a) mpmath (the exact bucket, the correctly rounded log),
(b) transformers' own functions imported and run on torch tensors
(``T5Attention._relative_position_bucket``, deberta_v2's ``make_log_bucket_position``),
(c) an independent per-operation ml_dtypes computation written here, or (d) brute force
over every distance (the sweep's early stop).  torch's float32/bf16 log is faithful, not
correctly rounded, and its last bit depends on the CPU: where the model and torch could
differ (a value within a derived bound of a truncation boundary) the test excludes the
distance and says how many it excluded.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.formats import round_to
from precision_audit.relative import (PATHS, BucketScheme, RelativeRow, audit_relative, exact_buckets,
                                      path_buckets)
from precision_audit.relative.ops import log_in

from _thirdparty import private

mpmath = pytest.importorskip("mpmath")
torch = pytest.importorskip("torch")

from referees._ports import t5_bucket_port  # noqa: E402

TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16}
ML = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}
N = 70000  # past float16's overflow at 65520


# --------------------------------------------------------------------------- the exact bucket (mpmath)


def _mp_bucket(scheme: BucketScheme, d: int) -> int:
    """The exact bucket from mpmath at 120 digits; an integral value decided on Fractions."""
    nb, md = scheme.num_buckets, scheme.max_distance
    if scheme.scheme == "t5":
        nb = nb // 2 if scheme.bidirectional else nb
        me, K = nb // 2, nb - nb // 2
        if d < me:
            return d
        with mpmath.workdps(120):
            y = mpmath.log(mpmath.mpf(d) / me) / mpmath.log(mpmath.mpf(md) / me) * K
            k = int(mpmath.nint(y))
            if abs(y - k) < mpmath.mpf(10) ** -100:  # (d/me)**K == (md/me)**k exactly?
                y_floor = k if Fraction(d, me) ** K >= Fraction(md, me) ** k else k - 1
            else:
                y_floor = int(mpmath.floor(y))
        return min(me + y_floor, nb - 1)
    mid = nb // 2
    if d <= mid:
        return d
    with mpmath.workdps(120):
        y = mpmath.log(mpmath.mpf(d) / mid) / mpmath.log(mpmath.mpf(md - 1) / mid) * (mid - 1)
        k = int(mpmath.nint(y))
        if abs(y - k) < mpmath.mpf(10) ** -100:
            c = k if Fraction(d, mid) ** (mid - 1) <= Fraction(md - 1, mid) ** k else k + 1
        else:
            c = int(mpmath.ceil(y))
    return min(mid + c, nb)


@pytest.mark.parametrize("scheme", [
    BucketScheme("t5"), BucketScheme("t5", bidirectional=False), BucketScheme("deberta"),
    # integral log ratios inside the range: causal T5 32 buckets up to 1024, (128/16)**16 == (1024/16)**8 (y = 8
    # at d = 128); DeBERTa bucket_size 8 (mid 4), max_position 17: log(16/4) / log(16/4) * 3 = 3 at d = 16
    BucketScheme("t5", bidirectional=False, max_distance=1024), BucketScheme("deberta", num_buckets=8, max_distance=17),
])
def test_exact_buckets_match_mpmath(scheme):
    d = np.r_[np.arange(0, 1200), [4095, 4096, 65535, 2**24, 2**40]]
    got = exact_buckets(scheme, d)
    want = [_mp_bucket(scheme, int(v)) for v in d]
    assert got.tolist() == want


def test_exact_bucket_on_an_integral_log_ratio():
    # causal T5, 32 buckets up to 1024: y(128) = log(8) / log(64) * 16 = 8 exactly, so bucket 16 + 8 = 24;
    # DeBERTa bucket_size 8 (mid 4), max_position 17: y(16) = log(4) / log(4) * 3 = 3, bucket 4 + 3 = 7
    assert exact_buckets(BucketScheme("t5", bidirectional=False, max_distance=1024), [127, 128]).tolist() == [23, 24]
    assert exact_buckets(BucketScheme("deberta", num_buckets=8, max_distance=17), [15, 16, 17]).tolist() == [7, 7, 8]


# --------------------------------------------------------------------------- per-operation rounding


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float32", "float8_e5m2"])
def test_log_in_is_correctly_rounded(fmt):
    # oracle: mpmath's log at 60 digits as an exact fraction, rounded once (round_to rounds a Fraction from its
    # exact value); a log of a rational != 1 is never a midpoint, so 60 digits decide every rounding
    rng = np.random.default_rng(5)
    x = round_to(np.r_[rng.uniform(1.0, 2.0**15, 300), np.arange(1, 200), rng.uniform(0.01, 1.0, 50)], fmt)
    got = log_in(x, fmt)
    with mpmath.workdps(60):
        want = []
        for xi in x:
            v = mpmath.log(mpmath.mpf(float(xi)))
            want.append(float(round_to(Fraction(int(v * mpmath.mpf(2) ** 400)) / 2**400, fmt)[()]))
    assert got.tolist() == want


def test_log_in_mpmath_fallback_agrees(monkeypatch):
    # every element sent through the mpmath branch (as if all were near a rounding boundary) gives the same values
    import precision_audit.relative.ops as ops

    x = round_to(np.r_[np.linspace(0.01, 4.0, 400), np.arange(1, 3000, 7)], "bfloat16")
    want = {f: log_in(x, f) for f in ("bfloat16", "float16", "float32")}
    monkeypatch.setattr(ops, "_MARGIN_ULPS", 2.0**60)
    for f, w in want.items():
        assert np.array_equal(log_in(x, f), w)


def _ml_chain_t5(d: np.ndarray, fmt: str, nb: int, md: int) -> tuple[np.ndarray, int]:
    """The lowp T5 bucket computed op by op with ml_dtypes casts (bidirectional halves nb first, done by the caller).

    The log is numpy's float64 log cast to the format: it can differ from the correctly rounded one only where
    the float64 log lies within 1e-12 (relative) of a midpoint of the format; returns how many such elements there
    are, so the test can check that none is compared.
    """
    t_ = ML[fmt]
    me, K = nb // 2, nb - nb // 2
    c = lambda v: np.float64(np.float32(v)).astype(t_).astype(np.float64)  # noqa: E731  constants: float32, then fmt
    x = d.astype(np.float64).astype(t_).astype(np.float64)
    t = (x / c(me)).astype(t_).astype(np.float64)
    with np.errstate(divide="ignore"):
        l64 = np.log(t)
    lr = l64.astype(t_).astype(np.float64)
    near = 0
    fin = np.isfinite(l64) & (t != 1)
    if fin.any():  # distance of the float64 log from the midpoints around its rounded value
        lf, rf = l64[fin], lr[fin]
        up = np.abs(rf) * 2.0 ** -8 if fmt == "bfloat16" else np.abs(rf) * 2.0 ** -11
        near = int(np.count_nonzero(np.abs(np.abs(lf - rf) - up / 2) < 1e-12 * np.abs(lf)))
    y = (lr / c(math.log(md / me))).astype(t_).astype(np.float64)
    y = (y * c(K)).astype(t_).astype(np.float64)
    with np.errstate(invalid="ignore"):
        large = np.minimum(me + np.trunc(y), nb - 1)
    return np.where(x < me, np.trunc(x), large), near


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_lowp_matches_an_ml_dtypes_chain(fmt, bidirectional):
    s = BucketScheme("t5", bidirectional=bidirectional)
    d = np.arange(0, 65000)
    nb = 16 if bidirectional else 32
    want, near = _ml_chain_t5(d, fmt, nb, 128)
    assert near == 0  # no float64 log near a midpoint: the chain is correctly rounded, so equality is expected
    assert np.array_equal(path_buckets(s, d, "lowp", fmt), want)


# --------------------------------------------------------------------------- transformers as the referee


def _t5_f32_y(d: np.ndarray, nb: int, md: int) -> np.ndarray:
    """float32 log(d/me)/log(md/me)*K by numpy float32 ops (for the boundary mask only)."""
    me, K = nb // 2, nb - nb // 2
    with np.errstate(divide="ignore"):
        y = np.log(d.astype(np.float32) / np.float32(me)) / np.float32(math.log(md / me))
    return (y * np.float32(K)).astype(np.float64)


def _near_integer(y: np.ndarray, ulps: float = 8) -> np.ndarray:
    """Values within ``ulps`` float32 ulps of an integer: a faithful log (1 ulp) moves y by at most ~4 ulps
    through one division and one multiplication, so only these can truncate differently under torch."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(y) & (np.abs(y - np.round(y)) <= ulps * np.spacing(np.abs(y).astype(np.float32)))


@pytest.mark.parametrize("nb,md", [(32, 128), (64, 256), (32, 4096)])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_transformers_path_matches_transformers(nb, md, bidirectional):
    T5Attention = private("transformers.models.t5.modeling_t5", "T5Attention")
    d = np.arange(N)
    ref = T5Attention._relative_position_bucket(-torch.arange(N), bidirectional=bidirectional, num_buckets=nb,
                                                max_distance=md).numpy()
    s = BucketScheme("t5", bidirectional=bidirectional, num_buckets=nb, max_distance=md)
    half = nb // 2 if bidirectional else nb
    keep = ~_near_integer(_t5_f32_y(d, half, md)) | (d < half // 2)  # below max_exact the log is not used
    # excluded: y is an exact integer at powers of two (log ratios of powers of two), and a few near misses
    assert keep.sum() >= N - 40, np.flatnonzero(~keep)
    for dtype in ("bfloat16", "float16"):  # .float(): the same float32 buckets whatever the model dtype
        got = path_buckets(s, d, "transformers", dtype)
        assert np.array_equal(got[keep], ref[keep])
        assert np.all(np.abs(got[~keep] - ref[~keep]) <= 1)  # one faithful log moves y by ulps: one bucket at most
    # the key d tokens after the query: num_buckets/2 + the same bucket (bidirectional) or bucket 0 (causal)
    after = T5Attention._relative_position_bucket(torch.arange(1, N), bidirectional=bidirectional, num_buckets=nb,
                                                  max_distance=md).numpy()
    assert np.array_equal(after, ref[1:] + nb // 2 if bidirectional else np.zeros(N - 1))


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_t5_cast_distance_matches_transformers_on_a_cast_tensor(fmt):
    # transformers' function takes relative_position in the dtype and calls .float() on it: the cast-distance path.
    # (bidirectional: `relative_buckets += ...` adds a bf16 tensor into an int64 one, which torch refuses; causal runs)
    T5Attention = private("transformers.models.t5.modeling_t5", "T5Attention")
    d = np.arange(N)
    ref = T5Attention._relative_position_bucket(-torch.arange(N).to(TORCH[fmt]), bidirectional=False).double().numpy()
    got = path_buckets(BucketScheme("t5", bidirectional=False), d, "cast-distance", fmt)
    x = round_to(d, fmt)
    keep = (~_near_integer(_t5_f32_y(x, 32, 128)) | (d < 16)) & np.isfinite(got)
    assert np.array_equal(got[keep], ref[keep])
    undefined = ~np.isfinite(got)
    assert undefined.sum() == (N - 65520 if fmt == "float16" else 0)
    assert not np.any((ref[undefined] >= 0) & (ref[undefined] < 32))  # torch gives no valid bucket there either


def _deberta_f32_y(x: np.ndarray, bs: int, mp: int, dt=np.float32) -> np.ndarray:
    mid = bs // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.log(np.float32((mp - 1) / mid))
        return np.log(x.astype(dt).astype(np.float32) / np.float32(mid)) / c * np.float32(mid - 1)


def _deberta_keep(d: np.ndarray, x: np.ndarray, bs: int, mp: int) -> np.ndarray:
    """Distances whose float32 y is not near an integer, or where it does not matter: up to mid the bucket is the
    distance; from y > bs - mid both sides clamp to bs."""
    y = _deberta_f32_y(x, bs, mp)
    with np.errstate(invalid="ignore"):
        return ~_near_integer(y) | (d <= bs // 2) | (y > bs - bs // 2 + 1)


@pytest.mark.parametrize("bs,mp", [(256, 512), (64, 1024)])
def test_deberta_transformers_and_cast_distance_match_transformers(bs, mp):
    make = private("transformers.models.deberta_v2.modeling_deberta_v2", "make_log_bucket_position")
    s = BucketScheme("deberta", num_buckets=bs, max_distance=mp)
    d = np.arange(N)
    ref = np.minimum(make(torch.arange(N), bs, mp).to(torch.long).numpy(), bs)
    keep = _deberta_keep(d, d, bs, mp)
    assert keep.sum() >= N - 40, np.flatnonzero(~keep)
    assert np.array_equal(path_buckets(s, d, "transformers", "bfloat16")[keep], ref[keep])
    # keys after the query: the negated bucket
    neg = make(-torch.arange(N), bs, mp).to(torch.long).numpy()
    assert np.array_equal(np.maximum(neg, -bs), -ref)
    for fmt in ("bfloat16", "float16"):
        x = round_to(d, fmt)
        got = path_buckets(s, d, "cast-distance", fmt)
        ok = np.isfinite(got) & _deberta_keep(d, x, bs, mp)
        ref = make(torch.arange(N).to(TORCH[fmt]).float(), bs, mp).to(torch.long).numpy()
        assert np.array_equal(got[ok], np.minimum(ref, bs)[ok])


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_deberta_lowp_matches_transformers_run_in_the_dtype(fmt):
    # make_log_bucket_position accepts a relative_pos in the dtype and then runs in it, except that torch keeps
    # its float32 0-dim log constant in float32 (opmath): constants="float32".  torch's bf16/fp16 log is float32's
    # faithful log rounded again: the model can differ only where the exact log is near a midpoint of the dtype.
    make = private("transformers.models.deberta_v2.modeling_deberta_v2", "make_log_bucket_position")
    d = np.arange(N)
    ref = make(torch.arange(N).to(TORCH[fmt]), 256, 512).double().numpy()
    got = path_buckets(BucketScheme("deberta"), d, "lowp", fmt, constants="float32")
    assert np.array_equal(got, path_buckets(BucketScheme("deberta"), d, "lowp-eager", fmt), equal_nan=True)
    ok = np.isfinite(got)
    assert ok.sum() == (65520 if fmt == "float16" else N)
    # torch: float32 log (within 1 ulp) rounded to the dtype; it may round otherwise only where the exact log lies
    # within 1 float32 ulp of a midpoint of the dtype: exclude those (none on this range on the machines seen)
    x = round_to(d, fmt)
    t = round_to(np.where(x < 128, 127.0, x) / 128, fmt)
    with np.errstate(divide="ignore", invalid="ignore"):
        l64 = np.log(t)
        e = 2 * np.spacing(np.abs(l64).astype(np.float32)).astype(np.float64)
        ok &= round_to(l64 - e, fmt) == round_to(l64 + e, fmt)
    assert ok.sum() >= 0.99 * (65520 if fmt == "float16" else N)  # a value repeats: many d share one x above 2048
    assert np.array_equal(got[ok], np.minimum(np.trunc(ref), 256)[ok])


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_lowp_eager_matches_a_torch_port_run_in_the_dtype(fmt, bidirectional):
    # a torch port of T5's formula without .float() (referees._ports): eager torch on bf16/fp16 tensors keeps the Python constants (max_exact, log(md / me), K) in float32 opmath and
    # rounds each op's float32 result to the dtype: the lowp-eager path.  torch's bf16/fp16 log is float32's
    # faithful log rounded again, so distances whose exact log lies within 1 float32 ulp of a midpoint of the
    # dtype are left out (as for DeBERTa); the divisions by a power of two are exact.
    d = np.arange(N)
    ref = t5_bucket_port(-torch.arange(N).to(TORCH[fmt]), bidirectional).double().numpy()
    got = path_buckets(BucketScheme("t5", bidirectional=bidirectional), d, "lowp-eager", fmt)
    ok = np.isfinite(got)
    assert ok.sum() == (65520 if fmt == "float16" else N)
    me = 8 if bidirectional else 16
    with np.errstate(divide="ignore", invalid="ignore"):
        l64 = np.log(round_to(d, fmt) / me)
        e = 2 * np.spacing(np.abs(l64).astype(np.float32)).astype(np.float64)
        ok &= (d < me) | (round_to(l64 - e, fmt) == round_to(l64 + e, fmt))
    assert ok.sum() >= 0.99 * (65520 if fmt == "float16" else N)
    assert np.array_equal(got[ok], ref[ok])
    # not the ONNX-style lowp path: bf16 constants move other distances (bf16: 16 flips here, not in lowp)
    if fmt == "bfloat16" and bidirectional:
        lowp = path_buckets(BucketScheme("t5"), d, "lowp", fmt)
        assert got[16] != lowp[16] and got[16] != exact_buckets(BucketScheme("t5"), [16])[0]


# --------------------------------------------------------------------------- the auditor


def _brute_force(scheme: BucketScheme, path: str, fmt: str, length: int) -> tuple[int, int | None, int, int]:
    d = np.arange(length)
    got, exact = path_buckets(scheme, d, path, fmt), exact_buckets(scheme, d)
    bad = got != exact
    shift = np.abs(got - exact)[bad & np.isfinite(got)]
    return (int(bad.sum()), int(np.argmax(bad)) if bad.any() else None, int(shift.max()) if shift.size else 0,
            int(np.count_nonzero(~np.isfinite(got))))


@pytest.mark.parametrize("scheme", [BucketScheme("t5"), BucketScheme("t5", bidirectional=False),
                                    BucketScheme("deberta"), BucketScheme("t5", num_buckets=64, max_distance=4096)])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
                                 "float4_e2m1fn"])
def test_audit_equals_brute_force_over_every_distance(scheme, fmt):
    lengths = [100, 300, 512, 5000, N]
    rows = audit_relative(scheme, PATHS, lengths, fmt)
    assert [(r.length, r.path) for r in rows] == [(n, p) for n in lengths for p in PATHS]
    for r in rows:
        assert (r.flipped, r.first_flip, r.max_shift, r.undefined) == _brute_force(scheme, r.path, fmt, r.length)
        assert r.verdict == ("safe" if not r.flipped else "broken" if r.undefined or r.max_shift > 1 else "degraded")


def test_long_contexts_cost_nothing_more():
    # the sweep stops at the last bucket (or at a saturated cast): 2**53 tokens answer at once.  float4 holds every
    # distance from 6 on as 6, which is not below max_exact 8 (rounded to float4: 6), so it takes the log branch with
    # log(6 / 6) = 0: bucket 8 instead of 15 (shift 7) for every distance past 128, so every added distance flips
    [r] = audit_relative("t5", "lowp", 2**53, "float4_e2m1fn")
    [b] = audit_relative("t5", "lowp", 70000, "float4_e2m1fn")
    assert r.flipped - b.flipped == 2**53 - 70000 and r.max_shift == b.max_shift == 7


@pytest.mark.parametrize("scheme", [BucketScheme("t5"), BucketScheme("deberta")])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "float6_e2m3fn"])
def test_buckets_are_monotone_in_the_distance(scheme, fmt):
    # the sweep stops once both buckets reach the last one: that needs every path to be non-decreasing in d
    for path in PATHS:
        b = path_buckets(scheme, np.arange(N), path, fmt)
        b = b[np.isfinite(b)]
        assert np.all(np.diff(b) >= 0), path


def test_reported_figures_t5_and_deberta():
    # the issue's figures: T5 32/128 bidirectional and DeBERTa 256/512; transformers' path never flips (float32)
    rows = {(r.scheme, r.dtype, r.length, r.path): r for s in ("t5", "deberta")
            for r in audit_relative(s, PATHS, [512, 2048, 8192, 32768], ["bfloat16", "float16"])}
    assert all(r.flipped == 0 for k, r in rows.items() if k[3] == "transformers")
    t5 = rows["t5", "bfloat16", 32768, "lowp"]
    # bf16: log(45/8) -> 1.7265625, log 16 -> 2.765625, quotient -> 0.625, * 8 = 5 (exact: 4.98): bucket 13, not 12
    assert (t5.flipped, t5.first_flip, t5.max_shift) == (2, 45, 1)
    assert all(r.flipped == 0 for k, r in rows.items() if k[0] == "t5" and k[1] == "float16")


def test_row_validation_and_json():
    r = audit_relative("t5", "lowp", 512, "bf16")[0]
    assert set(r.to_dict()) == {"scheme", "path", "dtype", "length", "bidirectional", "num_buckets", "max_distance",
                                "flipped", "first_flip", "max_shift", "undefined", "verdict"}
    with pytest.raises(ValueError, match="first_flip"):
        RelativeRow("t5", "lowp", "bfloat16", 10, True, 32, 128, 1, None, 1, 0, "degraded")


@pytest.mark.parametrize("kwargs,match", [
    (dict(scheme="t6"), "unknown scheme 't6'"),
    (dict(num_buckets=0), "num_buckets 0"),
    (dict(num_buckets=30, max_distance=20), "max_distance 20"),
    (dict(num_buckets=33), "num_buckets 33 must be even"),
    (dict(scheme="deberta", bidirectional=False), "bidirectional False"),
    (dict(paths="fp32"), "unknown path 'fp32'"),
    (dict(dtypes="fp7"), "unknown dtype 'fp7'"),
    (dict(lengths=0), "length 0"),
    (dict(num_buckets=2.5), "num_buckets 2.5 must be an integer"),
])
def test_bad_input_raises_value_error(kwargs, match):
    args = dict(scheme="t5", paths="lowp", lengths=512, dtypes="bf16") | kwargs
    with pytest.raises(ValueError, match=match):
        audit_relative(args.pop("scheme"), args.pop("paths"), args.pop("lengths"), args.pop("dtypes"), **args)


# --------------------------------------------------------------------------- CLI


def test_cli_json():
    res = CliRunner().invoke(main, ["relative", "--scheme", "deberta", "-l", "2K", "-d", "bf16", "-r", "lowp",
                                    "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["auditor"] == "relative"
    [row] = out["results"]
    assert row == audit_relative("deberta", "lowp", 2048, "bfloat16")[0].to_dict()


def test_cli_table_and_causal():
    res = CliRunner().invoke(main, ["relative", "--causal", "-l", "512", "-d", "bf16"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].split() == ["scheme", "dtype", "length", "path", "flipped", "1st", "flip",
                                                  "max", "shift", "undefined", "verdict"]
    assert len(res.output.splitlines()) == 2 + len(PATHS)


@pytest.mark.parametrize("args,msg", [
    (["--num-buckets", "0"], "num_buckets 0 must be at least 4"),
    (["--num-buckets", "31"], "num_buckets 31 must be even"),
    (["--max-distance", "10"], "max_distance 10 must be at least num_buckets 32"),
    (["--scheme", "bert"], "'bert' is not one of"),
    (["--scheme", "deberta", "--causal"], "DeBERTa's log buckets are signed, always bidirectional"),
    (["-r", "fp32"], "'fp32' is not one of"),
    (["-l", "0"], "length 0"),
    (["--scheme", "learned", "-r", "lowp"], "'lowp' is not a path of --scheme learned"),
    (["--scheme", "xlnet", "--num-buckets", "8"], "--num-buckets applies to --scheme t5 / deberta, not xlnet"),
    (["--scheme", "learned", "--causal"], "--bidirectional/--causal applies to --scheme t5 / deberta, not learned"),
    (["--d-model", "64"], "--d-model applies to --scheme xlnet, not t5"),
    (["--scheme", "xlnet", "--d-model", "63"], "63 must be even"),
    (["--scheme", "xlnet", "-l", "100", "--qlen", "101"], "qlen 101 must be at most 100"),
])
def test_cli_bad_input_exits_2(args, msg):
    res = CliRunner().invoke(main, ["relative", *args])
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and msg in errors[0]
    assert "Traceback" not in res.output


# --------------------------------------------------------------------------- T5 in a bf16 / fp16 model


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("autocast", [False, True])
def test_t5_compute_bias_in_a_low_precision_model_reads_the_exact_buckets(fmt, autocast):
    # the transformers path: relative_position is int64 (arange(dtype=torch.long)) whatever the model dtype, and
    # .float() puts the log in float32, also under CPU autocast; so model.to(bf16/fp16) reads the float32 buckets
    transformers = pytest.importorskip("transformers")
    T5Attention = private("transformers.models.t5.modeling_t5", "T5Attention")
    cfg = transformers.T5Config(d_model=8, d_kv=4, num_heads=1, relative_attention_num_buckets=32,
                                relative_attention_max_distance=128)
    att = T5Attention(cfg, has_relative_attention_bias=True).to(TORCH[fmt])
    with torch.no_grad():
        att.relative_attention_bias.weight[:, 0] = torch.arange(32)  # bucket i holds i: exact in both formats
    L = 600  # every distance from 128 on is in the last bucket
    with torch.no_grad(), torch.autocast("cpu", dtype=TORCH[fmt], enabled=autocast):
        bias = att.compute_bias(L, L)[0, 0].double().numpy()  # [query, key]
    s = BucketScheme("t5")
    q, k = np.arange(L)[:, None], np.arange(L)[None, :]
    rel = k - q  # memory - query
    exact = exact_buckets(s, np.arange(L)).astype(np.float64)
    want = np.where(rel > 0, 16 + exact[np.abs(rel)], exact[np.abs(rel)])
    # the float32 path agrees with the exact bucket at every distance (no flip), except possibly where the float32 y
    # is within ulps of an integer, where a faithful (not correctly rounded) log may truncate one bucket lower:
    # d = 16, 32, 64 (y = 2, 4, 6 exactly: log of a power of two over log 16) and d = 128 (clipped anyway)
    d = np.arange(L)
    edge = _near_integer(_t5_f32_y(d, 16, 128)) & (d >= 8)
    assert set(np.flatnonzero(edge)) <= {8, 16, 32, 64, 128, 256, 512}
    keep = ~edge[np.abs(rel)]
    assert np.array_equal(bias[keep], want[keep])
    assert np.all(np.abs(bias - want) <= 1)


def test_cli_learned_and_xlnet_pass_the_library_rows_through():
    from precision_audit.relative import LEARNED_PATHS, audit_learned, audit_relative_sinusoid

    res = CliRunner().invoke(main, ["relative", "--scheme", "learned", "-l", "8K", "-d", "fp16", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["results"] == [r.to_dict() for r in audit_learned(LEARNED_PATHS, 8192, "float16")]
    res = CliRunner().invoke(main, ["relative", "--scheme", "xlnet", "-l", "300", "-d", "bf16", "--d-model", "16",
                                    "--qlen", "200", "--attn-type", "uni", "-r", "arange-dtype", "--json"])
    assert res.exit_code == 0, res.output
    want = audit_relative_sinusoid(16, "arange-dtype", 300, "bfloat16", qlen=200, attn_type="uni")
    assert json.loads(res.output)["results"] == [r.to_dict() for r in want]
    table = CliRunner().invoke(main, ["relative", "--scheme", "xlnet", "-l", "300", "-d", "bf16", "--d-model", "16"])
    assert table.exit_code == 0 and "cross-sign proven" in table.output.splitlines()[0]
