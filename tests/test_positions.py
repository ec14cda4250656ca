"""Position-id auditor: regression table, closed form vs measurement, torch.

Expected values come from three places, named at each test:
* a brute-force oracle written here: integers rounded to p significant bits
  with plain integer arithmetic, metrics counted with numpy's unique;
* closed-form counts derived by hand in the comments;
* public facts (IEEE 754 binary16 overflows at 65520; Baichuan's "about 10 %"
  of bf16 positions exact at 8K).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precision_audit.formats import FORMATS, get_format
from precision_audit.positions import (
    audit_positions,
    measure_positions,
    predict_positions,
    reproduce_baichuan,
)

NARROW = [name for name, f in FORMATS.items() if f.significand_bits <= 11]
TORCH_FORMATS = [name for name, f in FORMATS.items() if f.torch_name and f.significand_bits <= 24]


# ---------------------------------------------------------------- the oracle
def oracle_round(n: int, p: int, max_finite: float, overflow: str, toward_zero: bool = False) -> float:
    """Round the integer n >= 0 to p significant bits, ties to even (or, ``toward_zero``, truncated: tf32-rz),
    then apply the format's range: beyond max_finite -> inf / nan / max_finite."""
    if n.bit_length() > p:
        shift = n.bit_length() - p
        q, r = n >> shift, n & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if not toward_zero and (r > half or (r == half and q & 1)):
            q += 1
        n = q << shift
    if n > max_finite:
        return {"inf": math.inf, "nan": math.nan, "saturate": max_finite}[overflow]
    return float(n)


def oracle_metrics(length: int, fmt: str) -> dict[str, object]:
    """Every metric by brute force over the oracle's values (small lengths only)."""
    f = get_format(fmt)
    rz = f.rounding == "toward-zero"
    vals = np.array([oracle_round(n, f.significand_bits, f.max_finite, f.overflow, rz) for n in range(length)])
    pos = np.arange(length, dtype=np.float64)
    finite = np.isfinite(vals)
    keys = np.where(finite, vals, np.inf)  # all non-finite results are one value
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    # longest run of equal neighbours
    best = cur = 1
    for a, b in zip(keys[:-1], keys[1:]):
        cur = cur + 1 if a == b else 1
        best = max(best, cur)
    inexact = np.flatnonzero(vals != pos)
    bad = np.flatnonzero(~finite)
    return {
        "exact_count": int(np.sum(vals == pos)),
        "distinct_values": len(uniq),
        "max_run": best,
        "collision_fraction": float(np.sum(counts[inverse] > 1)) / length,
        "max_abs_error": float(np.max(np.abs(vals[finite] - pos[finite]))) if finite.any() else 0.0,
        "first_inexact": int(inexact[0]) if len(inexact) else None,
        "non_finite": len(bad),
        "overflow_position": int(bad[0]) if len(bad) else None,
    }


def metrics(row) -> dict[str, object]:
    d = dataclasses.asdict(row)
    for k in ("dtype", "length", "method", "exact_fraction"):
        d.pop(k)
    return d


# --------------------------------------------------- regression table (oracle)
TABLE_LENGTHS = [1, 2, 17, 256, 257, 258, 300, 465, 1024, 2049, 4096, 8192]


@pytest.mark.parametrize("fmt", NARROW)
def test_regression_table_matches_brute_force_oracle(fmt):
    """Both engines against the brute-force oracle over the whole table."""
    measured = measure_positions(TABLE_LENGTHS, fmt, chunk=1000)
    for row in measured:
        expected = oracle_metrics(row.length, fmt)
        assert metrics(row) == expected, (fmt, row.length)
        assert metrics(predict_positions(row.length, fmt)) == expected, (fmt, row.length)


@pytest.mark.parametrize(
    ("fmt", "length", "exact", "distinct", "max_run"),
    [
        # bf16, p = 8: 0..255 exact (256), then 128 per binade; at 8192 the
        # binades [256,512) .. [4096,8192) add 5 * 128 -> 896; 8192 itself is
        # reached by rounding 8176..8191 -> 897 values.  The spacing in
        # [4096, 8192) is 32, so an even-significand value takes 32 + 1 ids.
        ("bfloat16", 8192, 896, 897, 33),
        # fp16, p = 11: 2048 + 1024 + 1024 exact; max run 4 + 1.
        ("float16", 8192, 4096, 4097, 5),
        # fp16 at 64K: 2048 + 5 * 1024 = 7168 exact; inf counts as one value.
        ("float16", 65536, 7168, 7169, 33),
        # fp32 holds every integer to 2**24.
        ("float32", 131072, 131072, 131072, 1),
    ],
)
def test_hand_derived_rows(fmt, length, exact, distinct, max_run):
    for row in (predict_positions(length, fmt), measure_positions(length, fmt)[0]):
        assert (row.exact_count, row.distinct_values, row.max_run) == (exact, distinct, max_run)


