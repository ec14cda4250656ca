"""The rest of issue 40's third wave: each measured figure against an independent computation.

Oracles (never the tool's rounding): ``rne`` hand rounding (frexp/rint, ties to even), frequencies from mpmath,
bf16 ULP order from frexp (biased exponent * 128 + mantissa), ALiBi slopes as powers of two.  Each verdict is
asserted; where an entry says a report's reading does not hold, the recomputed number that says so is asserted.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from precision_audit.incidents import reproduce
from test_incidents import bf16, fp16, fp32, thetas

mpmath.mp.prec = 100


def neox(q, c, s, rnd, *, round_products=False):
    h = q.shape[-1] // 2
    x1, x2 = q[..., :h], q[..., h:]
    p = (lambda v: rnd(v)) if round_products else (lambda v: v)
    return rnd(np.concatenate([p(x1 * c) - p(x2 * s), p(x2 * c) + p(x1 * s)], axis=-1))


def fp32_table(n, d, base=10000.0):
    a = fp32(np.arange(float(n))[:, None] * fp32(thetas(d, base))[None, :])
    return fp32(np.cos(a)), fp32(np.sin(a))


def bf16_order(x):
    """Integer position of bf16 values on the number line (normal range): sign * ((e + 127) * 128 + mantissa)."""
    x = np.asarray(x, dtype=np.float64)
    m, e = np.frexp(np.abs(x))  # |x| = m * 2**e, m in [0.5, 1)
    bits = np.where(x == 0, 0, (e - 1 + 127) * 128 + np.rint((2 * m - 1) * 128)).astype(np.int64)
    return np.sign(x).astype(np.int64) * bits


# ---------------------------------------------------------------- flashinfer-585, sglang-3134


@pytest.mark.parametrize("fmt,rnd,half", [("fp16", fp16, 2.0**-12), ("bf16", bf16, 2.0**-9)])
def test_flashinfer_585_and_sglang_3134(fmt, rnd, half):
    m = reproduce("flashinfer-585").measured
    c, s = fp32_table(4096, 128)
    assert m[f"{fmt}_cache_max_abs_error"] == pytest.approx(max(np.abs(rnd(c) - c).max(), np.abs(rnd(s) - s).max()),
                                                            rel=1e-3)
    assert m[f"{fmt}_cache_max_abs_error"] <= half * (1 + 1e-3)  # half the spacing below 1
    q = rnd(np.random.default_rng(0).standard_normal((4096, 128)))
    ref = neox(q, c, s, rnd)
    low = neox(q, rnd(c), rnd(s), rnd)
    assert m[f"{fmt}_cache_outputs_changed"] == pytest.approx(np.mean(low != ref), abs=1e-4)
    low2 = neox(q, rnd(c), rnd(s), rnd, round_products=True)
    assert m[f"{fmt}_math_outputs_changed"] == pytest.approx(np.mean(low2 != ref), abs=1e-4)
    # in units of the spacing at the pair's norm: 1 ulp (table) and 2 ulps (products too)
    norm = np.hypot(q[:, :64], q[:, 64:])
    p = 11 if fmt == "fp16" else 8
    ulp = np.ldexp(1.0, np.frexp(np.concatenate([norm, norm], axis=1))[1] - p)
    assert m[f"{fmt}_cache_max_error_in_pair_ulps"] == (np.abs(low - ref) / ulp).max() == 1.0
    assert m[f"{fmt}_math_max_error_in_pair_ulps"] == (np.abs(low2 - ref) / ulp).max() == 2.0
    assert reproduce("flashinfer-585").verdict == "not recomputable"
    r = reproduce("sglang-3134")
    assert r.verdict == "not recomputable" and r.measured["bf16_math_outputs_changed"] == m["bf16_math_outputs_changed"]


# ---------------------------------------------------------------- keras-hub-1497 / #1508


def test_keras_hub_1497_and_1508():
    r = reproduce("keras-hub-1497")
    m = r.measured
    assert bf16(8190.0) == bf16(8191.0) == 8192.0 == m["bf16_of_8190"] == m["bf16_of_8191"]
    assert m["bf16_spacing_4096_8192"] == 2.0 ** (12 - 7)
    assert m["distinct_positions_8192"] == np.unique(bf16(np.arange(8192.0))).size == 897
    # all-bf16 angles (positions, inv_freq, product): some angle is off by nearly pi
    th = thetas(256, 10000.0)
    pos = np.arange(8192.0)
    err = np.abs(bf16(bf16(pos)[:, None] * bf16(fp32(th))[None, :]) - pos[:, None] * th[None, :])
    assert np.abs(err - 2 * np.pi * np.rint(err / (2 * np.pi))).max() > 3.1
    assert m["bf16_lowp_max_angle_error_8192"] > 3.1 and m["fp32_max_angle_error_8192"] < 1e-3
    assert r.verdict == "reproduced" and reproduce("keras-hub-1508").verdict == "reproduced"


# ---------------------------------------------------------------- megatron-lm-744, deeperspeed-61, automodel-2549


@pytest.mark.parametrize("name,dim,rot,rnd,L", [("megatron-lm-744", 128, 128, bf16, 4096),
                                                 ("deeperspeed-61", 96, 24, fp16, 2048)])
def test_inv_freq_cast(name, dim, rot, rnd, L):
    r = reproduce(name)
    m = r.measured
    th = thetas(rot, 10000.0)
    assert m["inv_freq_max_relative_error"] == pytest.approx((np.abs(rnd(th) - th) / th).max(), rel=1e-3)
    # only the buffer cast: positions and product in float32
    pos = np.arange(float(L))
    d = fp32(pos[:, None] * rnd(fp32(th))[None, :]) - pos[:, None] * th[None, :]
    err = np.abs(d - 2 * np.pi * np.rint(d / (2 * np.pi))).max()
    assert m[f"inv_freq_cast_max_angle_error_{L}"] == pytest.approx(err, abs=3e-3)  # + the cache's rounding
    assert m[f"exact_positions_{L}"] == int(np.count_nonzero(rnd(pos) == pos))
    assert r.verdict == "not recomputable"


def test_automodel_2549():
    r = reproduce("automodel-2549")
    m = r.measured
    pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # the real llama3 frequencies

    cfg = LlamaConfig(hidden_size=2048, num_attention_heads=32, head_dim=64, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    inv = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")[0].double().numpy()
    back = fp32(bf16(inv))  # .float() of the bf16 buffer: the same bf16 value
    assert np.array_equal(back, bf16(inv)) and m["upcast_recovers_bits"] is False
    assert m["inv_freq_max_relative_error"] == pytest.approx((np.abs(bf16(inv) - inv) / inv).max(), rel=2e-3)
    pos = np.arange(1024.0)
    d = fp32(pos[:, None] * bf16(inv)[None, :]) - pos[:, None] * inv[None, :]
    err = np.abs(d - 2 * np.pi * np.rint(d / (2 * np.pi))).max()
    assert m["inv_freq_cast_max_angle_error_1024"] == pytest.approx(err, abs=3e-3)
    assert r.published["max_kl"] == 1.1e-2 and r.verdict == "reproduced"


# ---------------------------------------------------------------- vllm-fork-503 / #1055


def test_vllm_fork_503_and_1055():
    r = reproduce("vllm-fork-503")
    m = r.measured
    slopes = np.array([2.0 ** (-8 * k / 32) for k in range(1, 33)])  # MPT-7B: 32 heads, max bias 8
    for L in (2048, 8192):
        exact = slopes[:, None] * np.arange(float(L))[None, :]
        assert m[f"bf16_max_bias_error_{L}"] == pytest.approx(np.abs(bf16(exact) - exact).max(), rel=1e-3)
        assert m[f"fp32_max_bias_error_{L}"] == pytest.approx(np.abs(fp32(exact) - exact).max(), rel=1e-3)
        assert m[f"bf16_distinct_biases_steepest_head_{L}"] == np.unique(bf16(exact[0])).size
    # slope 2**-0.25 at distance 2047: bias ~1721 in [1024, 2048), bf16 spacing 8, error up to 4
    assert slopes[0] * 2047 == pytest.approx(1721.3, abs=0.1) and m["bf16_max_bias_error_2048"] <= 4.0
    assert r.verdict == "reproduced"
    assert reproduce("vllm-fork-1055").verdict == "not recomputable"


# ---------------------------------------------------------------- sglang-29729 / #33117


def test_sglang_cache_downcast():
    r = reproduce("sglang-33117")
    m = r.measured
    c, s = fp32_table(4096, 128, 1e6)
    assert max(np.abs(bf16(c) - c).max(), np.abs(bf16(s) - s).max()) <= 2.0**-9
    # the fp32 table's own angle error at 4095: inv_freq and the product rounded to fp32
    th = thetas(128, 1e6)
    d = fp32(4095.0 * fp32(th)) - 4095.0 * th
    assert m["fp32_cache_max_rotation_error_4096"] >= np.abs(d).max()
    assert m["bf16_cache_max_rotation_error_4096"] > 5 * m["fp32_cache_max_rotation_error_4096"]
    assert m["fp32_cache_max_rotation_error_131072"] > m["fp32_cache_max_rotation_error_4096"] * 10
    assert r.verdict == "reproduced" and reproduce("sglang-29729").verdict == "not recomputable"


# ---------------------------------------------------------------- uni-d2-6


def test_uni_d2_6():
    r = reproduce("uni-d2-6")
    m = r.measured
    assert bf16(256.0) == 256 and bf16(257.0) == 256 and m["first_inexact_position"] == 257
    for L in (1024, 4096):
        v = bf16(np.arange(float(L)))
        assert m[f"distinct_positions_{L}"] == np.unique(v).size
        _, counts = np.unique(v, return_counts=True)
        assert m[f"max_run_{L}"] == counts.max()
    assert fp16(2048.0) == 2048 and fp16(2049.0) == 2048 and m["fp16_exact_positions_to"] == 2048
    assert r.verdict == "reproduced"


# ---------------------------------------------------------------- aiter-4765


def test_aiter_4765():
    r = reproduce("aiter-4765")
    m = r.measured
    # 14993 = 117 * 128 + 17: exponent 117 - 127 = -10, mantissa 17/128
    assert m["bf16_value_14993_ulps_from_zero"] == 2.0**-10 * (1 + 17 / 128)
    assert bf16_order([0.00110626220703125])[0] == 14993
    q = bf16(np.random.default_rng(0).standard_normal((4096, 4, 64)))
    a = fp32((np.arange(4096) % 32)[:, None] * fp32(thetas(64, 10000.0))[None, :])
    c, s = bf16(np.cos(a))[:, None, :], bf16(np.sin(a))[:, None, :]
    ref = neox(q, c, s, bf16)
    low = neox(q, c, s, bf16, round_products=True)
    ulps = np.abs(bf16_order(low) - bf16_order(ref))
    assert m["bf16_math_max_ulp_distance"] == ulps.max() >= 10000
    i = ulps.argmax()
    assert low.flat[i] == 0.0 and m["reference_at_max"] == ref.flat[i]  # exact cancellation of rounded products
    assert m["bf16_math_max_abs_error"] == pytest.approx(np.abs(low - ref).max(), rel=1e-3)
    assert m["share_over_1000_ulps"] == pytest.approx(np.mean(ulps > 1000), abs=1e-4)
    assert r.verdict == "reproduced"
