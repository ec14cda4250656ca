"""Catalog entries reported in 2024: transformers#29285, modded-nanogpt#39, tinygrad#4587, TransformerEngine#1245,
flash-attention#823, mindone#670, openvino#25883, flash-attention#846.

>>> [i.name for i in INCIDENTS][-3:]
['mindone-670', 'openvino-25883', 'flash-attention-846']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


from ..rope.attention import apply_errors, attention_errors
from ..formats import get_format, round_to
from ..positions import predict_positions
from ..rope import RopeSchedule, audit, preset
from .core import Figures, Incident, angle_overflow, claim, close, rounded, stages_of

__all__ = ["INCIDENTS"]


# ---- transformers-29285

_GEMMA = RopeSchedule(head_dim=256, base=10000.0)


def _measure_29285() -> Figures:
    recs = [preset("lowp", "bf16"), preset("lowp", "fp16"), preset("fp32", "bf16")]
    rows = {(r.recipe, r.dtype, r.length): r for r in audit(_GEMMA, recs, [1024, 2048, 8192])}
    return {
        "bf16_max_angle_error_1024": rounded(rows["lowp", "bfloat16", 1024].max_angle_error),
        "bf16_max_angle_error_8192": rounded(rows["lowp", "bfloat16", 8192].max_angle_error),
        "bf16_mean_angle_error_8192": rounded(rows["lowp", "bfloat16", 8192].mean_angle_error),
        "bf16_colliding_positions_8192": rows["lowp", "bfloat16", 8192].colliding_positions,
        "fp16_max_angle_error_2048": rounded(rows["lowp", "float16", 2048].max_angle_error),
        "fp16_max_angle_error_8192": rounded(rows["lowp", "float16", 8192].max_angle_error),
        "fp16_mean_angle_error_8192": rounded(rows["lowp", "float16", 8192].mean_angle_error),
        "fix_fp32_max_angle_error_8192": rounded(rows["fp32", "bfloat16", 8192].max_angle_error),
    }


# ---- modded-nanogpt-39

_NANOGPT = RopeSchedule(head_dim=128, base=10000.0)
_NANOGPT_LENGTHS = (1024, 8192, 65536)


def _measure_nanogpt() -> Figures:
    bug = apply_errors(_NANOGPT, preset("fp32", "bf16"), _NANOGPT_LENGTHS, "bf16", "elementwise")
    fix = apply_errors(_NANOGPT, preset("fp32", "fp32"), _NANOGPT_LENGTHS, "bf16", "fp32-then-cast")
    cache = audit(_NANOGPT, preset("fp32", "bf16"), [1024, 65536])
    att_bug = attention_errors(_NANOGPT, preset("fp32", "bf16"), 65536, [1, 1024, 65535], apply="bf16")
    att_fix = attention_errors(_NANOGPT, preset("fp32", "fp32"), 65536, [1, 1024, 65535], apply="bf16",
                               mode="fp32-then-cast")
    out: Figures = {}
    for name, rows in (("bf16_cache", bug), ("fp32_cache", fix)):
        for r in rows:
            out[f"{name}_max_rel_error_{r.band_start}_{r.band_stop}"] = rounded(r.max_rel_error, 4)
    out["bf16_cache_max_rotation_error_1024"] = rounded(cache[0].max_rotation_error, 4)
    out["bf16_cache_max_rotation_error_65536"] = rounded(cache[1].max_rotation_error, 4)
    out["bf16_cache_bound"] = rounded(cache[0].cache_bound, 4)
    fp32_cache = audit(_NANOGPT, preset("fp32", "fp32"), 65536)[0]
    out["fp32_cache_max_rotation_error_65536"] = rounded(fp32_cache.max_rotation_error, 4)
    out["bf16_cache_max_logit_error_65536"] = rounded(max(r.max_logit_error for r in att_bug), 4)
    out["fp32_cache_max_logit_error_65536"] = rounded(max(r.max_logit_error for r in att_fix), 4)
    out["bf16_cache_spread_65536"] = rounded(max(r.score_spread for r in att_bug), 4)
    out["fp32_cache_spread_65536"] = rounded(max(r.score_spread for r in att_fix), 4)
    return out


def _nanogpt_no_growth(m: Mapping[str, Any]) -> bool:
    first = m["bf16_cache_max_rel_error_0_1024"]
    last = m["bf16_cache_max_rel_error_8192_65536"]
    return bool(last > 2 * first)


# ---- tinygrad-4587

_LLAMA3 = RopeSchedule(head_dim=128, base=500000.0)
_TINYGRAD_L = 131072


def _measure_tinygrad() -> Figures:
    f16 = get_format("float16")
    edge = round_to([65504.0, 65519.0, 65520.0], "float16")
    p = predict_positions(_TINYGRAD_L, "float16")
    ov = angle_overflow(_LLAMA3, preset("lowp", "fp16"), _TINYGRAD_L)
    firsts = sorted({x for x in ov.first_overflow if x is not None})
    fix = audit(_LLAMA3, preset("fp32", "fp16"), [65536, _TINYGRAD_L])
    return {
        "half_max": f16.max_finite,
        "fp16_of_65504_65519_65520": [float(x) for x in edge],
        "first_position_inf": p.overflow_position,
        "first_context_with_inf": p.overflow_position + 1,
        "non_finite_positions_131072": p.non_finite,
        "first_angle_overflow_positions": firsts,
        "frequencies_overflowing": sum(x is not None for x in ov.first_overflow),
        "non_finite_angles_131072": ov.non_finite,
        "fix_max_rotation_error_65536": rounded(fix[0].max_rotation_error, 4),
        "fix_max_rotation_error_131072": rounded(fix[1].max_rotation_error, 4),
        "fix_non_finite_angles_131072": angle_overflow(_LLAMA3, preset("fp32", "fp16"), _TINYGRAD_L).non_finite,
    }


# ---- mindone-670


def _measure_mindone() -> Figures:
    from ..relative import audit_relative

    out: Figures = {}
    for side, bi in (("encoder", True), ("decoder", False)):
        for r in audit_relative("t5", ["transformers", "lowp"], [512, 8192], ["bfloat16"], bidirectional=bi):
            key = "bf16" if r.path == "lowp" else "fix_float32"
            out[f"{key}_{side}_flipped_{r.length}"] = r.flipped
            if r.path == "lowp" and r.length == 512:
                out[f"bf16_{side}_first_flip"] = r.first_flip
                out[f"bf16_{side}_max_shift"] = r.max_shift
    return out


# ---- transformer-engine-1245

_LLAMA31 = RopeSchedule(head_dim=128, base=500000.0, scaling="llama3", factor=8.0, low_freq_factor=1.0,
                        high_freq_factor=4.0, original_max_position_embeddings=8192)
_LLAMA2 = RopeSchedule(head_dim=128, base=10000.0)
_TE_LENGTHS = (8192, 131072)


def _measure_te() -> Figures:
    f32 = preset("fp32", "fp32")
    out: Figures = {}
    for model, sched in (("llama31", _LLAMA31), ("llama2", _LLAMA2)):
        for name, fmt in (("bf16_out", "bf16"), ("fp32_out", "fp32")):
            for r in apply_errors(sched, f32, _TE_LENGTHS, fmt, "fp32-then-cast"):
                out[f"{model}_{name}_max_rel_error_{r.band_start}_{r.band_stop}"] = rounded(r.max_rel_error, 4)
    out["bf16_unit_roundoff"] = 2.0**-8
    return out


# ---- flash-attention-823

_FA = RopeSchedule(head_dim=128, base=10000.0)
_FA_LENGTHS = (2048, 8192)


def _measure_fa() -> Figures:
    out: Figures = {}
    for name, recipe, fmt in (("bf16_cos_sin", preset("fp32", "bf16"), "bf16"),
                              ("fp32_cos_sin_bf16_out", preset("fp32", "fp32"), "bf16"),
                              ("fp16_cos_sin", preset("fp32", "fp16"), "fp16"),
                              ("fp32_cos_sin_fp16_out", preset("fp32", "fp32"), "fp16")):
        for r in apply_errors(_FA, recipe, _FA_LENGTHS, fmt, "fp32-then-cast"):
            out[f"{name}_max_rel_error_{r.band_start}_{r.band_stop}"] = rounded(r.max_rel_error, 4)
    return out


# ---- openvino-25883

_OV_LLAMA = RopeSchedule(head_dim=128, base=10000.0)


def _measure_ov25883() -> Figures:
    p = predict_positions(4096, "float16")
    rows = {(r.recipe, r.length): r for r in audit(_OV_LLAMA, [preset("lowp", "fp16"), preset("fp32", "fp16")],
                                                    [2048, 4096])}
    return {
        "fp16_exact_positions_to": get_format("fp16").max_exact_integer,
        "first_inexact_position": p.first_inexact,
        "exact_positions_4096": p.exact_count,
        "lowp_max_angle_error_2048": rounded(rows["lowp", 2048].max_angle_error, 4),
        "lowp_max_angle_error_4096": rounded(rows["lowp", 4096].max_angle_error, 4),
        "fix_max_angle_error_4096": rounded(rows["fp32", 4096].max_angle_error, 4),
    }


# ---- flash-attention-846


def paper_slopes(n: int) -> list[float]:
    """ALiBi slopes as the paper (and flash_attn's get_alibi_slopes) build them, in float64."""
    c = 1 << (n.bit_length() - 1)
    head = [2.0 ** (-8.0 * k / c) for k in range(1, c + 1)]
    return head if c == n else head + paper_slopes(2 * c)[0::2][: n - c]


_FA_HEADS = (8, 12, 16)


def _measure_fa846() -> Figures:
    out: Figures = {}
    for h in _FA_HEADS:
        s = np.asarray(paper_slopes(h))
        for fmt, tag in (("float16", "fp16"), ("bfloat16", "bf16")):
            d = np.abs(np.asarray(round_to(s, fmt)) - s)
            out[f"{tag}_inexact_slopes_{h}"] = int(np.count_nonzero(d))
            for L in (512, 2048):
                out[f"{tag}_max_bias_error_{h}_heads_{L - 1}"] = rounded(float(d.max()) * (L - 1), 4)
    return out

INCIDENTS: tuple[Incident, ...] = (

    Incident(
        name="transformers-29285",
        reference="huggingface/transformers#29285",
        year=2024,
        stack="transformers",
        fix="compute inv_freq @ position_ids and cos/sin with autocast disabled (float32), cast cos/sin to the "
            "model dtype after (transformers#29285)",
        what="RoPE angles computed in bf16 under autocast (Llama/Gemma)",
        code_path="inv_freq_expanded.float() @ position_ids_expanded.float() inside torch.autocast(bf16): the "
                  "matmul casts both to bf16 and returns bf16; emb.cos()/sin() in bf16",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"head_dim": 256, "base": 10000.0, "length": 8192, "model": "Gemma"},
        published={"bf16": "positional encodings lose precision dramatically, especially for very large "
                           "context lengths",
                   "fp16": "on float16 this issue does not occur (training loss curves match)"},
        published_source="PR description (danielhanchen, 2024-02-26); figures there are plots, no numbers",
        measure=_measure_29285,
        checks=(claim("bf16", lambda m: m["bf16_max_angle_error_8192"] > 1.0
                      and m["bf16_max_angle_error_8192"] > m["bf16_max_angle_error_1024"],
                      "bf16 max angle error {bf16_max_angle_error_1024} rad at 1024, "
                      "{bf16_max_angle_error_8192} rad at 8192"),
                claim("fp16", lambda m: m["fp16_max_angle_error_8192"] < 10 * m["fix_fp32_max_angle_error_8192"],
                      "the same path in fp16 has max angle error {fp16_max_angle_error_2048} rad at 2048 and "
                      "{fp16_max_angle_error_8192} rad at 8192 (mean {fp16_mean_angle_error_8192}); fp32 fix "
                      "{fix_fp32_max_angle_error_8192} rad")),
        explanation="Under bf16 autocast positions above 256 collide and the product keeps 8 bits, so angles "
                    "are off by up to pi at 8K. The fp16 claim does not hold for RoPE itself: fp16 positions are "
                    "exact only to 2048 and the fp16 product rounds the angle to a spacing of 4 near 8K; the "
                    "matching loss curves say the damage did not show in that training run, not that fp16 "
                    "angles are accurate.",
        headline=("bf16_max_angle_error_8192", "fp16_max_angle_error_8192", "fix_fp32_max_angle_error_8192"),
    ),
    Incident(
        name="modded-nanogpt-39",
        reference="KellerJordan/modded-nanogpt#39",
        year=2024,
        stack="modded-nanogpt (PyTorch)",
        fix="keep cos/sin float32 (.float()), rotate in float32 and cast the result with .type_as(x)",
        what="cos/sin cache stored in bf16, rotation applied in bf16",
        code_path="fp32 inv_freq, positions, outer product and cos/sin; cos_cached = freqs.cos().bfloat16(); "
                  "apply: y1 = x1*cos + x2*sin on bf16 q/k (each op rounded to bf16). Fix: .float() cache, so the "
                  "apply runs in fp32 and .type_as(x) casts the result",
        recipe={**stages_of(preset("fp32", "bf16")), "apply": "bfloat16 (elementwise)"},
        settings={"head_dim": 128, "base": 10000.0, "lengths": list(_NANOGPT_LENGTHS)},
        published={"claim": "significant precision issues; numerical errors accumulate in long context",
                   "val_loss_fp32_cache": 3.2783, "val_loss_bf16_cache": "3.28... (cut off in the stored copy)"},
        published_source="issue text (banyan-god, 2024-11-29) and comment with step 1750/1750 val_loss; the "
                         "context length used is not stated (settings here: 1K and the 64K speedrun context)",
        measure=_measure_nanogpt,
        checks=(claim("claim", _nanogpt_no_growth,
                      "max relative error of the rotated q with the bf16 cache {bf16_cache_max_rel_error_0_1024} "
                      "in [0, 1024) and {bf16_cache_max_rel_error_8192_65536} in [8192, 65536) (fp32 cache: "
                      "{fp32_cache_max_rel_error_0_1024} and {fp32_cache_max_rel_error_8192_65536}); cache "
                      "rotation error {bf16_cache_max_rotation_error_1024} rad at 1K, "
                      "{bf16_cache_max_rotation_error_65536} rad at 64K (bound {bf16_cache_bound})"),),
        explanation="Storing cos/sin in bf16 costs one bf16 rounding per entry (<= 2.8e-3 rad of rotation) and "
                    "the bf16 elementwise apply a few more; both are the same at every position, so the relative "
                    "error of the rotated q does not grow with context length. The rotation error that does grow "
                    "(to 5.9e-3 rad at 64K) is the fp32 angle's, shared by the fix. The fp32 cache with a cast "
                    "result halves the relative error of the rotated q; the val_loss difference (3.2783 vs "
                    "3.28..) is the only evidence of an effect and the tool cannot measure it.",
        headline=("bf16_cache_max_rel_error_0_1024", "bf16_cache_max_rel_error_8192_65536",
                  "fp32_cache_max_rel_error_8192_65536"),
    ),
    Incident(
        name="tinygrad-4587",
        reference="tinygrad/tinygrad#4587",
        year=2024,
        stack="tinygrad",
        what="llama precompute_freqs_cis built the positions and angles in half",
        code_path="extra/models/llama.py precompute_freqs_cis(dim, end, theta, dtype=half) before the PR: arange(end) "
                  "and the frequencies in half, their product in half, cos/sin in half; the PR moves .half() after "
                  "cos and sin (positions, frequencies and angles in float32)",
        recipe=stages_of(preset("lowp", "fp16")),
        settings={"head_dim": 128, "base": 500000.0, "context": _TINYGRAD_L, "model": "Llama 3 (settings here)"},
        published={"half_max": 65504.0,
                   "claim": "otherwise arange has inf if either dim or context length exceeds half.max"},
        published_source="PR description (chenyuxyz, 2024-05-14); half.max is fp16's largest finite value, 65504",
        measure=_measure_tinygrad,
        checks=(close("half_max", 0.0),
                claim("claim", lambda m: m["first_context_with_inf"] == int(m["half_max"]) + 1,
                      "positions up to 65519 round to {fp16_of_65504_65519_65520[1]:g} (finite); the first inf is "
                      "position {first_position_inf} (context {first_context_with_inf}), where every one of "
                      "{frequencies_overflowing} angles is inf from then on")),
        explanation="fp16's largest finite value is 65504 = 2047 * 32; 65520 is the midpoint to 2**16 and ties to "
                    "even (2048 * 32 = 2**16, beyond the format), so it is the first integer that rounds to inf. A "
                    "context exceeding half.max is not yet broken: positions 65505..65519 round down to 65504 (they "
                    "collide, they are not inf); from position 65520 every angle of the half path is inf and "
                    "cos/sin are NaN. The fix (float32 until cos/sin, then .half()) keeps every angle finite; its "
                    "rotation error (9.5e-3 rad at 128K) is the float32 angle's and the fp16 cache's.",
        fix="compute the positions, frequencies, angles and cos/sin in float32 and cast cos/sin to half (the PR)",
        headline=("first_position_inf", "first_context_with_inf", "non_finite_angles_131072"),
    ),
    Incident(
        name="transformer-engine-1245",
        reference="NVIDIA/TransformerEngine#1245",
        year=2024,
        stack="Transformer Engine",
        what="fused RoPE on bf16 q/k (Llama 3.1, base 500k) vs the same kernel on fp32 q/k",
        code_path="RotaryPositionEmbedding builds freqs in float32; tex.fused_rope_forward(t, freqs) takes q/k in "
                  "bf16 (FSDP mixed precision), computes the rotation in float32 (TransformerEngine#645) and writes "
                  "bf16; compared with passing t and freqs as float32 (float32 output)",
        recipe={**stages_of(preset("fp32", "fp32")), "apply": "bfloat16 (fp32-then-cast)"},
        settings={"head_dim": 128, "llama31": "base 500000, llama3 factor 8", "llama2": "base 10000",
                  "bands": [0, *_TE_LENGTHS]},
        published={"claim": "a large gap in train/val loss between FP8 autocast enabled and disabled with Llama 3.1 "
                            "(base 500k), not with Llama 2 (base 10k), traced to lower precision RoPE computation"},
        published_source="issue text (viclzhu, 2024-10-12); the loss gap is shown without a number in the stored copy",
        measure=_measure_te,
        checks=(),
        explanation="The fused kernel rotates in float32 either way; with bf16 q/k the only extra step is the final "
                    "bf16 cast of the rotated q/k (unit roundoff 2**-8 per component) whatever the base: the max "
                    "relative error of the rotated q is 2.1e-3 (base 500k, Llama 3.1) and 2.2e-3 (base 10k, Llama 2) "
                    "below 8K, 2.6e-3 and 2.4e-3 up to 128K, where the float32 angle's own error (1.7e-3 and 1.5e-3 "
                    "with a float32 output) is as large as the cast. Nothing here separates base 500k from 10k; what "
                    "the loss gap comes from is not a RoPE precision figure the tool can measure.",
        fix="none needed for the RoPE precision itself (the rotation is float32 and cast once); keep q/k float32 "
            "into the kernel only if the bf16 cast of its output matters",
        not_recomputable="qualitative (a loss gap, no figure)",
        headline=("llama31_bf16_out_max_rel_error_8192_131072", "llama2_bf16_out_max_rel_error_8192_131072"),
    ),
    Incident(
        name="flash-attention-823",
        reference="Dao-AILab/flash-attention#823",
        year=2024,
        stack="flash-attention",
        what="rotary kernel requires cos/sin in the input dtype (bf16)",
        code_path="csrc/rotary/rotary_cuda.cu apply_rotary: cos/sin must have q's dtype, so bf16 cos/sin go into "
                  "a float32 rotation whose result is stored in bf16; the reporter's reference: everything in "
                  "float32, then one cast to bf16 (the same kernel fed float32 cos/sin gives exactly that)",
        recipe={**stages_of(preset("fp32", "bf16")), "apply": "bfloat16 (fp32-then-cast)"},
        settings={"head_dim": 128, "base": 10000.0, "bands": [0, *_FA_LENGTHS], "note": "the report's settings "
                  "are not stated: these are the tool's"},
        published={"bf16_relative_error": 0.24, "fp16": "little error for float16"},
        published_source="issue text (adefossez, 2024-02-12): 'as much as 24% relative error in my use case when "
                         "using bfloat16'",
        measure=_measure_fa,
        checks=(),
        explanation="Rounding cos/sin to bf16 moves each rotated pair by at most about 2**-8 of its length: with "
                    "bf16 cos/sin the max relative error of the rotated q (2-norm over the rotated dims) is 2.8e-3, "
                    "against 2.1e-3 when the same float32 rotation gets float32 cos/sin (the final bf16 cast alone); "
                    "in fp16 both are below 5e-4. A 24 % error is therefore not the norm-relative error of this path; "
                    "an element-wise relative error (unbounded where a rotated component is near zero) or a "
                    "downstream quantity can reach it, and the report does not say which.",
        fix="pass cos/sin in float32 to a float32 rotation and cast the result once (the reporter's reference); the "
            "maintainer pointed to the Triton rotary kernel instead",
        not_recomputable="the 24 % is from 'my use case': head dim, base, positions and error metric are not stated",
        headline=("bf16_cos_sin_max_rel_error_2048_8192", "fp32_cos_sin_bf16_out_max_rel_error_2048_8192"),
    ),
    Incident(
        name="mindone-670",
        reference="mindspore-lab/mindone#670",
        year=2024,
        stack="MindSpore (mindone.transformers T5)",
        what="T5's relative-position bucket log computed in bfloat16 (OpenSora's T5 text encoder)",
        code_path="T5Attention._relative_position_bucket in a bf16 model: log(relative_position / max_exact) / "
                  "log(max_distance / max_exact) * (num_buckets - max_exact) with every operation in bfloat16 "
                  "(the `lowp` path of precision_audit.relative); the fix casts the distance to float32 first "
                  "(relative_position.float(), a float32 max_distance tensor), as transformers does",
        recipe={"distance": "bfloat16", "log": "bfloat16", "division": "bfloat16", "product": "bfloat16"},
        settings={"num_buckets": 32, "max_distance": 128, "lengths": [512, 8192]},
        published={"claim": "[BFloat16 only] relative_position_if_large is computed with .float() to align with the "
                            "PyTorch implementation: the bf16 buckets differed from transformers'"},
        published_source="pull request text (hadipash, 2024-09-20); its error table compares model outputs on "
                         "random text samples, not buckets",
        measure=_measure_mindone,
        checks=(claim("claim", lambda m: m["bf16_encoder_flipped_512"] > 0 and m["fix_float32_encoder_flipped_512"] == 0
                      and m["fix_float32_decoder_flipped_512"] == 0,
                      "bf16 flips {bf16_encoder_flipped_512} encoder distances, float32 "
                      "{fix_float32_encoder_flipped_512}"),),
        explanation="With every bucket operation in bfloat16, 2 of the 512 encoder distances (first 45: "
                    "log(5.625) / log(16) * 8 rounds to exactly 5, bucket 13 instead of 12) and 2 decoder distances "
                    "move one bucket, at every length (the log saturates at max_distance 128); the float32 path of "
                    "the fix (and transformers') moves none. Small but systematic: those distances read another "
                    "learned bias than in training.",
        fix="cast the relative distance to float32 before the log (relative_position.float()), as the PR and "
            "transformers do",
        not_recomputable="the PR's mean/max output errors come from 6 random text samples through the whole model",
        headline=("bf16_encoder_flipped_512", "bf16_decoder_flipped_512"),
    ),
    Incident(
        name="openvino-25883",
        reference="openvinotoolkit/openvino#25883",
        year=2024,
        stack="OpenVINO (GPU plugin)",
        what="position ids and the RoPE MatMul / Sin / Cos in fp16 for FP16 LLMs",
        code_path="GPU plugin graph of an FP16 LLM: position_ids converted to f16, MatMul with the inverse "
                  "frequencies and Sin/Cos in f16. The PR adds IncreasePositionIdsPrecision: converts around the "
                  "MatMul and Sin/Cos so that branch runs in f32",
        recipe=stages_of(preset("lowp", "fp16")),
        settings={"head_dim": 128, "base": 10000.0, "lengths": [2048, 4096],
                  "note": "the PR names no model: a Llama-2-style schedule"},
        published={"claim": "lower accuracy for inputs longer than 2048 tokens (fp16 position ids, sin/cos error)"},
        published_source="PR description (sshlyapn, 2024-08-02): without the converts accuracy drops for input "
                         "sequences longer than 2048, from the fp16 position ids and the sin/cos calculation",
        measure=_measure_ov25883,
        checks=(claim("claim", lambda m: m["first_inexact_position"] == 2049
                      and m["lowp_max_angle_error_4096"] > m["lowp_max_angle_error_2048"],
                      "first inexact fp16 position {first_inexact_position}; angle error {lowp_max_angle_error_2048} "
                      "rad at 2048, {lowp_max_angle_error_4096} at 4096"),),
        explanation="fp16 integers are exact to 2048; 2049 rounds to 2048 and from there every 2nd (then 4th) id "
                    "survives: 3072 of 4096 exact. Position ids are only part of it: with f16 frequencies and an f16 "
                    "product the angle is already off by 0.98 rad within 2048 (the product's rounding at large "
                    "angles) and by 2.8 rad within 4096; the f32 branch stays within 2.5e-4 rad.",
        fix="IncreasePositionIdsPrecision (the PR): position ids, MatMul and Sin/Cos in f32, converted to f16 after",
        headline=("first_inexact_position", "lowp_max_angle_error_2048", "lowp_max_angle_error_4096"),
    ),
    Incident(
        name="flash-attention-846",
        reference="Dao-AILab/flash-attention#846",
        year=2024,
        stack="flash-attention (MHA module)",
        what="the ALiBi slopes buffer cast with the module to fp16 / bf16",
        code_path="flash_attn.modules.mha.MHA registers alibi_slopes as a buffer; module.to(fp16/bf16) casts it and "
                  "the kernel requires fp32 slopes (flash-attention#845: a dtype error). The PR casts the buffer "
                  "back to float32 in forward, after the rounding",
        recipe={"slopes": "float16 or bfloat16 (the module cast), then float32", "bias": "float32 in the kernel"},
        settings={"heads": list(_FA_HEADS), "key_distances": [511, 2047]},
        published={"claim": "the errors from the casts looked negligible in the author's experiments"},
        published_source="PR thread (Markus28, 2024-04-18, answering whether slopes still lose precision): small "
                         "floating point errors from the casts, negligible in the author's experiments",
        measure=_measure_fa846,
        checks=(),
        explanation="The fix removes the crash but not the rounding: slopes that went through fp16 / bf16 come back "
                    "to float32 with the rounded values. Power-of-two head counts up to 8 have slopes 2**-k, exact in "
                    "both formats; 12 heads (BERT-base) have 4 inexact slopes, 16 heads 8 (odd powers of "
                    "2**-0.5). The worst, 2**-0.5 = 0.70711, is stored as 0.70703 in both formats, so the bias is "
                    "off by 0.039 at 511 keys and 0.155 at 2047 keys: small against BERT's 512 tokens, not "
                    "negligible at long context. Whether it mattered for the author's runs is not recomputable.",
        fix="keep alibi_slopes in float32 through the module cast (register it non-persistent and rebuild it, or "
            "override _apply), not only cast it back in forward",
        not_recomputable="qualitative ('negligible in my experiments', no figure)",
        headline=("fp16_inexact_slopes_12", "fp16_max_bias_error_12_heads_511", "fp16_max_bias_error_12_heads_2047"),
    ),
)