def test_baichuan_headline():
    """Baichuan: about 10 % of bf16 positions exact at 8K; here exactly 896/8192."""
    r = audit_positions(8192, "bf16")[0]
    assert r.exact_fraction == 896 / 8192 == 0.109375
    assert r.distinct_values == 897
    assert r.first_inexact == 257  # 2**8 + 1: the first integer bf16 cannot hold
    rows = {(x.dtype, x.length): x for x in reproduce_baichuan()}
    assert all(rows["float32", n].exact_fraction == 1.0 for n in (1024, 131072))
    assert rows["bfloat16", 8192] == r


def test_float16_overflow_public_fact():
    """IEEE binary16: max 65504, and 65520 (= 65504 + ulp/2, a tie that goes
    to the even significand, i.e. up) is the first value that becomes inf."""
    for r in (predict_positions(65536, "float16"), measure_positions(65536, "float16")[0]):
        assert (r.non_finite, r.overflow_position) == (16, 65520)


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        # Every integer below 2**p, then 2**(p-1) per binade from 2**p on,
        # plus one for the value 2**40 itself (reached by rounding).
        ("bfloat16", 2**8 + (40 - 8) * 2**7 + 1),
        ("float32", 2**24 + (40 - 24) * 2**23 + 1),
        ("float64", 2**40),
    ],
)
def test_closed_form_at_2_pow_40(fmt, expected):
    assert predict_positions(2**40, fmt).distinct_values == expected


# ------------------------------------------- two independent ways, many lengths
@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(list(FORMATS)), length=st.integers(1, 2**17), chunk=st.integers(1, 2**15))
def test_closed_form_equals_measurement(fmt, length, chunk):
    if get_format(fmt).significand_bits > 24:
        length = min(length, 2**12)
    chunk = max(chunk, length // 256)  # at most 256 chunks: a chunk of 1 still meets every short length
    (measured,) = measure_positions(length, fmt, chunk=chunk)
    assert metrics(predict_positions(length, fmt)) == metrics(measured)


@pytest.mark.parametrize("fmt", ["bfloat16", "float32"])
def test_closed_form_beyond_float32_integers(fmt):
    """Around 2**24..2**25+, where a float64 -> float32 -> bf16 cast would round
    twice; one pass measures the whole sweep."""
    lens = [2**24 - 1, 2**24 + 1, 2**24 + 3, 2**25 + 2**17 + 2]
    for row in measure_positions(lens, fmt):
        assert metrics(row) == metrics(predict_positions(row.length, fmt))


def test_one_pass_equals_separate_passes():
    lens = [3, 300, 5000, 70000]
    swept = measure_positions(lens, "float16", chunk=4096)
    alone = [measure_positions(n, "float16", chunk=777)[0] for n in lens]
    assert swept == alone


# ------------------------------------------------------------- torch engine
@pytest.mark.parametrize("fmt", TORCH_FORMATS)
def test_torch_cast_matches_numpy_engine(fmt):
    """int64 positions cast by torch (.to(dtype)) give the same values as
    ml_dtypes' correctly rounded cast, so the same metrics."""
    # float8_e4m3fn only up to its overflow at 465: beyond, see the next test.
    lens = [1, 17, 257, 465] if fmt == "float8_e4m3fn" else [1, 257, 2049, 70000]
    assert [metrics(r) for r in measure_positions(lens, fmt, engine="torch")] == [
        metrics(r) for r in measure_positions(lens, fmt)
    ]


def test_torch_saturates_e4m3fn_where_ml_dtypes_gives_nan():
    """torch's float8_e4m3fn cast saturates at 448; ml_dtypes (and the OCP
    non-saturating convention the registry follows) gives nan."""
    (t,) = measure_positions(1000, "float8_e4m3fn", engine="torch")
    (n,) = measure_positions(1000, "float8_e4m3fn")
    assert (t.non_finite, n.non_finite) == (0, 1000 - 465)
    assert t.exact_count == n.exact_count  # identical below the overflow


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_torch_arange_kernel_is_exact_in_the_exact_range(fmt):
    """torch.arange(L, dtype=...) on the CPU rounds a SIMD block's base first
    (values depend on the vector width), so only the exact-integer range is
    pinned: there every position survives in both."""
    n = get_format(fmt).max_exact_integer + 1
    (a,) = measure_positions(n, fmt, engine="torch-arange")
    assert metrics(a) == metrics(measure_positions(n, fmt)[0])
    assert a.exact_count == n


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_torch_arange_exact_positions_do_not_depend_on_threads(fmt):
    """Past torch's parallel grain (32768) the kernel's values depend on the thread count; what does not:
    every position the format holds exactly comes out as itself and no other position can (its value is a
    number of the format, the position is not), so exact_count and first_inexact are the numpy engine's."""
    torch = pytest.importorskip("torch")
    n0 = torch.get_num_threads()
    (ref,) = measure_positions(70000, fmt)
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            (a,) = measure_positions(70000, fmt, engine="torch-arange")
            assert (a.exact_count, a.first_inexact) == (ref.exact_count, ref.first_inexact), threads
    finally:
        torch.set_num_threads(n0)


def test_cli_torch_arange_reports_threads():
    # the table and JSON record the thread count of measured rows (closed-form rows: none)
    import json

    from click.testing import CliRunner

    from precision_audit.cli import main

    torch = pytest.importorskip("torch")
    res = CliRunner().invoke(main, ["positions", "-l", "1k", "-l", str(2**40), "--engine", "torch-arange", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["method"], r["threads"]) for r in rows] == [("empirical", torch.get_num_threads()),
                                                          ("closed-form", None)]
    assert rows[0]["exact_count"] == 512  # closed form: 0..255, even 256..510, multiples of 4 in 512..1020
    table = CliRunner().invoke(main, ["positions", "-l", "1k", "--engine", "torch-arange"]).output
    assert table.splitlines()[0].split()[-1] == "threads"
    assert table.splitlines()[2].split()[-1] == str(torch.get_num_threads())
    # numpy's rows (one rounding) have no thread count; the other construction's (torch's CPU arange) below do
    plain = CliRunner().invoke(main, ["positions", "-l", "1k"]).output.split("\n\n")
    assert "threads" not in plain[0] and "threads" in plain[1]


def test_torch_engine_rejects_format_without_torch_dtype():
    with pytest.raises(ValueError, match="float4_e2m1fn"):
        measure_positions(10, "float4_e2m1fn", engine="torch")
    with pytest.raises(ValueError, match="no arange kernel for float8_e5m2"):
        measure_positions(10, "float8_e5m2", engine="torch-arange")


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("length", "match"),
    [(0, "length 0 must be at least 1"), (-3, "-3"), (2**53 + 1, "exceeds 2\\*\\*53"), (1.5, "1.5"), ("8k", "'8k'")],
)
def test_bad_length(length, match):
    for fn in (predict_positions, lambda n, d: measure_positions(n, d)):
        with pytest.raises(ValueError, match=match):
            fn(length, "bf16")


