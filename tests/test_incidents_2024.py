"""The incidents of 2023-2026 added with issue 30: each measured figure against an independent computation.

Oracles (never the tool's own rounding): ``rne`` rounds float64 values to p significant bits with
frexp/rint (ties to even; exact for the products below, each of two <= 26-bit numbers), binade facts
are integer arithmetic, frequencies and ramp bounds come from mpmath, cos/sin (where a stored value is
compared) from mpmath, the gpt-oss frequencies also from transformers' ROPE_INIT_FUNCTIONS and the
Falcon bias from transformers' own build_alibi_tensor, both imported and run.  Each published number an
entry calls wrong is asserted to differ from the recomputation; each verdict is asserted.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import mpmath
import numpy as np
import pytest

import _thirdparty
from precision_audit.incidents import reproduce
from test_incidents import bf16, fp16, fp32, rne, thetas  # the same oracles (frexp/rint, mpmath)

mpmath.mp.prec = 100
FP16_MAX = 65504.0
DATA = Path(__file__).parent / "data"


def wrapped(d: np.ndarray) -> np.ndarray:
    return np.abs(d - 2 * np.pi * np.rint(d / (2 * np.pi)))


def spacing(x: float, p: int) -> float:
    """The spacing of a p-bit format at x (normal range): 2**(floor(log2 x) - p + 1), by integer arithmetic."""
    return 2.0 ** (math.frexp(x)[1] - p)


# ---------------------------------------------------------------- openvino-34716


def test_openvino_34716():
    r = reproduce("openvino-34716")
    m = r.measured
    # [4096, 8192): 11 bits -> spacing 4; 4173 = 4*1043 + 1 rounds down, 4174 = 4*1043.5 ties to the even 4*1044
    assert spacing(4173, 11) == m["fp16_spacing_4096_8192"] == 4
    assert fp16(4173.0) == m["fp16_of_4173"] == 4172 and fp16(4174.0) == m["fp16_of_4174"] == 4176
    assert (1043 % 2, 1044 % 2) == (1, 0)
    assert fp16(2048.0) == 2048 and fp16(2049.0) == 2048 and m["first_inexact_position"] == 2049
    # the all-f16 path: f16 positions, f16 frequencies, f16 product; angle error by hand
    th, pos = thetas(128, 5e6), np.arange(8192.0)
    err = wrapped(fp16(fp16(pos)[:, None] * fp16(th)[None, :]) - pos[:, None] * th[None, :])
    worst = err.max(axis=1)
    assert m["first_position_angle_error_over_1_rad"] == int(np.argmax(worst > 1.0)) == 2049
    for L in (2048, 4096, 8192):
        assert m[f"lowp_max_angle_error_{L}"] == pytest.approx(worst[:L].max(), rel=1e-3)  # 4 digits
    assert m["angle_error_4173"] == pytest.approx(worst[4173], rel=1e-3)
    assert r.verdict == "reproduced" and not r.reasons


# ---------------------------------------------------------------- stable-audio-3-81


def test_stable_audio_3_81():
    r = reproduce("stable-audio-3-81")
    m = r.measured
    th = thetas(32, 10000.0)  # RoPE on 32 dims: 16 pairs, inv_freq[0] = 1 exactly
    assert th.size == m["pairs"] == r.published["pairs"] == 16 and th[0] == 1.0
    last = 4092 + 64 - 1  # 64 prepended global tokens
    assert m["max_angle"] == last * th[0] == 4155 == r.published["max_angle"]
    assert spacing(4155.0, 8) == m["bf16_spacing_at_max_angle"] == 32  # [4096, 8192), 8 bits
    top = last * th
    assert m["pairs_spacing_over_2pi"] == sum(spacing(a, 8) > 2 * math.pi for a in top) == 3
    assert m["pairs_spacing_at_least_2_rad"] == sum(spacing(a, 8) >= 2 for a in top) == 5
    # the '9/16' criterion: spacing >= 1/4 rad at the pair's largest angle, i.e. largest angle >= 32 rad
    assert m["pairs_destroyed"] == sum(a >= 32 for a in top) == 9 == r.published["pairs_destroyed"]
    assert spacing(1023.0, 8) == 4 < 2 * math.pi < spacing(1024.0, 8) == 8
    assert m["bf16_spacing_first_over_2pi_at"] == 1024
    # product-only bf16: bf16(m * fp32(theta)) (exact float64 product, one rounding) per pair
    pos = np.arange(last + 1.0)
    err = wrapped(bf16(pos[:, None] * fp32(th)[None, :]) - pos[:, None] * th[None, :]).max(axis=0)
    assert np.allclose(m["angle_only_pair_errors"], err, rtol=2e-3, atol=1e-3)
    assert m["pairs_error_over_0.1_rad"] == int(np.count_nonzero(err > 0.1)) == 9
    assert m["fix_max_rotation_error"] < 1e-6
    assert r.verdict == "reproduced" and "velocity cos 0.5477" in r.verdict_line


# ---------------------------------------------------------------- sglang-jax-1472


def test_sglang_jax_1472():
    r = reproduce("sglang-jax-1472")
    m = r.measured
    for base, tag in ((10000.0, "base_10000"), (1e6, "base_1000000")):
        th = thetas(128, base)
        inv = bf16(fp32(th))  # the float32 buffer cast to bf16
        for L in (1024, 4096):
            pos = np.arange(float(L))
            err = wrapped(fp32(pos[:, None] * inv[None, :]) - pos[:, None] * th[None, :])
            assert m[f"lowp-inv-freq_max_angle_error_{L}_{tag}"] == pytest.approx(err.max(), abs=1e-3)
        e4095 = wrapped(fp32(4095 * inv) - 4095 * th)
        assert m[f"max_angle_error_4095_{tag}"] == pytest.approx(e4095.max(), abs=1e-3)
        assert m[f"pairs_off_over_1_256_rad_4095_{tag}"] == int(np.count_nonzero(e4095 > 2.0**-8))
    # cos/sin values that differ from the fix's (bf16 cache of float32 cos/sin), base 1e6, by mpmath
    th = thetas(128, 1e6)
    bug_angle, fix_angle = fp32(4095 * bf16(fp32(th))), fp32(4095 * fp32(th))

    def cache(a):
        return [bf16(fp32(float(f(mpmath.mpf(float(x)))))) for f in (mpmath.cos, mpmath.sin) for x in a]

    differ = sum(int(b != f) for b, f in zip(cache(bug_angle), cache(fix_angle)))
    assert m["cos_sin_values_differing_4095_base_1000000"] == differ
    # the repro's 72/128 and 0.828125 are not recomputed (its q and tolerance are not given)
    assert r.verdict == "reproduced" and "72/128" in r.verdict_line


# ---------------------------------------------------------------- megatron-lm-535


def test_megatron_lm_535():
    r = reproduce("megatron-lm-535")
    m = r.measured
    # fp16's largest finite value: (2 - 2**-10) * 2**15 = 65504; the largest position 32767 is far below it
    assert m["fp16_max_finite"] == (2 - 2**-10) * 2**15 == FP16_MAX
    assert m["largest_position"] == 32767 < FP16_MAX  # the published 'exceeds fp16 range' is wrong
    assert fp16(32767.0) == m["largest_position_in_fp16"] == 32768 and np.isfinite(fp16(32767.0))
    assert spacing(16384, 11) == m["fp16_spacing_16384_32768"] == 16 and spacing(8192, 11) == 8
    # exact integers: 0..2048, then 1023 in (2048, 4096), 1024 in each binade up to 32768
    assert m["fp16_exact_positions_32768"] == 2049 + 1023 + 3 * 1024 == 6144
    p = fp16(np.arange(32768.0))
    assert m["fp16_distinct_positions_32768"] == np.unique(p).size == 6145
    runs = np.diff(np.flatnonzero(np.concatenate([[True], p[1:] != p[:-1], [True]])))
    assert m["fp16_max_run_32768"] == runs.max() == 17
    tail = np.unique(p[16384:]).size
    assert m["tail_distinct_values_16384_32768"] == tail == 1025 and tail > 1  # 'all the same' is wrong
    assert r.verdict == "differs"
    assert {x.split(":")[0] for x in r.reasons} == {"exceeds_fp16_range", "tail_identical"}


# ---------------------------------------------------------------- tinygrad-4587


def test_tinygrad_4587():
    r = reproduce("tinygrad-4587")
    m = r.measured
    # 65504 = 2047 * 32 is fp16's largest finite; 65520 = 2047.5 * 32 ties to the even 2048 * 32 = 2**16: inf
    assert r.published["half_max"] == m["half_max"] == 2047 * 32
    assert list(fp16([65504.0, 65519.0, 65520.0])) == m["fp16_of_65504_65519_65520"] == [65504, 65504, np.inf]
    assert m["first_position_inf"] == 65520 and m["first_context_with_inf"] == 65521
    assert m["first_context_with_inf"] != r.published["half_max"] + 1  # 'context exceeds half.max' is off by 16
    assert m["first_angle_overflow_positions"] == [65520] and m["frequencies_overflowing"] == 64
    assert m["non_finite_angles_131072"] == (131072 - 65520) * 64
    assert m["fix_non_finite_angles_131072"] == 0
    assert r.verdict == "differs" and len(r.reasons) == 1 and r.reasons[0].startswith("claim:")


# ---------------------------------------------------------------- vllm-27722


def _gpt_oss_frequencies(truncate: bool) -> np.ndarray:
    cfg = json.loads((DATA / "gpt-oss-20b.json").read_text())
    params = {**cfg["rope_scaling"], "rope_theta": float(cfg["rope_theta"]), "truncate": truncate}
    config_cls = _thirdparty.private("transformers", "GptOssConfig")
    init = _thirdparty.private("transformers.modeling_rope_utils", "ROPE_INIT_FUNCTIONS")["yarn"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_cls(head_dim=cfg["head_dim"], max_position_embeddings=cfg["max_position_embeddings"],
                            rope_parameters=params)
    inv, _ = init(config, "cpu")
    return inv.double().numpy()


def test_vllm_27722():
    r = reproduce("vllm-27722")
    m = r.measured
    cfg = json.loads((DATA / "gpt-oss-20b.json").read_text())
    rs = cfg["rope_scaling"]
    d, L0, base = cfg["head_dim"], rs["original_max_position_embeddings"], mpmath.mpf(cfg["rope_theta"])

    def dim_for(rotations):  # the YaRN correction dim: d ln(L0 / (2 pi r)) / (2 ln base)
        return d * mpmath.log(L0 / (rotations * 2 * mpmath.pi)) / (2 * mpmath.log(base))

    low, high = dim_for(rs["beta_fast"]), dim_for(rs["beta_slow"])
    assert m["low"] == pytest.approx(float(low), abs=1e-9) and m["high"] == pytest.approx(float(high), abs=1e-9)
    assert abs(r.published["low"] - float(low)) < 1e-12 and abs(r.published["high"] - float(high)) < 1e-12
    assert (m["truncated_low"], m["truncated_high"]) == (math.floor(low), math.ceil(high)) == (8, 18)
    # transformers' own yarn frequencies (float32), declared (truncate false) and truncated
    declared, truncated = _gpt_oss_frequencies(False), _gpt_oss_frequencies(True)
    differ = np.flatnonzero(declared != truncated)
    assert m["frequencies"] == declared.size == 32
    assert m["differing_indices"] == differ.tolist() == list(range(9, 18))
    assert m["frequencies_differing"] == differ.size == 9
    rel = np.abs(truncated - declared) / declared
    assert m["max_relative_difference"] == pytest.approx(rel.max(), rel=1e-3)
    assert m["max_relative_difference_at"] == int(rel.argmax()) == 17
    for D, expected in ((256, 0.057), (4096, 0.90)):
        err = wrapped(D * (truncated - declared))
        assert m[f"pairwise_error_{D}"] == pytest.approx(err.max(), abs=1e-3)
        assert m[f"pairwise_error_{D}"] == pytest.approx(expected, abs=0.01)
        assert m[f"pairwise_error_{D}_at"] == int(err.argmax())
    assert r.verdict == "reproduced" and not r.reasons


# ---------------------------------------------------------------- executorch-9393


def test_executorch_9393():
    r = reproduce("executorch-9393")
    m = r.measured
    # the cast rounds cos/sin once: the rotation error is at most the bf16 rounding bound, 2**-8 * sqrt(2) ...
    assert m["bf16_cache_bound"] <= 2**-8 * math.sqrt(2)
    assert m["float32_table_max_rotation_error_2048"] < 2e-4 < m["bfloat16_table_max_rotation_error_2048"]
    assert m["bfloat16_table_max_rotation_error_2048"] <= m["bf16_cache_bound"] + 2e-4
    # ... and the rotated q: float32 rotation, one bf16 cast (2**-8 relative per component) plus cos/sin's own
    for band in ("0_2048", "2048_8192"):
        keep, cast = m[f"fp32_buffers_max_rel_error_{band}"], m[f"cast_buffers_max_rel_error_{band}"]
        hf = m[f"transformers_path_max_rel_error_{band}"]
        assert keep <= 2**-8 and keep < cast <= 2**-8 + m["bf16_cache_bound"] and cast < hf
    assert r.verdict == "reproduced"


# ---------------------------------------------------------------- tensorrt-model-connect-667


@pytest.mark.parametrize("heads,L", [(32, 1024), (32, 2048), (64, 2048)])
def test_tensorrt_model_connect_667(heads, L):
    torch = pytest.importorskip("torch")
    falcon = pytest.importorskip("transformers.models.falcon.modeling_falcon")
    m = reproduce("tensorrt-model-connect-667").measured
    model = {32: "falcon_rw_1b", 64: "falcon_rw_7b"}[heads]
    # the reference: transformers' Falcon bias (bf16 slopes x key positions in bf16), run here
    ref = falcon.build_alibi_tensor(torch.ones(1, L, dtype=torch.long), heads, torch.float32)[:, 0, :].double().numpy()
    # the port: float32 slopes (base ** k, each a float32 pow: within an ulp) times exact positions
    k = np.arange(1, heads + 1)
    slopes = fp32(np.array([float(mpmath.mpf(2) ** (-mpmath.mpf(8) * kk / heads)) for kk in k]))
    port = fp32(slopes[:, None] * np.arange(L)[None, :])
    d = ref - port
    assert m[f"{model}_max_bias_difference_{L}"] == pytest.approx(np.abs(d).max(), rel=1e-3)
    spread = (d.max(axis=1) - d.min(axis=1)).max() / 8  # HF adds alibi / sqrt(head_dim = 64)
    assert m[f"{model}_logit_spread_{L}"] == pytest.approx(spread, rel=1e-3)
    assert m["falcon_rw_1b_bf16_slope_0"] == float(bf16(2**-0.25)) == 0.83984375


def test_tensorrt_model_connect_667_verdict():
    r = reproduce("tensorrt-model-connect-667")
    assert r.verdict == "reproduced" and "6/10" in r.verdict_line
    assert r.measured["falcon_rw_1b_logit_spread_2048"] > 1.0


# ---------------------------------------------------------------- the qualitative reports


def test_transformer_engine_1245():
    r = reproduce("transformer-engine-1245")
    m = r.measured
    # a float32 rotation cast to bf16 once: <= 2**-8 relative per component, whatever the base
    for model in ("llama31", "llama2"):
        for band in ("0_8192", "8192_131072"):
            assert m[f"{model}_bf16_out_max_rel_error_{band}"] <= 2**-8
    assert m["llama31_bf16_out_max_rel_error_0_8192"] == pytest.approx(m["llama2_bf16_out_max_rel_error_0_8192"],
                                                                      rel=0.2)
    assert r.verdict == "not recomputable" and r.verdict_line == "not recomputable: qualitative (a loss gap, no figure)"


def test_flash_attention_823():
    r = reproduce("flash-attention-823")
    m = r.measured
    # bf16 cos/sin: |cos - c| <= 2**-9 each, so a pair moves by <= 2**-9 * sqrt(2) of its length, plus the cast
    bound = 2**-9 * math.sqrt(2) + 2**-8
    for band in ("0_2048", "2048_8192"):
        assert m[f"fp32_cos_sin_bf16_out_max_rel_error_{band}"] < m[f"bf16_cos_sin_max_rel_error_{band}"] <= bound
        assert m[f"bf16_cos_sin_max_rel_error_{band}"] < r.published["bf16_relative_error"] / 50
    assert r.verdict == "not recomputable" and "not stated" in r.verdict_line


def test_when_precision_meets_position():
    r = reproduce("when-precision-meets-position")
    m = r.measured
    # exact RoPE is shift invariant: a float32 path stays far below the bf16 ones, which stay flat with length
    for L in (4096, 32768, 65536):
        assert m[f"fp32_score_spread_{L}"] < m[f"bf16_cache_score_spread_{L}"] < 1 < m[f"lowp_score_spread_{L}"]
    assert m["bf16_cache_score_spread_65536"] < 2 * m["bf16_cache_score_spread_4096"]
    assert m["fp32_score_spread_65536"] > 5 * m["fp32_score_spread_4096"]
    assert r.verdict == "not recomputable" and r.url == "https://arxiv.org/abs/2411.13476"


def _t5_bucket_bf16_ops(d: int, max_exact: int = 8, max_distance: int = 128, room: int = 8) -> int:
    """T5's large-distance bucket with every operation rounded to bfloat16 (bf16(x) of the float64 result: exact
    for / and *; log correctly rounded through float64, whose 53 bits leave no bf16 rounding in doubt here)."""
    if d < max_exact:
        return d
    x = bf16(float(bf16(d)) / max_exact)
    ratio = bf16(float(bf16(math.log(float(x)))) / float(bf16(math.log(float(bf16(max_distance / max_exact))))))
    return min(max_exact + int(float(bf16(float(ratio) * room))), max_exact + room - 1)


def _t5_bucket_exact(d: int, max_exact: int = 8, max_distance: int = 128, room: int = 8) -> int:
    if d < max_exact:
        return d
    with mpmath.workprec(200):
        v = mpmath.log(mpmath.mpf(d) / max_exact) / mpmath.log(mpmath.mpf(max_distance) / max_exact) * room
    return min(max_exact + int(mpmath.floor(v)), max_exact + room - 1)


def test_mindone_670_t5_buckets_in_bf16() -> None:
    """mindone#670: T5's bucket log in bfloat16 (bidirectional: 16 buckets a side, 8 exact). Every bucket of
    the distances 0..511 by hand in bf16 (ml_dtypes-free rounding: rne to 8 bits) against the exact bucket
    (mpmath): the flips the entry measures; the float32 fix (transformers) flips none."""
    r = reproduce("mindone-670")
    m = r.measured
    flips = [d for d in range(512) if _t5_bucket_bf16_ops(d) != _t5_bucket_exact(d)]
    assert m["bf16_encoder_flipped_512"] == len(flips) and m["bf16_encoder_first_flip"] == flips[0] == 45
    assert m["fix_float32_encoder_flipped_512"] == 0 and m["fix_float32_decoder_flipped_512"] == 0
    assert r.verdict == "reproduced"
