"""Catalog entries reported in 2026: candle#3520, cactus#688, mlx-lm#1076, openvino#34716, stable-audio-3#81,
sglang-jax#1472, TensorRT-Model-Connect#667.

>>> [i.name for i in INCIDENTS][:3]
['candle-3520', 'cactus-688', 'mlx-lm-1076']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..alibi import Recipe as AlibiRecipe
from ..alibi import alibi_bias, stored_slopes
from ..rope.attention import apply_errors
from ..formats import get_format, round_to, spacing
from ..positions import predict_positions
from ..rope import Recipe, RopeSchedule, audit, exact_angles, parse_stages, preset, run_recipe, wrap
from .core import Figures, Incident, angle_overflow, claim, close, rounded, stages_of

__all__ = ["INCIDENTS"]


# ---- candle-3520

_QWEN25 = RopeSchedule(head_dim=128, base=1000000.0)


def _measure_candle() -> Figures:
    p = 15962.0
    v = float(round_to([p], "bf16")[0])
    step = float(spacing([p], "bf16")[0])
    theta = _QWEN25.inv_freq()
    st = run_recipe(preset("lowp", "bf16"), _QWEN25, [15962])
    rows = audit(_QWEN25, [preset("lowp", "bf16"), preset("fp32", "bf16")], [16384, 32768])
    at = {(r.recipe, r.length): r for r in rows}
    return {
        "bf16_value_of_15962": v,
        "bf16_neighbours_of_15962": [v, v + step] if v < p else [v - step, v],
        "bf16_spacing_at_15962": step,
        "frequency_index_with_inv_freq_1": int(np.flatnonzero(theta == 1.0)[0]),
        "wavelength_tokens_of_that_frequency": rounded(2 * math.pi / float(theta[0])),
        "cos_15962": rounded(math.cos(15962.0), 4),
        "cos_15968": rounded(math.cos(15968.0), 4),
        "cos_15936": rounded(math.cos(15936.0), 4),
        "stored_bf16_cos_15962_freq0": float(st["cos"][0, 0]),
        "angle_error_15962_freq0": rounded(abs(float(wrap(v - 15962.0))), 4),
        "bf16_max_rotation_error_16384": rounded(at["lowp", 16384].max_rotation_error, 4),
        "bf16_colliding_positions_32768": at["lowp", 32768].colliding_positions,
        "fix_fp32_max_rotation_error_32768": rounded(at["fp32", 32768].max_rotation_error, 4),
    }


def _candle_rounding(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
    v, nb = mea["bf16_value_of_15962"], mea["bf16_neighbours_of_15962"]
    stated = list(pub["bf16_value_of_15962"])
    if sorted(stated) == sorted(nb):
        return None
    missing = [x for x in stated if float(round_to([x], "bf16")[0]) != x]
    return (f"bf16_value_of_15962: published {' or '.join(f'{x:g}' for x in stated)}; measured {v:g} "
            f"(round to nearest even; neighbours {nb[0]:g} and {nb[1]:g})"
            + (f"; {', '.join(f'{x:g}' for x in missing)} is not a bfloat16 value" if missing else ""))


# ---- cactus-688

_QWEN3 = RopeSchedule(head_dim=128, base=1000000.0)
_CACTUS_BUG = preset("lowp", "fp16")
_CACTUS_FIX = preset("fp64", "fp16")


def _measure_cactus() -> Figures:
    theta, m = _QWEN3.inv_freq(), np.arange(16384)
    st = run_recipe(_CACTUS_BUG, _QWEN3, m)
    p1 = m[:, None] * theta[None, :]  # float64 product: within 2**-53 relative of m*theta, far below 1e-6 rad
    unwrapped = np.abs(st["angle"] - p1).max(axis=1)
    wrapped = np.abs(wrap(st["angle"] - exact_angles(m, theta))).max(axis=1)
    rows = {(r.recipe, r.length): r for r in audit(_QWEN3, [_CACTUS_BUG, _CACTUS_FIX], [2048, 4096, 6144, 16384])}
    ov = angle_overflow(_QWEN3, _CACTUS_BUG, 131072)
    firsts = {x for x in ov.first_overflow}
    return {
        "fp16_exact_positions_up_to": get_format("fp16").max_exact_integer,
        "max_angle_error_6144": rounded(rows["lowp", 6144].max_angle_error, 4),
        "max_angle_error_2048": rounded(rows["lowp", 2048].max_angle_error, 4),
        "max_angle_error_4096": rounded(rows["lowp", 4096].max_angle_error, 4),
        "max_angle_error_16384": rounded(rows["lowp", 16384].max_angle_error, 4),
        "max_unwrapped_angle_error_6144": rounded(float(unwrapped[:6144].max()), 4),
        "max_unwrapped_angle_error_16384": rounded(float(unwrapped.max()), 4),
        "first_position_angle_error_over_1_rad": int(np.argmax(wrapped > 1.0)),
        "first_position_angle_error_over_2_rad": int(np.argmax(wrapped > 2.0)),
        "non_finite_angles_131072": ov.non_finite,
        "first_overflow_position": sorted(firsts, key=lambda x: (x is None, x))[0],
        "frequencies_overflowing": sum(x is not None for x in ov.first_overflow),
        "fix_max_rotation_error_16384": rounded(rows["fp64", 16384].max_rotation_error, 4),
        "fp16_cache_bound": rounded(rows["fp64", 16384].cache_bound, 4),
    }


# ---- mlx-lm-1076

_QWEN3_NEXT = RopeSchedule(head_dim=256, rotary_dim=64, base=10000000.0)
_MLX_BANDS = (2048, 262144, 393216)


def _measure_mlx() -> Figures:
    f32 = preset("fp32", "fp32")
    kernel = apply_errors(_QWEN3_NEXT, f32, _MLX_BANDS, "fp16", "fp32-then-cast")
    eager = apply_errors(_QWEN3_NEXT, preset("fp32", "fp16"), _MLX_BANDS, "fp16", "elementwise")
    exact_angle = apply_errors(_QWEN3_NEXT, preset("fp64", "float64"), _MLX_BANDS, "fp16", "fp32-then-cast")
    ang = audit(_QWEN3_NEXT, f32, [262144, 393216])
    theta = _QWEN3_NEXT.inv_freq()
    out: Figures = {
        "fp16_epsilon": math.ldexp(1.0, -10),
        "fp16_smallest_subnormal": math.ldexp(1.0, -24),
        "fp32_unit_roundoff": math.ldexp(1.0, -24),
        "highest_frequency_change_per_token": rounded(2 * math.sin(float(theta[0]) / 2)),
        "lowest_frequency_change_per_token": rounded(2 * math.sin(float(theta[-1]) / 2)),
        "fp32_max_angle_error_262144": rounded(ang[0].max_angle_error, 4),
        "fp32_max_angle_error_393216": rounded(ang[1].max_angle_error, 4),
    }
    for name, rows in (("kernel", kernel), ("eager", eager), ("exact_angle", exact_angle)):
        for r in rows:
            band = f"{r.band_start}_{r.band_stop}"
            out[f"{name}_identical_neighbours_{band}"] = r.identical_neighbours
            out[f"{name}_identical_components_{band}"] = rounded(r.identical_components, 4)
            out[f"{name}_max_rel_error_{band}"] = rounded(r.max_rel_error, 4)
    out["adjacent_identical_beyond_262144"] = out["kernel_identical_neighbours_262144_393216"]
    return out


# ---- openvino-34716

_QWEN3_VL = RopeSchedule(head_dim=128, base=5000000.0)


def _measure_openvino() -> Figures:
    bug, fix = preset("lowp", "fp16"), preset("fp32", "fp16")
    m = np.arange(8192, dtype=np.float64)
    st = run_recipe(bug, _QWEN3_VL, m)
    err = np.abs(wrap(st["angle"] - exact_angles(m, _QWEN3_VL.inv_freq()))).max(axis=1)
    rows = {(r.recipe, r.length): r for r in audit(_QWEN3_VL, [bug, fix], [2048, 4096, 8192])}
    v = round_to([4173.0, 4174.0], "float16")
    return {
        "fp16_of_4173": float(v[0]),
        "fp16_of_4174": float(v[1]),
        "fp16_spacing_4096_8192": float(spacing([4096.0], "float16")[0]),
        "first_inexact_position": predict_positions(8192, "float16").first_inexact,
        "first_position_angle_error_over_1_rad": int(np.argmax(err > 1.0)),
        "angle_error_4173": rounded(float(err[4173]), 4),
        "angle_error_4174": rounded(float(err[4174]), 4),
        "lowp_max_angle_error_2048": rounded(rows["lowp", 2048].max_angle_error, 4),
        "lowp_max_angle_error_4096": rounded(rows["lowp", 4096].max_angle_error, 4),
        "lowp_max_angle_error_8192": rounded(rows["lowp", 8192].max_angle_error, 4),
        "lowp_colliding_positions_8192": rows["lowp", 8192].colliding_positions,
        "fix_max_rotation_error_8192": rounded(rows["fp32", 8192].max_rotation_error, 4),
    }


# ---- stable-audio-3-81

# sa3-medium DiT: RoPE on 32 of 64 head dims (16 pairs), base 10000, 64 global tokens prepended (T = L + 64)
_SA3 = RopeSchedule(head_dim=64, rotary_dim=32, base=10000.0)
_SA3_L, _SA3_PREPENDED = 4092, 64
_SA3_ANGLE = parse_stages("angle=bf16", "bf16", name="angle=bf16")
_SA3_ALL = parse_stages("positions=bf16,inv_freq=bf16,angle=bf16", "bf16", name="positions,inv_freq,angle=bf16")


def _pair_errors(recipe: Recipe, m: np.ndarray) -> np.ndarray:
    """Max wrapped angle error per frequency pair over positions m."""
    st = run_recipe(recipe, _SA3, m)
    return np.abs(wrap(st["angle"] - exact_angles(m, _SA3.inv_freq()))).max(axis=0)


def _measure_stable_audio() -> Figures:
    T = _SA3_L + _SA3_PREPENDED
    m = np.arange(T, dtype=np.float64)
    top = (T - 1) * _SA3.inv_freq()
    ulp = spacing(top, "bfloat16")
    angle_only, all_bf16 = _pair_errors(_SA3_ANGLE, m), _pair_errors(_SA3_ALL, m)
    fix = audit(_SA3, preset("fp64", "fp32"), T)[0]
    return {
        "pairs": int(top.size),
        "max_angle": float(top[0]),
        "bf16_spacing_at_max_angle": float(ulp[0]),
        "rotations_per_spacing": rounded(float(ulp[0]) / (2 * math.pi), 4),
        "bf16_spacing_first_over_2pi_at": next(2.0**e for e in range(64)
                                               if float(spacing([2.0**e], "bfloat16")[0]) > 2 * math.pi),
        "pairs_spacing_over_2pi": int(np.count_nonzero(ulp > 2 * math.pi)),
        "pairs_spacing_at_least_2_rad": int(np.count_nonzero(ulp >= 2.0)),
        "pairs_destroyed": int(np.count_nonzero(ulp >= 0.25)),
        "pairs_error_over_0.1_rad": int(np.count_nonzero(angle_only > 0.1)),
        "pairs_error_over_quarter_rad_all_bf16": int(np.count_nonzero(all_bf16 >= 0.25)),
        "angle_only_pair_errors": [rounded(float(e), 3) for e in angle_only],
        "all_bf16_pair_errors": [rounded(float(e), 3) for e in all_bf16],
        "fix_max_rotation_error": rounded(fix.max_rotation_error, 4),
    }


# ---- sglang-jax-1472

_SGL_BASES = (10000.0, 1000000.0)
_SGL_P = 4095


def _measure_sglang_jax() -> Figures:
    bug, fix = preset("lowp-inv-freq", "bf16"), preset("fp32", "bf16")
    out: Figures = {}
    for base in _SGL_BASES:
        s = RopeSchedule(head_dim=128, base=base)
        tag = f"base_{int(base)}"
        m = np.array([float(_SGL_P)])
        b, f = run_recipe(bug, s, m), run_recipe(fix, s, m)
        err = np.abs(wrap(b["angle"] - exact_angles(m, s.inv_freq())))[0]
        differ = np.count_nonzero(b["cos"] != f["cos"]) + np.count_nonzero(b["sin"] != f["sin"])
        out[f"max_angle_error_{_SGL_P}_{tag}"] = rounded(float(err.max()), 4)
        out[f"pairs_off_over_1_256_rad_{_SGL_P}_{tag}"] = int(np.count_nonzero(err > 2.0**-8))
        out[f"cos_sin_values_differing_{_SGL_P}_{tag}"] = int(differ)
        for r in audit(s, [bug, fix], [1024, 4096, 32768]):
            out[f"{r.recipe}_max_angle_error_{r.length}_{tag}"] = rounded(r.max_angle_error, 4)
    return out


def _sglang_growth(m: Mapping[str, Any]) -> bool:
    tag = "base_10000"
    return bool(m[f"lowp-inv-freq_max_angle_error_4096_{tag}"] > 2 * m[f"lowp-inv-freq_max_angle_error_1024_{tag}"]
                > 2 * m[f"fp32_max_angle_error_4096_{tag}"])


# ---- tensorrt-model-connect-667

_FALCON_HEADS = (("falcon_rw_1b", 32), ("falcon_rw_7b", 64))
_FALCON_LENGTHS = (1024, 2048)
_FALCON_HEAD_DIM = 64  # both: hidden 2048 / 32 heads and 4096 / 64 heads; HF adds alibi / sqrt(head_dim)
_FALCON_REF = AlibiRecipe("falcon-bf16", "key", "bloom", "bfloat16", "bfloat16", "bfloat16", "float32")
_FALCON_PORT = AlibiRecipe("fp32-port", "key", "bloom", "float32", "float32", "float32", "float32")


def _measure_falcon() -> Figures:
    out: Figures = {}
    scale = 1 / math.sqrt(_FALCON_HEAD_DIM)
    for model, heads in _FALCON_HEADS:
        for L in _FALCON_LENGTHS:
            d = alibi_bias(_FALCON_REF, heads, L) - alibi_bias(_FALCON_PORT, heads, L)
            spread = float((d.max(axis=1) - d.min(axis=1)).max())
            out[f"{model}_max_bias_difference_{L}"] = rounded(float(np.abs(d).max()), 4)
            out[f"{model}_logit_spread_{L}"] = rounded(spread * scale, 4)
    slopes = stored_slopes(_FALCON_REF, 32)
    out["falcon_rw_1b_bf16_slope_0"] = float(slopes[0])
    out["falcon_rw_1b_fp32_slope_0"] = float(stored_slopes(_FALCON_PORT, 32)[0])
    return out

INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="candle-3520",
        reference="huggingface/candle#3520",
        year=2026,
        stack="candle",
        fix="build inv_freq, positions and the matmul in f32 and cast sin/cos to the model dtype after (the PR)",
        what="qwen2 rotary table built in bf16 (inv_freq and positions cast before the matmul)",
        code_path="RotaryEmbedding::new in candle-transformers qwen2.rs: inv_freq.to_dtype(bf16), "
                  "arange(0, max_seq_len).to_dtype(bf16), t.matmul(inv_freq) and sin()/cos() in bf16",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"head_dim": 128, "base": 1000000.0, "lengths": [16384, 32768], "model": "Qwen2.5-VL (Jina v4)"},
        published={"bf16_value_of_15962": [15936.0, 15968.0], "bf16_spacing_at_15962": 16.0,
                   "cos_15962": -0.547, "cos_15968": -0.882,
                   "frequency": "low-frequency dims where inv_freq[0] = 1.0"},
        published_source="PR description (toddwbucy, 2026-05-07): 'position 15962 rounds to neighbouring bf16 "
                         "values 15936 or 15968 (16-step granularity)', 'cos(15962) ~ -0.547 vs cos(15968) ~ "
                         "-0.882'",
        measure=_measure_candle,
        checks=(_candle_rounding, close("bf16_spacing_at_15962", 0.0), close("cos_15962", 5e-4),
                close("cos_15968", 5e-4),
                claim("frequency", lambda m: m["wavelength_tokens_of_that_frequency"] > 1000,
                      "inv_freq = 1 is frequency index {frequency_index_with_inv_freq_1}, the highest frequency "
                      "(wavelength {wavelength_tokens_of_that_frequency} tokens)")),
        explanation="bf16 spacing in [8192, 16384) is 64, not 16: 15962 rounds to 15936 (its neighbours are "
                    "15936 and 16000; 15968 is not a bf16 value). cos(15962) = -0.908 and cos(15968) = -0.755, "
                    "not -0.547 / -0.882; the stored angle 15936 gives cos -0.268, 0.87 rad off. inv_freq = 1 "
                    "is the fastest-turning pair. The report's conclusion (the bf16 table is noise at 16K) holds; "
                    "its numbers do not.",
    ),
    Incident(
        name="cactus-688",
        reference="cactus-compute/cactus#688",
        year=2026,
        stack="cactus (transpiled fp16 graph)",
        fix="precompute cos/sin tables in fp64, store them in fp16 and gather them by position (the PR)",
        what="RoPE angle position * inv_freq computed in fp16 (transpiled graph)",
        code_path="fp16 graph: position ids and inv_freq in fp16, angle = position * inv_freq in fp16, cos/sin "
                  "in fp16. Fix: cos/sin tables precomputed in fp64, stored in fp16, gathered by position",
        recipe=stages_of(_CACTUS_BUG),
        settings={"head_dim": 128, "base": 1000000.0, "lengths": [2048, 4096, 6144, 16384, 131072],
                  "model": "Qwen3"},
        published={"fp16_exact_positions_up_to": 2048, "max_angle_error_6144": "several radians",
                   "fix": "matches MLX through 16k"},
        published_source="PR description (ncylich, 2026-06-04): 'cannot represent absolute positions > 2048 "
                         "exactly. Past ~6k context the angle error reaches several radians'",
        measure=_measure_cactus,
        checks=(close("fp16_exact_positions_up_to", 0),
                claim("max_angle_error_6144", lambda m: m["max_unwrapped_angle_error_6144"] >= 2.0,
                      "max angle error {max_unwrapped_angle_error_6144} rad by 6144 (unwrapped)"),
                claim("fix", lambda m: m["fix_max_rotation_error_16384"] <= m["fp16_cache_bound"],
                      "fp64->fp16 table rotation error {fix_max_rotation_error_16384} rad > bound "
                      "{fp16_cache_bound}")),
        explanation="fp16 integers are exact to 2048; from 4096 to 8192 the spacing is 4, so the position alone "
                    "is up to 2 off and the fp16 product adds more: by 6144 angles are up to ~4 rad off "
                    "(unwrapped), i.e. random phases, but errors above 1 rad start right after 2048. From "
                    "position 65520 every angle is inf (cos/sin NaN). The fp64-built fp16 table is exact to the "
                    "fp16 rounding bound at every length.",
    ),
    Incident(
        name="mlx-lm-1076",
        reference="ml-explore/mlx-lm#1076",
        year=2026,
        stack="MLX",
        fix="none needed for the neighbours (they never coincide); beyond 262K the float32 angle is the limit, "
            "which casting q/k to fp32 (the PR) does not change",
        what="fp32 angles, rotation applied to fp16 q/k (Qwen3-Next / Qwen3.5)",
        code_path="nn.RoPE -> mx.fast.rope on fp16 q/k: angle = position * inv_freq in fp32, cos/sin in fp32; "
                  "the Metal and CUDA kernels rotate x1*cos - x2*sin in fp32 and cast the result to fp16 once "
                  "(fp32-then-cast: the kernel_* figures), while MLX's CPU path casts cos/sin to fp16 and "
                  "rotates op by op in fp16 (elementwise, as the PR models it: the eager_* figures). The PR "
                  "casts q/k to fp32 around rope",
        recipe={**stages_of(preset("fp32", "fp32")), "apply": "float16 (fp32-then-cast)"},
        settings={"head_dim": 256, "rotary_dim": 64, "base": 10000000.0, "bands": [0, *_MLX_BANDS]},
        published={"fp16_epsilon": 6e-8, "adjacent_identical_beyond_262144": "adjacent token positions become "
                   "numerically identical beyond 262K",
                   "claim": "the delta between high-frequency components falls below fp16 epsilon"},
        published_source="PR description (Thump604, 2026-03-31): 'beyond 262K, the delta between high-frequency "
                         "embedding components falls below FP16 epsilon (~6e-8)'",
        measure=_measure_mlx,
        checks=(close("fp16_epsilon", 1e-9),
                claim("adjacent_identical_beyond_262144", lambda m: m["adjacent_identical_beyond_262144"] > 0,
                      "{kernel_identical_neighbours_262144_393216} of the sampled positions in [262144, 393216) "
                      "rotate q exactly like the next position (also {kernel_identical_neighbours_0_2048} in "
                      "[0, 2048)); the share of single components equal to the next position's is "
                      "{kernel_identical_components_0_2048} in [0, 2048) and "
                      "{kernel_identical_components_262144_393216} beyond 262K"),
                claim("claim", lambda m: m["highest_frequency_change_per_token"] < m["fp16_epsilon"],
                      "the highest frequency moves a unit pair by {highest_frequency_change_per_token} per "
                      "token; only the slowest pairs move less than fp16 resolution "
                      "({lowest_frequency_change_per_token} per token), at every position")),
        explanation="fp16 machine epsilon is 2**-10 = 9.8e-4; 6e-8 is 2**-24, fp16's smallest subnormal (and "
                    "fp32's unit roundoff). High-frequency pairs turn up to 1 rad per token, so neighbours never "
                    "coincide; the slow pairs (theta down to 1.6e-7 rad/token) round to the same fp16 value for "
                    "neighbouring positions at 1K as at 384K: nothing changes at 262K. What does grow is the fp32 "
                    "angle: up to ~0.015 rad at 384K, which dominates the fp16 rounding of the result "
                    "(relative error ~3e-4 with exact angles) and which the PR's fp32 cast of q/k does not touch.",
    ),
    Incident(
        name="openvino-34716",
        reference="openvinotoolkit/openvino#34716",
        year=2026,
        stack="OpenVINO (GPU plugin)",
        what="Qwen3-VL position ids converted int32 -> f16 before the RoPE frequency MatMul",
        code_path="GPU plugin graph: Convert(position_ids, i32 -> f16) -> MatMul with the f16 inverse frequencies "
                  "(f16 result) -> Sin/Cos in f16; IncreasePositionIdsPrecision had no pattern for Qwen3-VL's "
                  "Reshape / Gather x3 -> ScatterNDUpdate chain, so the path stayed f16",
        recipe=stages_of(preset("lowp", "fp16")),
        settings={"head_dim": 128, "base": 5000000.0, "lengths": [2048, 4096, 8192],
                  "model": "Qwen3-VL-4B-Instruct (text positions: the three mrope axes coincide)"},
        published={"fp16_of_4173": 4172.0, "fp16_of_4174": 4176.0, "fp16_spacing_4096_8192": 4.0,
                   "wrong_above_2048": "incorrect output on GPU for long input sequences (>2048 tokens); the 1st "
                                       "token prediction is wrong"},
        published_source="PR description (andrew-k-park, 2026-03-16): 'integers in range 4096-8192 are rounded to "
                         "the nearest multiple of 4 (e.g., 4173->4172, 4174->4176)'",
        measure=_measure_openvino,
        checks=(close("fp16_of_4173", 0.0), close("fp16_of_4174", 0.0), close("fp16_spacing_4096_8192", 0.0),
                claim("wrong_above_2048", lambda m: m["first_inexact_position"] == 2049
                      and m["first_position_angle_error_over_1_rad"] == 2049,
                      "first inexact fp16 position {first_inexact_position}, first angle error over 1 rad at "
                      "{first_position_angle_error_over_1_rad}")),
        explanation="fp16 keeps 11 significant bits: integers are exact to 2048, the spacing is 2 in [2048, 4096) "
                    "and 4 in [4096, 8192). 4173 = 4 * 1043 + 1 rounds down to 4172; 4174 = 4 * 1043.5 is a tie and "
                    "goes to the even multiple 4176. With the f16 inverse frequencies and the f16 product the "
                    "angles are already 0.81 rad off at 2048 (base 5e6), over 1 rad from position 2049 (2049 rounds "
                    "to 2048), 2.4 rad by 4096 and up to pi (random phases) by 8192: the first generated token of a "
                    "long prompt is computed from wrong positions in every layer. The f32 path (the PR's fix: f32 "
                    "positions and MatMul, f32 -> f16 after Sin/Cos) stays within 8.4e-4 rad at 8K.",
        fix="IncreasePositionIdsPrecisionForQwen3VL (the PR): Convert i32 -> f32, MatMul and Sin/Cos in f32, "
            "f32 -> f16 after Sin/Cos",
        headline=("fp16_of_4173", "fp16_of_4174", "first_position_angle_error_over_1_rad",
                  "lowp_max_angle_error_4096"),
    ),
    Incident(
        name="stable-audio-3-81",
        reference="Stability-AI/stable-audio-3#81",
        year=2026,
        stack="TensorRT (BuilderFlag.BF16)",
        what="a TensorRT engine built with the BF16 flag evaluates RoPE's angle t * inv_freq in bfloat16",
        code_path="dit.onnx: Range(0, T) -> Cast(f32) -> Div(1.0) -> Einsum('i,j->ij', t, inv_freq) -> Cos/Sin; "
                  "built weakly typed with BuilderFlag.BF16, TensorRT may run the Einsum in bf16 (modelled: the "
                  "product rounded to bf16; also run: positions, inv_freq and product in bf16). Fix: cos/sin "
                  "tables precomputed in fp64 on the host, stored as fp32 constants",
        recipe=stages_of(_SA3_ANGLE),
        settings={"head_dim": 64, "rotary_dim": 32, "base": 10000.0, "L": _SA3_L, "prepended_tokens": _SA3_PREPENDED,
                  "positions": f"0..{_SA3_L + _SA3_PREPENDED - 1}", "model": "sa3-medium DiT"},
        published={"max_angle": 4155.0, "bf16_spacing_at_max_angle": 32.0, "pairs_destroyed": 9, "pairs": 16,
                   "velocity_cos_vs_fp32": 0.5477, "clipping_380s_percent": 3.112, "crest_bf16": 2.50,
                   "crest_fp32": 6.25},
        published_source="PR description (Cortexelus, 2026-07-30): '~4155 rad at L=4092', 'spacing up there is 32 "
                         "rad', 'destroys 9/16 frequency pairs', and the render table at L=4092",
        measure=_measure_stable_audio,
        checks=(close("max_angle", 0.5), close("bf16_spacing_at_max_angle", 0.0), close("pairs", 0),
                close("pairs_destroyed", 0)),
        explanation="16 pairs (RoPE on 32 dims, base 10000, inv_freq[0] = 1 exactly); with 64 prepended tokens "
                    "the last position at L = 4092 is 4155, so pair 0's angle is 4155 rad, where bf16's spacing is "
                    "32 rad (5.09 turns). Which pairs are 'destroyed' depends on a threshold the report does not "
                    "state: with only the product in bf16, 3 pairs have a spacing over 2 pi at their largest angle "
                    "(no phase left), 5 a spacing of 2 rad or more (errors up to 1 rad), and 9 a spacing of 1/4 rad "
                    "or more (largest angle >= 32 rad; 9 pairs are off by over 0.1 rad): the 9 of 16 needs that "
                    "criterion, about 0.1 rad (with positions and inv_freq in bf16 too, 9 pairs are off by 1/4 rad "
                    "or more). bf16's spacing first exceeds 2 pi at 1024 rad (spacing 8), not at 2048. "
                    "The render figures (velocity cos 0.5477, clipping, crest) are the model's and not recomputed; "
                    "the baked fp64 -> fp32 tables rotate within 1e-7 rad of exact.",
        fix="bake cos/sin as constants computed in fp64 on the host and stored in fp32 (the PR), so no angle is "
            "evaluated in the engine; or keep the angle chain in an fp32 island",
        not_recomputable="the render figures (velocity cos 0.5477, 3.112 % clipping, crest 2.50 vs 6.25) are the "
                         "model's output, not RoPE's",
        headline=("max_angle", "bf16_spacing_at_max_angle", "pairs_destroyed", "pairs_spacing_over_2pi"),
    ),
    Incident(
        name="sglang-jax-1472",
        reference="sgl-project/sglang-jax#1472",
        year=2026,
        stack="sglang-jax (JAX)",
        what="RoPE inverse frequencies cast to bfloat16 before a float32 phase computation",
        code_path="RotaryEmbedding.__call__: inv_freq = jnp.asarray(self._inv_freq_np, dtype=self.dtype) (bf16), "
                  "freqs = jnp.einsum('n,d->nd', positions.astype(jnp.float32), inv_freq) promoted to float32, "
                  "cos/sin in float32 then the model dtype (also MRotaryEmbedding, YarnRotaryEmbedding)",
        recipe=stages_of(preset("lowp-inv-freq", "bf16")),
        settings={"head_dim": 128, "bases": list(_SGL_BASES), "position": _SGL_P,
                  "note": "the repro's base and q are not in the stored report: both bases shown"},
        published={"position": _SGL_P, "mismatched_values": "72/128", "max_abs_difference": 0.828125,
                   "claim": "the phase error grows with position"},
        published_source="issue text (Yanko-7, 2026-07-22) and the fix's description (sglang-jax#1473: 'fails on "
                         "main at position 4095 with 72/128 mismatched output values and a maximum absolute "
                         "difference of 0.828125 against a float32-phase reference')",
        measure=_measure_sglang_jax,
        checks=(claim("claim", _sglang_growth,
                      "max angle error {lowp-inv-freq_max_angle_error_1024_base_10000} rad at 1K, "
                      "{lowp-inv-freq_max_angle_error_4096_base_10000} rad at 4K (fp32 phase: "
                      "{fp32_max_angle_error_4096_base_10000} rad)"),),
        explanation="A bf16 inverse frequency carries a relative error up to 2**-9, which the float32 product "
                    "multiplies by the position: at 4095 the phase is off by up to 2.6 rad (base 10000; 2.4 rad at "
                    "base 1e6), at 1K already 1.25 rad, and from 4K the fast pairs' phases are random (pi). The "
                    "float32 phase (the fix) stays within 3e-4 rad at 4K. 48 (base 10000) or 31 (base 1e6) of the "
                    "64 pairs are off by more than 2**-8 rad at 4095, and 103 or 73 of the 128 cos/sin values then "
                    "differ from the fix's; the report's 72/128 output values and 0.828125 depend on its q and "
                    "tolerance, which are not given.",
        fix="compute inv_freq * position, cos and sin in float32 and cast cos/sin to the model dtype just before "
            "the rotation (sglang-jax#1473)",
        not_recomputable="72/128 and 0.828125 depend on the repro's q, base and tolerance, not in the report",
        headline=("max_angle_error_4095_base_10000", "max_angle_error_4095_base_1000000"),
    ),
    Incident(
        name="tensorrt-model-connect-667",
        reference="NVIDIA/TensorRT-Model-Connect#667",
        year=2026,
        stack="TensorRT-Model-Connect",
        what="Falcon-RW's reference builds ALiBi slope x position in bf16; the float32 port diverges",
        code_path="transformers' Falcon build_alibi_tensor: float32 slopes (base ** powers), slopes.bfloat16() * "
                  "key positions (int64 -> bf16), product in bf16, .to(dtype), added to the raw scores before / "
                  "sqrt(head_dim). The TRTMC port kept slope x relative position in float32",
        recipe={"slopes": "float32 (bloom rule), stored bf16", "positions": "bfloat16 (key positions)",
                "product": "bfloat16", "bias": "float32 (the attention work dtype)"},
        settings={"heads": dict(_FALCON_HEADS), "lengths": list(_FALCON_LENGTHS), "head_dim": _FALCON_HEAD_DIM},
        published={"claim": "the reference converts slopes and positions to BF16 and multiplies in BF16; TRTMC keeps "
                            "ALiBi in FP32; the difference becomes visible on long-context greedy generation",
                   "continuation_parity": "6/10"},
        published_source="issue (chaofengw-nv, 2026-07-28) and the fix's description (TensorRT-Model-Connect#674: "
                         "'continuation parity remained at 6/10' before aligning GELU and ALiBi)",
        measure=_measure_falcon,
        checks=(claim("claim", lambda m: m["falcon_rw_1b_logit_spread_2048"] > 0.1,
                      "the bf16 and fp32 biases differ by up to {falcon_rw_1b_max_bias_difference_2048} "
                      "(logit spread {falcon_rw_1b_logit_spread_2048} after / sqrt(64))"),),
        explanation="The reference for a model is what it was trained with: Falcon-RW was trained with the bf16 "
                    "ALiBi product, so the float32 port is the one that differs. Falcon-RW-1B's 32 slopes are "
                    "2**(-k/4): 2**-0.25 = 0.8409 becomes 0.8398 in bf16, key positions above 256 round (spacing 8 "
                    "near 2048) and the product keeps 8 bits, so the bias differs from the float32 one by up to "
                    "9.2 at 2048 keys, and within one query row by up to 14.7 (1.8 logits after the 1/8 scale): "
                    "more than enough to flip greedy tokens. softmax ignores a constant shift per row, so the row "
                    "spread is the figure that matters. The 6/10 parity is a generation figure, not recomputed.",
        fix="reproduce the reference's rounding: bf16 slopes and key positions, product in bf16, then cast and "
            "scale (TensorRT-Model-Connect#674)",
        not_recomputable="the continuation parity (6/10) is a generation result",
        headline=("falcon_rw_1b_max_bias_difference_2048", "falcon_rw_1b_logit_spread_2048"),
    ),
)
