"""Catalog entries reported in 2025: vllm#27722 (gpt-oss' YaRN ramp), executorch#9393, the paper "When
Precision Meets Position" (TMLR 2025), openvino#29556, openvino#33214, OneTrainer#1177, SimpleTuner#2038,
sglang#3134, HabanaAI vllm-fork#1055.

>>> [i.name for i in INCIDENTS][:3]
['vllm-27722', 'executorch-9393', 'when-precision-meets-position']
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format, spacing
from ..positions import predict_positions
from ..rope.attention import apply_errors, attention_errors
from ..rope import RopeSchedule, audit, preset, wrap
from .core import Figures, Incident, claim, close, rounded, stages_of
from .y2024b import alibi_bias_figures, cache_apply_figures

__all__ = ["INCIDENTS"]


# ---- vllm-27722

# gpt-oss-20b's config.json: head_dim 64, rope_theta 150000, rope_scaling yarn (factor 32, original 4096,
# beta_fast 32, beta_slow 1, truncate false)
_GPT_OSS = {"head_dim": 64, "base": 150000.0, "scaling": "yarn", "factor": 32.0,
            "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
_DISTANCES = (256, 4096, 131071)


def _ramp_bounds(s: RopeSchedule) -> tuple[float, float]:
    """YaRN's ramp ends, read back from the schedule's frequencies: theta_i = mix of theta/s and theta by
    ramp(i) = (i - low) / (high - low); two frequencies inside the ramp give low and high."""
    d = s.rotary
    ext = 1.0 / s.base ** (np.arange(0, d, 2) / d)
    ramp = (ext - s.inv_freq()) / (ext - ext / s.factor)
    inside = np.flatnonzero((ramp > 1e-9) & (ramp < 1 - 1e-9))
    i, j = int(inside[0]), int(inside[-1])
    slope = (ramp[j] - ramp[i]) / (j - i)
    low = i - ramp[i] / slope
    return float(low), float(low + 1 / slope)


def _measure_vllm() -> Figures:
    declared = RopeSchedule(**_GPT_OSS, truncate=False)
    truncated = RopeSchedule(**_GPT_OSS, truncate=True)
    a, b = declared.inv_freq(), truncated.inv_freq()
    rel = np.abs(b - a) / a
    low, high = _ramp_bounds(declared)
    t_low, t_high = _ramp_bounds(truncated)
    out: Figures = {
        "low": low, "high": high, "truncated_low": rounded(t_low, 12), "truncated_high": rounded(t_high, 12),
        "frequencies": int(a.size),
        "frequencies_differing": int(np.count_nonzero(a != b)),
        "differing_indices": [int(i) for i in np.flatnonzero(a != b)],
        "max_relative_difference": rounded(float(rel.max()), 4),
        "max_relative_difference_at": int(rel.argmax()),
    }
    for D in _DISTANCES:
        err = np.abs(wrap(D * (b - a)))
        out[f"pairwise_error_{D}"] = rounded(float(err.max()), 4)
        out[f"pairwise_error_{D}_at"] = int(err.argmax())
    return out


# ---- executorch-9393

_LLAMA32 = RopeSchedule(head_dim=64, base=500000.0, scaling="llama3", factor=32.0, low_freq_factor=1.0,
                        high_freq_factor=4.0, original_max_position_embeddings=8192)
_ET_LENGTHS = (2048, 8192, 131072)


def _measure_executorch() -> Figures:
    cast, keep = preset("fp32", "bf16"), preset("fp32", "fp32")
    out: Figures = {}
    for r in audit(_LLAMA32, [cast, keep], [2048, 131072]):
        out[f"{r.dtype}_table_max_rotation_error_{r.length}"] = rounded(r.max_rotation_error, 4)
        if r.dtype == "bfloat16":
            out["bf16_cache_bound"] = rounded(r.cache_bound, 4)
    for name, recipe, mode in (("cast_buffers", cast, "fp32-then-cast"), ("fp32_buffers", keep, "fp32-then-cast"),
                               ("transformers_path", cast, "elementwise")):
        for r in apply_errors(_LLAMA32, recipe, _ET_LENGTHS, "bf16", mode):
            out[f"{name}_max_rel_error_{r.band_start}_{r.band_stop}"] = rounded(r.max_rel_error, 4)
    return out


# ---- when-precision-meets-position (TMLR 2025)

_LLAMA2 = RopeSchedule(head_dim=128, base=10000.0)
_PAPER_LENGTHS = (4096, 32768, 65536)
_PAPER_PATHS = (("bf16_cache", preset("fp32", "bf16")), ("fp32", preset("fp32", "fp32")),
                ("lowp", preset("lowp", "bf16")))


def _measure_paper() -> Figures:
    out: Figures = {}
    for L in _PAPER_LENGTHS:
        for name, recipe in _PAPER_PATHS:
            rows = attention_errors(_LLAMA2, recipe, L, [1, 16], pairs=4, shifts=256)
            out[f"{name}_score_spread_{L}"] = rounded(max(r.score_spread for r in rows), 4)
    out["logit_rms"] = rounded(rows[0].logit_rms, 4)
    return out


# ---- openvino-33214 / openvino-29556


def _measure_ov33214() -> Figures:
    p = predict_positions(8192, "float16")
    return {
        "fp16_significand_bits": get_format("fp16").significand_bits,
        "fp16_spacing_2048_4096": float(spacing([2048.0], "float16")[0]),
        "fp16_spacing_4096_8192": float(spacing([4096.0], "float16")[0]),
        "first_inexact_position": p.first_inexact,
        "exact_positions_8192": p.exact_count,
        "max_position_error_8192": p.max_abs_error,
    }


def _measure_ov29556() -> Figures:
    p = predict_positions(131072, "float16")
    return {"first_inexact_position": p.first_inexact, "first_infinite_position": p.overflow_position,
            "non_finite_positions_131072": p.non_finite, "distinct_positions_131072": p.distinct_values}


# ---- onetrainer-1177 / simpletuner-2038

_FLUX_TEXT_IDS = 512  # T5 max_sequence_length: Flux.2-style text ids 0..511
_FLUX_IMAGE_IDS = (64, 128, 256)  # latent patches per side: 1024, 2048, 4096 px images


def _measure_flux_ids() -> Figures:
    t = predict_positions(_FLUX_TEXT_IDS, "bfloat16")
    out: Figures = {
        "bf16_exact_ids_to": get_format("bf16").max_exact_integer,
        "text_ids_first_inexact": t.first_inexact,
        "text_ids_distinct_512": t.distinct_values,
        "text_ids_exact_512": t.exact_count,
        "text_ids_max_run_512": t.max_run,
        "fp16_text_ids_exact_512": predict_positions(_FLUX_TEXT_IDS, "float16").exact_count,
        "flux1_text_ids_distinct": 1,  # diffusers' Flux.1 pipeline: txt_ids = zeros(seq_len, 3)
    }
    for n in _FLUX_IMAGE_IDS:
        out[f"image_ids_exact_{n}"] = predict_positions(n, "bfloat16").exact_count
    out["image_ids_exact"] = all(out[f"image_ids_exact_{n}"] == n for n in _FLUX_IMAGE_IDS)
    return out

# ---- sglang-3134


def _measure_sglang3134() -> Figures:
    return {f"bf16_{k}": v for k, v in cache_apply_figures("bfloat16").items()}


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="vllm-27722",
        reference="vllm-project/vllm#27722",
        year=2025,
        stack="vLLM (and SGLang)",
        what="gpt-oss' YaRN ramp bounds rounded to integers although its config says truncate: false",
        code_path="vLLM yarn_find_correction_range always floor()s low and ceil()s high; transformers' "
                  "_compute_yarn_parameters (and OpenAI's reference) keep them unrounded when rope_scaling.truncate "
                  "is false, as gpt-oss' config.json says. The schedule then differs, every stage in float32",
        recipe=stages_of(preset("fp32", "bf16")),
        settings={**_GPT_OSS, "truncate": "false (declared) vs true (vLLM before #28244)",
                  "distances": list(_DISTANCES)},
        published={"low": 8.092779115512402, "high": 17.39802450158856, "truncated_low": 8.0,
                   "truncated_high": 18.0, "claim": "high logprob errors when using vLLM for RL"},
        published_source="issue (ashors1, 2025-10-29: truncate false in gpt-oss' config, vLLM always rounds; 'we "
                         "see high logprob errors when using VLLM for RL') and the fix's test result (vllm#28244: "
                         "'low=8.092779115512402, high=17.39802450158856'); the rounded 8 / 18 are floor / ceil",
        measure=_measure_vllm,
        checks=(close("low", 1e-9), close("high", 1e-9), close("truncated_low", 0.0), close("truncated_high", 0.0)),
        explanation="Rounding the ramp to [8, 18] changes the 9 frequencies with index 9..17 of 32 (index 8 is "
                    "at or below both ramps' start), by up to 76 % (index 17: the unscaled frequency keeps weight "
                    "0.043 unrounded and 0.100 rounded, and it is 32 times the scaled one). Attention sees angle "
                    "differences: two tokens D apart rotate pair i by D * theta_i, so the truncated schedule is "
                    "off by up to 0.057 rad at D = 256 and 0.90 rad at D = 4096 (pair 12), a systematic error on "
                    "every long-range logit, not rounding noise; that fits logprob mismatches between the trainer "
                    "(transformers) and the vLLM rollouts. The logprob "
                    "errors themselves are stated without a figure.",
        fix="honour rope_scaling.truncate: vllm#28244 adds the truncate argument to YaRN, sglang#14270 the same",
        not_recomputable="the RL logprob errors are stated without a figure",
        headline=("low", "high", "frequencies_differing", "pairwise_error_256", "pairwise_error_4096"),
    ),
    Incident(
        name="executorch-9393",
        reference="pytorch/executorch#9393",
        year=2025,
        stack="ExecuTorch",
        what="model.to(bf16) casts the float32 freqs_cos / freqs_sin buffers of ExecuTorch's Llama",
        code_path="precompute_freqs_cis builds freqs, the angles and cos/sin in float32 and registers freqs_cos / "
                  "freqs_sin as buffers; get_eager_model's model.to(bf16) rounds them to bf16; apply_rotary_emb "
                  "rotates xq.float() by them in float32 and casts the result with .type_as(xq)",
        recipe={**stages_of(preset("fp32", "bf16")), "apply": "bfloat16 (fp32-then-cast)"},
        settings={"head_dim": 64, "base": 500000.0, "scaling": "llama3 (factor 32)", "model": "Llama 3.2 1B "
                  "(settings here; the report names no model size)", "bands": [0, *_ET_LENGTHS]},
        published={"claim": "converting freqs_cos from FP32 to BF16 leads to data loss and affects inference",
                   "fix": "freqs_cos should always keep FP32"},
        published_source="issue text (WeiMa01, 2025-03-19); no figure",
        measure=_measure_executorch,
        checks=(claim("claim", lambda m: m["bfloat16_table_max_rotation_error_2048"]
                      > 10 * m["float32_table_max_rotation_error_2048"],
                      "the bf16 table rotates by up to {bfloat16_table_max_rotation_error_2048} rad off at 2K, the "
                      "float32 table {float32_table_max_rotation_error_2048} rad"),),
        explanation="The cast rounds the final cos/sin once: exactly the table the standard fix (float32 angles, "
                    "cos/sin cast to bf16, as transformers does) stores, so it is no worse than that fix; its "
                    "rotation error is the bf16 rounding bound (2.8e-3 rad) at short context, and at 128K the "
                    "float32 angle's error dominates both tables. The loss the report sees is real but small: the "
                    "rotated q's max relative error goes from 2.1e-3 (float32 buffers, float32 rotation, one cast) to "
                    "2.8e-3 (bf16 buffers), against 3.7e-3 for transformers' path (bf16 cos/sin and a bf16 "
                    "element-wise rotation). Whether that changes an inference is not stated with a figure.",
        fix="keep freqs_cos / freqs_sin float32 through the cast (executorch#8488 drops the dtype conversion in "
            "get_eager_model); or accept the cast: it costs one bf16 rounding of cos/sin",
        not_recomputable="'affects inference' is stated without a figure",
        headline=("bfloat16_table_max_rotation_error_2048", "cast_buffers_max_rel_error_0_2048",
                  "fp32_buffers_max_rel_error_0_2048"),
    ),
    Incident(
        name="when-precision-meets-position",
        reference="arXiv:2411.13476 (TMLR 2025)",
        source="https://arxiv.org/abs/2411.13476",
        year=2025,
        stack="long-context training in bf16 (Llama RoPE)",
        what="'BFloat16 breaks down RoPE in long-context training' (Wang et al., AnchorAttention)",
        code_path="RoPE in a bf16 training run: float32 angles, cos/sin and q/k in bf16 and the rotation in bf16 "
                  "(transformers' Llama path); the tool also runs the all-bf16 path and the float32 one",
        recipe={**stages_of(preset("fp32", "bf16")), "apply": "bfloat16 (elementwise)"},
        settings={"head_dim": 128, "base": 10000.0, "lengths": list(_PAPER_LENGTHS), "distances": [1, 16],
                  "note": "Llama-2-style settings here; the paper's figures are plots"},
        published={"claim": "RoPE with BFloat16 deviates from its relative positional encoding, and the deviation "
                            "accumulates as context length increases",
                   "first_token": "the first token contributes significantly to the deviation"},
        published_source="abstract and Sec. 2-3 (Wang, Liu, Du, Zhu, Du, Kawaguchi, Pang; arXiv 2024-11-20, TMLR "
                         "2025); the deviations are shown as plots, no number is stated in the stored copy",
        measure=_measure_paper,
        checks=(),
        explanation="The tool measures the RoPE part of the claim: how far the logit of a fixed (q, k) pair at a "
                    "fixed distance changes when both move along the context (exact RoPE: not at all). With "
                    "transformers' bf16 path the spread is about 0.3 at 4K, 32K and 64K (typical |logit| 15): a "
                    "deviation from relative encoding, but one that does not grow with length, since cos/sin "
                    "rounding is the same at every position; in float32 it grows with the angle (1.4e-3 at 4K to "
                    "2.6e-2 at 64K); with positions and angles in bf16 it is 20 and more at every length from 4K. "
                    "Growth with length, as the paper describes it, comes from more than the RoPE tables (bf16 "
                    "attention over longer sequences), which the tool does not model.",
        fix="AnchorAttention (the paper): a shared anchor token with a fixed position id; for the RoPE tables "
            "themselves, float32 angles and cos/sin and a float32 rotation",
        not_recomputable="qualitative (the paper's deviations are plots)",
        headline=("bf16_cache_score_spread_4096", "bf16_cache_score_spread_65536", "lowp_score_spread_65536"),
    ),
    Incident(
        name="openvino-29556",
        reference="openvinotoolkit/openvino#29556",
        year=2025,
        stack="OpenVINO (GPU plugin)",
        what="LongRoPE's embeddings cast to FP16 on the GPU plugin",
        code_path="GPU plugin, LongRoPE models (Phi-3 family): the RoPE branch runs in FP16; the PR forces FP32 for "
                  "it (merged into IncreasePositionIdsPrecision)",
        recipe=stages_of(preset("lowp", "fp16")),
        settings={"lengths": [131072]},
        published={"claim": "positional encodings lose precision dramatically at very large context lengths"},
        published_source="PR description (andrew-k-park, 2025-03-19): in FP16 the LongRoPE embeddings lose "
                         "precision dramatically for very long contexts; FP32 is forced",
        measure=_measure_ov29556,
        checks=(),
        explanation="The PR states no figure and no model settings. What fp16 does to the position ids alone, at "
                    "LongRoPE's 128K: exact to 2048, and from 65520 on every id is inf (65504 is the largest "
                    "finite value), so 65552 of 131072 positions are not finite; the angles break far earlier "
                    "(openvino-25883).",
        fix="force FP32 for the LongRoPE branch (the PR; backported as openvino#29591)",
        not_recomputable="qualitative (no figure, no model named)",
        headline=("first_inexact_position", "first_infinite_position", "non_finite_positions_131072"),
    ),
    Incident(
        name="openvino-33214",
        reference="openvinotoolkit/openvino#33214",
        year=2025,
        stack="OpenVINO (GPU plugin)",
        what="position ids converted i32 -> f16 before the RoPE MatMul; repeated responses past 4K tokens",
        code_path="GPU plugin graph: Convert_2 (position_ids i32 -> f16) -> MatMul with the broadcast frequencies -> "
                  "Sin/Cos. Fix: Convert i32 -> f32, a Convert f16 -> f32 after the Broadcast, and f32 -> f16 "
                  "after Sin and Cos",
        recipe={"positions": "float16", "inv_freq": "float16", "angle": "float16", "trig": "float16"},
        settings={"lengths": [8192]},
        published={"fp16_spacing_4096_8192": 4.0, "fp16_significand_bits": 11,
                   "claim": "fp16 position ids are quantized to multiples of 4; the fix preserves ids above 4096"},
        published_source="PR description (ahnyoung-paul, 2025-12-12): ids quantized to multiples of 4 by fp16's "
                         "10-bit mantissa; f32 keeps integer precision above 4096; repetition for inputs over 4K",
        measure=_measure_ov33214,
        checks=(close("fp16_spacing_4096_8192", 0.0), close("fp16_significand_bits", 0)),
        explanation="fp16 stores 10 mantissa bits (11 significant): ids are exact to 2048, multiples of 2 in "
                    "[2048, 4096) and of 4 in [4096, 8192), as stated. The loss starts at 2049, not 4096: only 4096 "
                    "of the first 8192 ids are exact, and ids are off by up to 2 below 8192. That the "
                    "repetition showed only past 4K fits the error growing with the spacing, not a threshold at "
                    "4096.",
        fix="position ids i32 -> f32, MatMul and Sin/Cos in f32, f32 -> f16 after Sin/Cos (the PR)",
        headline=("fp16_spacing_2048_4096", "fp16_spacing_4096_8192", "first_inexact_position"),
    ),
    Incident(
        name="onetrainer-1177",
        reference="Nerogar/OneTrainer#1177",
        year=2025,
        stack="OneTrainer (Flux / Flux.2 sampling and training)",
        what="every transformer input, text and image ids included, cast to the train dtype (bf16)",
        code_path="FluxSampler and the training path cast all transformer inputs to the train dtype; the ids reach "
                  "the position embedder in bf16, which upcasts them and computes the angles in float64 / float32",
        recipe={"positions": "bfloat16 (ids)", "angle": "float64 (diffusers' Flux pos embed)"},
        settings={"text_ids": f"0..{_FLUX_TEXT_IDS - 1}", "image_ids_per_side": list(_FLUX_IMAGE_IDS)},
        published={"text_ids": "bf16 mixes up text ids of prompts up to 512 tokens",
                   "image_ids": "image ids (up to 32 or 64) could still have precision issues"},
        published_source="issue (dxqb, 2025-11-30): bf16 cannot represent text ids of long prompts (up to 512 "
                         "tokens) and mixes up tokens; image ids are smaller but could still be affected",
        measure=_measure_flux_ids,
        checks=(claim("text_ids", lambda m: m["text_ids_distinct_512"] < _FLUX_TEXT_IDS,
                      "{text_ids_distinct_512} distinct of 512 text ids"),
                claim("image_ids", lambda m: not m["image_ids_exact"],
                      "bf16 is exact for every id to {bf16_exact_ids_to}: image ids 0..63, 0..127 and 0..255 "
                      "(1024, 2048, 4096 px) all survive")),
        explanation="bf16 keeps integers exact to 256: in [256, 512) the spacing is 2, so the odd ids 257..511 "
                    "round to even values; 512 text ids keep 385 distinct values, up to 3 neighbouring tokens "
                    "share one, all in the second half of the prompt. Image ids stay below 256 for any "
                    "image up to 4096 px (16-pixel patches), so they are exact: the image half of the report does "
                    "not hold. fp16 would keep all 512 text ids.",
        fix="pass ids (and timesteps) in float32; autocast handles the matmuls",
        headline=("text_ids_first_inexact", "text_ids_distinct_512", "image_ids_exact"),
    ),
    Incident(
        name="simpletuner-2038",
        reference="bghira/SimpleTuner#2038",
        year=2025,
        stack="SimpleTuner (Flux, Chroma)",
        what="Flux position ids (and timesteps) handled in the model dtype; the PR moves them to float32",
        code_path="Flux / Chroma transformer: ids and timesteps in the weight dtype (bf16) before the position and "
                  "timestep embedders; the PR casts them to float32",
        recipe={"positions": "bfloat16 (ids)"},
        settings={"text_ids": f"0..{_FLUX_TEXT_IDS - 1} (Flux.2-style) or all zero (Flux.1)",
                  "image_ids_per_side": list(_FLUX_IMAGE_IDS)},
        published={"claim": "the pos-embed precision problem wrecks the model's grasp of the end of long prompts"},
        published_source="PR description (bghira, 2025-11-30): the positional-embedding precision issue causes "
                          "havoc for the end of long prompts, less severe than the timestep one",
        measure=_measure_flux_ids,
        checks=(),
        explanation="No figure is given. Where a bf16 id cast can hurt: only ids above 256. With text ids 0..511 "
                    "(Flux.2-style, onetrainer-1177) ids from 257 collide, i.e. exactly the end of a long prompt, "
                    "which fits the claim. With diffusers' Flux.1 ids (text ids all zero, image ids below 256) the "
                    "cast changes nothing, so for Flux.1 / Chroma the effect must come from elsewhere (the timestep "
                    "cast the same PR fixes).",
        fix="ids and timesteps in float32 (the PR)",
        not_recomputable="qualitative (no figure; which Flux ids the report means is not stated)",
        headline=("text_ids_first_inexact", "text_ids_distinct_512", "image_ids_exact"),
    ),
    Incident(
        name="sglang-3134",
        reference="sgl-project/sglang#3134",
        year=2025,
        stack="SGLang (FlashInfer RoPE)",
        what="RoPE moved from an all-bf16 path (cos/sin, q/k and the arithmetic) to FlashInfer's fp32 cos/sin "
             "and fp32 arithmetic",
        code_path="before: cos, sin, q, k in bf16 and the rotation computed in bf16; after: "
                  "apply_rope_with_cos_sin_cache_inplace (flashinfer#754) with an fp32 cos_sin_cache, q/k upcast "
                  "to fp32 inside the kernel, one rounding to bf16",
        recipe={"before": "cache bf16, products bf16", "after": "cache float32, math float32, output bf16"},
        settings={"head_dim": 128, "base": 10000.0, "positions": 4096,
                  "queries": "standard normal, seed 0, rounded to bf16"},
        published={"claim": "fp32 is required for long context; otherwise significant numerical instability"},
        published_source="PR description (ByronHsu, 2025-01-26; merged): better precision (fp32 cos/sin and "
                         "arithmetic) and better speed; the figures given are kernel and serving timings",
        measure=_measure_sglang3134,
        checks=(),
        explanation="What the change buys at the apply step: the bf16 table is off by up to 2**-9 per value, and "
                    "with the products rounded to bf16 as well, 38 % of outputs move, by up to 2 ulps of the pair's "
                    "norm (up to 0.031 for |q| near 4); with fp32 table and math only the final rounding remains. "
                    "That is bounded, not growing with context: the long-context part of the claim rests on how "
                    "the angles are made (fp32 here, see sglang-33117 for the table's own error at 128K).",
        fix="fp32 cos_sin_cache and fp32 arithmetic in the kernel (the PR, with flashinfer#754)",
        not_recomputable="qualitative ('numerical instability', no precision figure)",
        headline=("bf16_cache_max_abs_error", "bf16_math_outputs_changed", "bf16_math_max_error_in_pair_ulps"),
    ),
    Incident(
        name="vllm-fork-1055",
        reference="HabanaAI/vllm-fork#1055",
        year=2025,
        stack="vLLM on Gaudi (HabanaAI vllm-fork)",
        what="ALiBi fully re-enabled on Gaudi: vllm-fork#503 re-landed after its revert (#907)",
        code_path="the same changes as vllm-fork-503 (decode biases, shared biases, VLLM_ALIBI_USE_FLOAT32_BIASES), "
                  "with vllm-hpu-extension#141",
        recipe={"bias": "bfloat16 (default) or float32 (VLLM_ALIBI_USE_FLOAT32_BIASES)"},
        settings={"heads": 32, "slopes": "2**(-8k/32) (MPT-7B)", "lengths": [2048, 8192]},
        published={"claim": "resolves a regression in ALiBi-based models"},
        published_source="PR description (tvoas, 2025-04-10; merged): a fixed version of #503, which #907 "
                         "reverted; test runs in the thread",
        measure=alibi_bias_figures,
        checks=(),
        explanation="The thread states no precision figure of its own; the bf16 bias rounding it carries over "
                    "from #503 is measured there (off by up to 4 logits at 2048 keys and 16 at 8192 for MPT-7B's "
                    "steepest head, float32 within 2.5e-4).",
        fix="as vllm-fork-503: float32 ALiBi biases",
        not_recomputable="qualitative (a regression fix; no figure)",
        headline=("bf16_max_bias_error_2048", "bf16_max_bias_error_8192", "fp32_max_bias_error_8192"),
    ),
)
