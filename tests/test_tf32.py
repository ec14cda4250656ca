"""TF32: the ``tf32`` (round to nearest even, cuBLAS) and ``tf32-rz`` (truncation, Triton's ``tl.dot``) formats.

Referees:
- an integer oracle written here: a float32 bit pattern to 10 stored mantissa bits by integer arithmetic on
  Python ints (round half to even / drop the low bits), independent of the package's numpy code;
- the recorded NVIDIA H200 outputs in ``tests/data/h200/`` (made by this project's scripts, see
  ``tests/data/SOURCES.md``): what a TF32 GEMM returned for 200768 float32 values and for the positions
  0..131071, compared bit for bit;
- closed forms for the position counts (11 significant bits: 2**11 + (k - 11) * 2**10 exact integers below 2**k).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.formats import FORMATS, get_format, round_into, round_to, spacing
from precision_audit.positions import measure_positions, predict_positions

DATA = Path(__file__).parent / "data" / "h200"
_h = float.fromhex


def _record_values() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The 200768 recorded float32 inputs and each GEMM's float32 outputs (the file stores the integers'
    part as its count and each output as the difference of its bits from the input's: a lossless repack)."""
    r = np.load(DATA / "tf32_values_h200.npz")
    x = np.concatenate([r["x_head"], np.arange(int(r["parts"][3]), dtype=np.float32)])
    xb = x.view(np.int32).astype(np.int64)
    outs = {k: (xb + r[f"{k}_minus_x"]).astype(np.int32).view(np.float32)
            for k in ("cublas_high_k16", "triton_dot_default")}
    return x, outs


def _oracle_bits(bits: int, nearest: bool) -> int:
    """A float32 pattern (not nan) to TF32 by integer arithmetic: keep 10 of 23 stored mantissa bits."""
    sign, mag = bits & 0x80000000, bits & 0x7FFFFFFF
    if mag >= 0x7F800000:  # inf
        return bits
    q, r = divmod(mag, 1 << 13)
    if nearest and (r > 0x1000 or (r == 0x1000 and q % 2 == 1)):
        q += 1  # a carry into the exponent field is the next binade (or inf): the encoding is monotone
    return sign | (q << 13)


GEMMS = {"tf32": "cublas_high_k16", "tf32-rz": "triton_dot_default"}


def test_registry_facts() -> None:
    # closed forms: 11 significant bits, float32's exponent range, integers exact to 2**11
    for name in GEMMS:
        f = get_format(name)
        assert f.max_exact_integer == 2048 and f.max_finite == _h("0x1.ffcp127") and f.min_exponent == -126
        assert np.dtype(f.numpy_type) == np.float32 and f.torch_dtype is None
    assert get_format("TF32") is FORMATS["tf32"] and get_format("tensorfloat32") is FORMATS["tf32"]
    assert get_format("tf32_rz") is FORMATS["tf32-rz"]
    assert get_format("tf32").overflow_integer == 2**128 - 2**116  # the tie above max_finite, odd: rounds up
    assert spacing([4096.0], "tf32").tolist() == [4.0]


def test_recorded_values_bit_for_bit() -> None:
    # recorded on an H200: cuBLAS under "high" (K = 16) and Triton's default tl.dot, x @ e with e = 1.0
    x, outs = _record_values()
    assert x.size == 200768
    for name, key in GEMMS.items():
        want = outs[key].view(np.uint32)
        got64 = round_to(x, name).astype(np.float32).view(np.uint32)  # float64 working path
        out32 = np.empty_like(x)
        round_into(x.copy(), get_format(name), out32)  # float32 working path (the bits)
        assert int((got64 == want).sum()) == x.size, name
        assert int((out32.view(np.uint32) == want).sum()) == x.size, name


def test_recorded_values_match_the_integer_oracle() -> None:
    # the record itself is what the oracle says (so the record and the oracle referee each other)
    x, outs = _record_values()
    rng = np.random.default_rng(0)
    pick = np.concatenate([np.arange(69696), rng.integers(69696, x.size, 2000)])  # every non-integer input
    for name, key in GEMMS.items():
        want = [_oracle_bits(int(b), name == "tf32") for b in x.view(np.uint32)[pick]]
        assert outs[key].view(np.uint32)[pick].tolist() == want, name


@pytest.mark.parametrize("name", list(GEMMS))
def test_oracle_on_edges(name: str) -> None:
    # subnormals, ties of both parities, the top of the range, zeros, inf: both working precisions
    nearest = name == "tf32"
    mants = [0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x5000, 0x7FE000, 0x7FEFFF, 0x7FF000, 0x7FFFFF]
    exps = [0, 1, 2, 126, 127, 150, 253, 254]
    bits = [(e << 23) | m for e in exps for m in mants] + [0x7F800000]
    bits += [b | 0x80000000 for b in bits]
    x = np.array(bits, dtype=np.uint32).view(np.float32)
    want = np.array([_oracle_bits(b, nearest) for b in bits], dtype=np.uint32)
    with np.errstate(over="ignore"):
        got = round_to(x, name).astype(np.float32).view(np.uint32)
    assert got.tolist() == want.tolist()
    out = np.empty_like(x)
    round_into(x.copy(), get_format(name), out, (np.empty_like(x), np.empty_like(x)))
    assert out.view(np.uint32).tolist() == want.tolist()
    nan = np.array([0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF], dtype=np.uint32).view(np.float32)
    assert np.isnan(round_to(nan, name)).all()
    assert np.isnan(round_into(nan.copy(), get_format(name), np.empty(3, np.float32))).all()