def test_bad_dtype_lists_valid_names():
    with pytest.raises(ValueError, match="unknown dtype 'bf17'.*bfloat16"):
        audit_positions(8, "bf17")


def test_bad_method_and_engine():
    with pytest.raises(ValueError, match="method 'fast'"):
        audit_positions(8, "bf16", method="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="engine 'jax'"):
        measure_positions(8, "bf16", engine="jax")  # type: ignore[arg-type]


def test_bad_argument_types_name_the_argument():
    # TypeError (also a ValueError, for callers catching bad input as ValueError) naming argument and value
    cases = [
        (lambda: audit_positions(8, None), r"^dtypes None must be a format name or an iterable of them"),
        (lambda: audit_positions(8, 16), r"^dtypes 16 must be a format name"),
        (lambda: audit_positions(8, "bf16", engine=None), r"^engine None must be a string, one of numpy, torch"),
        (lambda: audit_positions(8, "bf16", method=["auto"]), r"^method \['auto'\] must be a string"),
        (lambda: audit_positions(8, "bf16", progress="yes"), r"^progress 'yes' must be callable"),
        (lambda: measure_positions(8, "bf16", chunk=None), r"^chunk None must be an integer"),
        (lambda: measure_positions(8, "bf16", chunk=2.5), r"^chunk 2.5 must be an integer"),
        (lambda: measure_positions(8, "bf16", progress=1), r"^progress 1 must be callable"),
    ]
    for call, match in cases:
        with pytest.raises(TypeError, match=match):
            call()
    with pytest.raises(ValueError, match=r"^no format name given \(dtypes \[\] is empty\)"):
        audit_positions(8, [])
    with pytest.raises(ValueError, match=r"^length \[8, 16\] must be one length"):
        predict_positions([8, 16], "bf16")  # type: ignore[arg-type]
    assert predict_positions([16], "bf16") == predict_positions(16, "bf16")  # one length in a list: as before


def test_progress_reports_every_position_once():
    seen: list[int] = []
    measure_positions([100, 5000], "bf16", chunk=777, progress=seen.append)
    assert sum(seen) == 5000 and max(seen) <= 777
