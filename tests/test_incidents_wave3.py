"""The incidents added with issue 40 (third wave): each measured figure against an independent computation.

Oracles (never the tool's rounding): ``rne`` rounds float64 values to p significant bits with frexp/rint (ties
to even), frequencies come from mpmath, transcendentals from float64 (one rounding, far below the fp16 / bf16
steps compared), and Grounding DINO's embedding from transformers' own function, imported and run.  Each
published number an entry calls wrong is asserted to differ from the recomputation; each verdict is asserted.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import _thirdparty
from precision_audit.incidents import reproduce
from test_incidents import bf16, fp16, fp32, rne, thetas

mpmath.mp.prec = 100


def wrapped(d: np.ndarray) -> np.ndarray:
    return np.abs(d - 2 * np.pi * np.rint(d / (2 * np.pi)))


def distinct(x: np.ndarray) -> int:
    return int(np.unique(x).size)


# ---------------------------------------------------------------- openvino (f16 position ids, f16 inv_freq)


def test_openvino_25883():
    r = reproduce("openvino-25883")
    m = r.measured
    assert fp16(2048.0) == 2048 and fp16(2049.0) == 2048 and m["first_inexact_position"] == 2049
    pos = np.arange(4096.0)
    assert m["exact_positions_4096"] == int(np.count_nonzero(fp16(pos) == pos)) == 2048 + 1024
    th = thetas(128, 10000.0)
    err = wrapped(fp16(fp16(pos)[:, None] * fp16(fp32(th))[None, :]) - pos[:, None] * th[None, :]).max(axis=1)
    assert m["lowp_max_angle_error_2048"] == pytest.approx(err[:2048].max(), rel=2e-3)
    assert m["lowp_max_angle_error_4096"] == pytest.approx(err.max(), rel=2e-3)
    assert m["fix_max_angle_error_4096"] < 1e-3
    assert r.verdict == "reproduced"


def test_openvino_33214_and_29556():
    r = reproduce("openvino-33214")
    m = r.measured
    # 11 significant bits: spacing 2**(e - 10) in [2**e, 2**(e+1))
    assert m["fp16_spacing_2048_4096"] == 2.0 ** (11 - 10) and m["fp16_spacing_4096_8192"] == 2.0 ** (12 - 10) == 4
    assert fp16(4097.0) == 4096 and fp16(4098.0) == 4096 and fp16(4099.0) == 4100  # ties to even multiples of 4
    pos = np.arange(8192.0)
    assert m["exact_positions_8192"] == int(np.count_nonzero(fp16(pos) == pos)) == 4096
    assert m["max_position_error_8192"] == np.abs(fp16(pos) - pos).max() == 2
    assert m["first_inexact_position"] == 2049 and r.verdict == "reproduced"
    q = reproduce("openvino-29556")
    assert fp16(65519.0) == 65504 and np.isinf(fp16(65520.0))
    assert q.measured["non_finite_positions_131072"] == 131072 - 65520 == 65552
    assert q.verdict == "not recomputable"


def test_openvino_35674():
    r = reproduce("openvino-35674")
    m = r.measured
    for tag, base in (("qwen25_vl", 1e6), ("qwen3_vl", 5e6)):
        th = thetas(128, base)
        inv = fp16(fp32(th))  # the f32 constant compressed to f16 (subnormals below 2**-14 on the 2**-24 grid)
        assert m[f"{tag}_frequencies_subnormal_in_f16"] == int(np.count_nonzero(th < 2.0**-14))
        pos = np.arange(6000.0)
        err = wrapped(fp32(pos[:, None] * inv[None, :]) - pos[:, None] * th[None, :]).max(axis=1)
        assert m[f"{tag}_max_angle_error_101"] == pytest.approx(err[:101].max(), rel=2e-3)
        assert m[f"{tag}_max_angle_error_4096"] == pytest.approx(err[:4096].max(), rel=2e-3)
        # the thresholds are crossed where the hand computation crosses them (within a position or two)
        assert abs(m[f"{tag}_first_position_error_over_0_1_rad"] - int(np.argmax(err > 0.1))) <= 2
        assert abs(m[f"{tag}_first_position_error_over_1_rad"] - int(np.argmax(err > 1.0))) <= 2
    # at 100 the drift is a few hundredths of a radian, far from 'significant'; sin/cos are 1-Lipschitz
    assert 0.01 < m["qwen25_vl_max_angle_error_101"] < 0.03
    x = np.linspace(0, 2 * np.pi, 1001)
    assert np.all(np.abs(np.cos(x + 0.05) - np.cos(x)) <= 0.05)
    assert r.verdict == "differs" and len(r.reasons) == 2


# ---------------------------------------------------------------- vllm-54620 / funasr-3597


def funasr_fp16(T: int, depth: int = 560) -> np.ndarray:
    """FunASR's encode with every op's result rounded to fp16 by frexp/rint; max |error| per position."""
    pos = np.arange(1, T + 1, dtype=np.float64)
    inc = fp16(fp16(math.log(float(fp16(10000.0)))) / (depth / 2 - 1))
    inv = fp16(np.exp(fp16(np.arange(depth // 2) * -inc)))
    a = fp16(pos[:, None] * inv[None, :])
    ex = pos[:, None] * np.array([float(mpmath.exp(-i * mpmath.log(10000) / (depth / 2 - 1)))
                                  for i in range(depth // 2)])[None, :]
    enc = np.concatenate([fp16(np.sin(a)), fp16(np.cos(a))], axis=1)
    return np.abs(enc - np.concatenate([np.sin(ex), np.cos(ex)], axis=1)).max(axis=1)


def test_vllm_54620_and_funasr_3597():
    r = reproduce("vllm-54620")
    m = r.measured
    assert fp16(math.log(10000.0)) == m["fp16_log_10000"] == 9.2109375  # spacing 2**-7 in [8, 16)
    err = np.maximum.accumulate(funasr_fp16(1000))
    for T in (100, 200, 500, 1000):
        assert m[f"max_abs_error_T{T}"] == pytest.approx(err[T - 1], rel=2e-3)
    assert m["first_T_max_abs_error_over_0_42"] == int(np.argmax(err >= 0.42)) + 1 < 1000  # "several hundred"
    # the fix: one fp16 rounding of values in [-1, 1]: at most half the spacing below 1, 2**-12
    assert m["fix_max_abs_error"] == pytest.approx(2.0**-12, rel=1e-3) and abs(2.0**-12 - 0.0002) < 5e-5
    assert r.verdict == "reproduced"
    q = reproduce("funasr-3597")
    assert q.verdict == "not recomputable" and q.measured["max_abs_error_T1000"] == m["max_abs_error_T1000"]


# ---------------------------------------------------------------- transformers-47674


def test_transformers_47674_against_transformers():
    torch = pytest.importorskip("torch")
    encode = _thirdparty.private("transformers.models.grounding_dino.modeling_grounding_dino",
                                 "encode_sinusoidal_position_embedding")
    r = reproduce("transformers-47674")
    m = r.measured
    for L in (8, 256):
        ids = torch.arange(L).unsqueeze(0)  # int64, as the model builds them
        emb = encode(ids[..., None], num_pos_feats=256)
        assert emb.dtype == torch.int64
        e = emb[0].numpy()
        assert m[f"zero_share_{L}"] == pytest.approx(float(np.mean(e == 0)), abs=1e-4)
        assert m[f"distinct_rows_{L}"] == int(np.unique(e, axis=0).shape[0])
        assert set(np.unique(e).tolist()) <= {-1, 0, 1}
        fixed = encode(ids[..., None].float(), num_pos_feats=256)[0].numpy()  # the fix: float ids
        assert np.mean(fixed[1:] == 0) < 0.01 and np.unique(fixed, axis=0).shape[0] == L  # sin(0) = 0 at id 0
    assert r.published["zero_share_8"] == 0.934 and r.verdict == "reproduced"


# ---------------------------------------------------------------- foundry-236, onetrainer-1177, simpletuner-2038


def test_foundry_236():
    r = reproduce("foundry-236")
    m = r.measured
    assert bf16(256.0) == 256 and bf16(257.0) == 256 and m["first_aliasing_index"] == 257
    assert m["distinct_indices_2048"] == distinct(bf16(np.arange(2048.0))) == 641
    assert m["distinct_indices_4096"] == distinct(bf16(np.arange(4096.0))) == 769
    assert m["bf16_spacing_2048_4096"] == 2.0 ** (11 - 7) == 16
    assert r.published["first_aliasing_index"] == 2048 != m["first_aliasing_index"]
    assert r.verdict == "differs" and len(r.reasons) == 1 and r.reasons[0].startswith("first_aliasing_index")


def test_flux_ids_onetrainer_1177_and_simpletuner_2038():
    r = reproduce("onetrainer-1177")
    m = r.measured
    ids = np.arange(512.0)
    assert m["text_ids_distinct_512"] == distinct(bf16(ids)) == 385
    assert m["text_ids_exact_512"] == int(np.count_nonzero(bf16(ids) == ids)) == 256 + 128
    assert m["fp16_text_ids_exact_512"] == int(np.count_nonzero(fp16(ids) == ids)) == 512
    for n in (64, 128, 256):
        assert np.array_equal(bf16(np.arange(float(n))), np.arange(float(n)))
    assert m["image_ids_exact"] is True
    assert r.verdict == "differs" and len(r.reasons) == 1 and r.reasons[0].startswith("image_ids")
    assert reproduce("simpletuner-2038").verdict == "not recomputable"


# ---------------------------------------------------------------- flash-attention-846


def test_flash_attention_846():
    r = reproduce("flash-attention-846")
    m = r.measured
    s = float(mpmath.sqrt(2) / 2)  # the 12- and 16-head sets' largest inexact slope, 2**-0.5
    assert fp16(s) == bf16(s) == 0.70703125 == 181 / 256
    assert m["fp16_max_bias_error_12_heads_511"] == pytest.approx(511 * (s - 0.70703125), rel=1e-3)
    assert m["bf16_max_bias_error_16_heads_2047"] == pytest.approx(2047 * (s - 0.70703125), rel=1e-3)
    assert m["fp16_inexact_slopes_8"] == 0  # 2**-k
    # 12 heads: 2**-k (k = 1..8) exact, plus 2**-(k/2) for k = 1, 3, 5, 7: four inexact
    extra = [2.0 ** (-k / 2) for k in (1, 3, 5, 7)]
    assert m["fp16_inexact_slopes_12"] == sum(fp16(x) != x for x in extra) == 4
    assert r.verdict == "not recomputable"


# ---------------------------------------------------------------- pegainfer-220, imp-1316


def test_pegainfer_220():
    r = reproduce("pegainfer-220")
    m = r.measured
    assert m["full_cache_bytes"] == 40960 * 128 * 2 == 10_485_760
    assert m["full_cache_mb"] == pytest.approx(10.49, abs=0.01) and m["full_cache_mib"] == 10.0
    assert m["uncovered_positions"] == 40960 - 4096 and m["uncovered_share"] == 0.9
    assert r.verdict == "reproduced"


def test_imp_1316():
    r = reproduce("imp-1316")
    m = r.measured
    th = fp32(thetas(8, 10000.0))
    c = fp32(1 / (2 * math.pi))
    for pos in (2000, 131071):
        a = fp32(pos * th)
        t = fp32(a * c)
        d = np.abs(2 * math.pi * (t - np.rint(t)) - (a - 2 * math.pi * np.rint(a / (2 * math.pi))))
        assert m[f"reduction_error_{pos}"] == pytest.approx(float(np.minimum(d, 2 * math.pi - d).max()), rel=5e-3)
    # the reduction alone is far below the published 1.0e-2 at 131071: the rest is the intrinsic's
    assert m["reduction_error_131071"] < r.published["max_gpu_cpu_131071"] / 10
    assert r.verdict == "not recomputable"