def test_float64_inputs_round_once() -> None:
    # a float64 value between two float32 values: one rounding from its exact value (closed form)
    assert round_to(2049.0 + 2**-30, "tf32") == 2050.0  # above the tie 2049 -> 2050
    assert round_to(2049.0, "tf32") == 2048.0  # the tie -> even
    assert round_to(2051.0 - 2**-30, "tf32-rz") == 2050.0
    assert round_to(-2051.5, "tf32-rz") == -2050.0
    assert math.copysign(1.0, float(round_to(-2.0**-140, "tf32-rz"))) == -1.0  # below the smallest subnormal
    assert round_to(1e300, "tf32-rz") == _h("0x1.ffcp127") and round_to(1e300, "tf32") == math.inf
    assert round_to(-math.inf, "tf32-rz") == -math.inf
    assert round_to(2**128 - 2**117, "tf32-rz") == _h("0x1.ffcp127")


def test_recorded_positions_bit_for_bit() -> None:
    # tf32_positions_h200.npz: the positions 0..131071 through the two GEMMs
    rec = np.load(DATA / "tf32_positions_h200.npz")
    idx = np.arange(131072)
    for name, key in GEMMS.items():
        np.testing.assert_array_equal(round_to(idx, name), rec[key].astype(np.float64))
    probes = {2049: 2048, 2051: 2052, 2053: 2052, 4099: 4100}
    assert {k: float(rec["cublas_high_k16"][k]) for k in probes} == probes  # the README's examples
    assert float(rec["triton_dot_default"][2051]) == 2050 and float(rec["triton_dot_default"][4099]) == 4096


def test_position_counts_closed_form_and_record() -> None:
    # closed form: 2**11 exact below 2**11, then 2**10 per binade: 2048 + 6 * 1024 = 8192 exact below 2**17
    record = json.loads((DATA / "tf32_record_h200.json").read_text())
    for name, key in GEMMS.items():
        m = measure_positions(131072, name)[0]
        p = predict_positions(131072, name)
        assert m.exact_count == p.exact_count == 2048 + 6 * 1024 == record[key]["exact"]
        assert m.distinct_values == p.distinct_values == record[key]["distinct"]
        assert m.max_abs_error == p.max_abs_error == record[key]["max_err"]
        assert m.max_run == p.max_run and m.collision_fraction == p.collision_fraction
        assert m.first_inexact == p.first_inexact == 2049


@pytest.mark.parametrize("name", list(GEMMS))
def test_closed_form_equals_measured(name: str) -> None:
    lengths = [1, 2, 2048, 2049, 2050, 2051, 4096, 4097, 4098, 4100, 4101, 6000, 8191, 8193, 70001]
    for L, m in zip(lengths, measure_positions(lengths, name)):
        p = predict_positions(L, name)
        assert {**m.to_dict(), "method": ""} == {**p.to_dict(), "method": ""}, L


def test_truncation_closed_form_far() -> None:
    # at 2**40 truncation keeps 2**11 + 29 * 2**10 integers, the top spacing is 2**30: max error 2**30 - 1
    r = predict_positions(2**40, "tf32-rz")
    assert r.exact_count == r.distinct_values == 2048 + 29 * 1024
    assert r.max_abs_error == 2**29 - 1 and r.max_run == 2**29  # the last binade starts at 2**39: spacing 2**29


def test_cli_positions_tf32_and_bad_name() -> None:
    from precision_audit.cli import main

    res = CliRunner().invoke(main, ["positions", "-d", "tf32", "-d", "tf32-rz", "-l", "131072", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    got = {(r["dtype"], r["exact_count"], r["distinct_values"], r["max_abs_error"]) for r in rows}
    assert got == {("tf32", 8192, 8193, 32.0), ("tf32-rz", 8192, 8192, 63.0)}
    bad = CliRunner().invoke(main, ["positions", "-d", "tf31", "-l", "8192"])
    assert bad.exit_code == 2 and "'tf31'" in bad.output


def test_tf32_in_recipe_stages_and_rope_cli() -> None:
    from precision_audit.rope import parse_stages, recipe_stages

    r = parse_stages("positions=tf32,inv_freq=tf32-rz@exact", "bf16")
    assert (r.positions, r.inv_freq, r.how["inv_freq"]) == ("tf32", "tf32-rz", "exact value rounded to tf32-rz")
    st = recipe_stages(r, [1.0, 0.1], [2049, 2051, 4099])
    assert st["positions"].tolist() == [2048.0, 2052.0, 4100.0]
    assert st["inv_freq"][1] == round_to(0.1, "tf32-rz") < 0.1  # truncated: below the exact value
    from precision_audit.cli import main

    res = CliRunner().invoke(main, ["rope", "-l", "4096", "--stages", "positions=tf32", "--json"])
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.output)["results"]
    # closed form: 4096 - (2048 + 1024 + 1) positions share their rounded value with the previous one
    assert row["stages"]["positions"] == "tf32" and row["colliding_positions"] == 4096 - 3073
