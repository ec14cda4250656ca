"""Catalog entries reported in 2024, second module (issue 40): flashinfer#585, keras-hub#1497, keras-hub#1508,
Megatron-LM#744, DeeperSpeed#61, HabanaAI vllm-fork#503.

>>> [i.name for i in INCIDENTS][:3]
['flashinfer-585', 'keras-hub-1497', 'keras-hub-1508']
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..formats import round_to, spacing
from ..positions import predict_positions
from ..rope import RopeSchedule, audit, preset
from .core import Figures, Incident, claim, close, rounded, stages_of
from .y2024 import paper_slopes

__all__ = ["INCIDENTS", "cache_apply_figures", "alibi_bias_figures"]


def _r(x: Any, fmt: str) -> np.ndarray:
    """Round float64 values to ``fmt`` (correctly rounded: one operation's result as the hardware stores it)."""
    return np.asarray(round_to(np.asarray(x, dtype=np.float64), fmt), dtype=np.float64)


# ---- flashinfer-585 (and sglang-3134): a cos/sin cache stored in the activation dtype

_CACHE_POSITIONS, _CACHE_HEAD, _CACHE_BASE = 4096, 128, 10000.0


def fp32_cache(n: int = _CACHE_POSITIONS, d: int = _CACHE_HEAD, base: float = _CACHE_BASE) -> tuple[np.ndarray, ...]:
    """The float32 cos/sin table as a float32 kernel builds it: fp32 inv_freq, fp32 product, cos/sin rounded."""
    inv = _r(1.0 / base ** (np.arange(0, d, 2) / d), "float32")
    a = _r(np.arange(n, dtype=np.float64)[:, None] * inv[None, :], "float32")
    return _r(np.cos(a), "float32"), _r(np.sin(a), "float32")


def cache_apply_figures(fmt: str, seed: int = 0) -> Figures:
    """A NeoX rotation of ``fmt`` queries with the fp32 table (one rounding of the fp32 result) against the same
    rotation with the table stored in ``fmt``, and against every product and the difference rounded to ``fmt``.

    Queries: a fixed standard normal draw rounded to ``fmt`` (one head, 4096 positions, head_dim 128).  Errors
    are also given in ulps of the pair's norm (the rotation's scale): ulps of a near-zero output are meaningless.
    """
    c, s = fp32_cache()
    q = _r(np.random.default_rng(seed).standard_normal((_CACHE_POSITIONS, _CACHE_HEAD)), fmt)
    x1, x2 = q[:, : _CACHE_HEAD // 2], q[:, _CACHE_HEAD // 2:]
    ref = _r(np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=1), fmt)  # fp32 math, one rounding
    cl, sl = _r(c, fmt), _r(s, fmt)
    low_cache = _r(np.concatenate([x1 * cl - x2 * sl, x2 * cl + x1 * sl], axis=1), fmt)
    low_math = _r(np.concatenate([_r(x1 * cl, fmt) - _r(x2 * sl, fmt), _r(x2 * cl, fmt) + _r(x1 * sl, fmt)],
                                 axis=1), fmt)
    norm = np.hypot(x1, x2)  # the rotation keeps each pair's norm: the output's scale, even where it is near 0
    ulp = np.asarray(spacing(np.concatenate([norm, norm], axis=1), fmt), dtype=np.float64)
    out: Figures = {"cache_max_abs_error": rounded(float(max(np.abs(cl - c).max(), np.abs(sl - s).max())), 4)}
    for tag, o in (("cache", low_cache), ("math", low_math)):
        d = np.abs(o - ref)
        out[f"{tag}_outputs_changed"] = rounded(float(np.mean(d > 0)), 4)
        out[f"{tag}_max_error_in_pair_ulps"] = rounded(float((d / ulp).max()), 4)
        out[f"{tag}_max_abs_output_error"] = rounded(float(d.max()), 4)
    return out


def _measure_flashinfer() -> Figures:
    out = {f"fp16_{k}": v for k, v in cache_apply_figures("float16").items()}
    out.update({f"bf16_{k}": v for k, v in cache_apply_figures("bfloat16").items()})
    out["fp16_half_spacing_below_1"] = math.ldexp(1.0, -12)
    out["bf16_half_spacing_below_1"] = math.ldexp(1.0, -9)
    return out


# ---- keras-hub-1497 / keras-hub-1508 (Gemma's RoPE in the compute dtype)

_GEMMA = RopeSchedule(head_dim=256, base=10000.0)  # Gemma 2B / 7B: head_dim 256, max_wavelength 10000
_GEMMA_L = 8192


def _measure_keras() -> Figures:
    rows = {(r.recipe, r.dtype): r for r in audit(_GEMMA, [preset("lowp", "bf16"), preset("fp32", "bf16")],
                                                    [_GEMMA_L])}
    half = audit(_GEMMA, [preset("lowp", "fp16")], [_GEMMA_L])[0]
    p = predict_positions(_GEMMA_L, "bfloat16")
    return {
        "bf16_of_8190": float(_r(8190.0, "bfloat16")),
        "bf16_of_8191": float(_r(8191.0, "bfloat16")),
        "bf16_spacing_4096_8192": float(spacing([4096.0], "bf16")[0]),
        "distinct_positions_8192": p.distinct_values,
        "bf16_lowp_max_angle_error_8192": rounded(rows["lowp", "bfloat16"].max_angle_error, 4),
        "fp16_lowp_max_angle_error_8192": rounded(half.max_angle_error, 4),
        "fp32_max_angle_error_8192": rounded(rows["fp32", "bfloat16"].max_angle_error, 4),
    }


# ---- megatron-lm-744 / deeperspeed-61 (a model-wide cast reaches the rotary buffer)

_LLAMA2 = RopeSchedule(head_dim=128, base=10000.0)
_NEOX20B = RopeSchedule(head_dim=96, rotary_dim=24, base=10000.0)  # rotary_pct 0.25


def _cast_figures(s: RopeSchedule, fmt: str, L: int) -> Figures:
    rows = {r.recipe: r for r in audit(s, [preset("lowp", fmt), preset("lowp-inv-freq", fmt), preset("fp32", fmt)],
                                       [L])}
    inv = s.inv_freq()
    rel = np.abs(_r(inv, fmt) - inv) / inv
    return {
        "inv_freq_max_relative_error": rounded(float(rel.max()), 4),
        f"lowp_max_angle_error_{L}": rounded(rows["lowp"].max_angle_error, 4),
        f"inv_freq_cast_max_angle_error_{L}": rounded(rows["lowp-inv-freq"].max_angle_error, 4),
        f"fp32_max_angle_error_{L}": rounded(rows["fp32"].max_angle_error, 4),
        f"exact_positions_{L}": predict_positions(L, fmt).exact_count,
    }


def _measure_megatron744() -> Figures:
    return _cast_figures(_LLAMA2, "bfloat16", 4096)


def _measure_deeperspeed() -> Figures:
    return _cast_figures(_NEOX20B, "float16", 2048)


# ---- vllm-fork-503 (and vllm-fork-1055): ALiBi biases in bf16 on Gaudi

_MPT_HEADS = 32  # MPT-7B: 32 heads, alibi_bias_max 8 (the paper's slopes 2**(-8k/32))
_ALIBI_LENGTHS = (2048, 8192)


def alibi_bias_figures(heads: int = _MPT_HEADS, lengths: tuple[int, ...] = _ALIBI_LENGTHS) -> Figures:
    """Each bias slope * distance rounded once to bf16 (and to fp32): the least a bias tensor in that dtype loses."""
    s = np.asarray(paper_slopes(heads))
    out: Figures = {}
    for L in lengths:
        exact = s[:, None] * np.arange(L, dtype=np.float64)[None, :]
        for fmt, tag in (("bfloat16", "bf16"), ("float32", "fp32")):
            out[f"{tag}_max_bias_error_{L}"] = rounded(float(np.abs(_r(exact, fmt) - exact).max()), 4)
        out[f"bf16_distinct_biases_steepest_head_{L}"] = int(np.unique(_r(exact[0], "bfloat16")).size)
    out["steepest_slope"] = rounded(float(s[0]), 6)
    return out


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="flashinfer-585",
        reference="flashinfer-ai/flashinfer#585",
        year=2024,
        stack="FlashInfer",
        what="RoPE with a cached cos/sin table: an f16 table differs from the kernel that computes cos/sin in fp32",
        code_path="apply_rope_with_cos_sin_cache (new in the PR): the kernel reads cos/sin from a table instead of "
                  "computing them in float32 on the fly; the PR requires the table in float32",
        recipe={"cache": "float16 or bfloat16 (the rejected option) / float32 (required)", "apply": "float32 math"},
        settings={"head_dim": _CACHE_HEAD, "base": _CACHE_BASE, "positions": _CACHE_POSITIONS,
                  "queries": "standard normal, seed 0, rounded to the dtype"},
        published={"claim": "an f16 cos/sin cache gives a large discrepancy against the fp32 implementation"},
        published_source="PR description (yzh119, 2024-11-05): with an f16 cos/sin cache the RoPE result shows a "
                         "large discrepancy against flashinfer.apply_rope (fp32 cos/sin), so the cache must be fp32",
        measure=_measure_flashinfer,
        checks=(),
        explanation="A table entry rounded to fp16 moves by at most 2**-12 = 2.4e-4 (values in [0.5, 1]), to bf16 "
                    "by 2**-9 = 2.0e-3. With the rotation done in float32 and rounded once, that changes 28 % of "
                    "fp16 outputs, each by at most 1 ulp of the pair's norm (bf16 table and queries: 28 %, also "
                    "1 ulp); doing the products in the dtype as well changes 39 %, by up to 2 ulps. So the "
                    "discrepancy is real and systematic but output-rounding-sized; 'large' is not recomputable "
                    "from the thread (no figure, no inputs).",
        fix="keep the cos/sin cache in float32 (the PR requires it; sglang#3134 adopts it)",
        not_recomputable="qualitative ('large discrepancy', no figure or inputs)",
        headline=("fp16_cache_max_abs_error", "fp16_cache_outputs_changed", "fp16_cache_max_error_in_pair_ulps"),
    ),
    Incident(
        name="keras-hub-1497",
        reference="keras-team/keras-hub#1497",
        year=2024,
        stack="KerasNLP / keras-hub (Gemma)",
        what="Gemma's RoPE positions and frequency exponents cast to the compute dtype (bf16 under mixed_bfloat16)",
        code_path="GemmaAttention._apply_rope: freq exponents and positions cast to self.compute_dtype before the "
                  "product, so under mixed_bfloat16 the angles come from bf16 positions. The PR computes RoPE in "
                  "float32 (issue keras-hub#1494, from unsloth's Gemma report, is what it fixes)",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"head_dim": 256, "base": 10000.0, "lengths": [_GEMMA_L]},
        published={"bf16_of_8190": 8192.0, "bf16_of_8191": 8192.0},
        published_source="issue keras-hub#1494 (awsaf49, 2024-03-07, quoting unsloth's Gemma report), fixed by this "
                         "PR and #1508: in bf16, positions [8190, 8191] become [8192, 8192]",
        measure=_measure_keras,
        checks=(close("bf16_of_8190", 0.0), close("bf16_of_8191", 0.0)),
        explanation="bf16 keeps 8 significant bits: in [4096, 8192) the spacing is 32, so 8190 and 8191 both round "
                    "to 8192, and of the 8192 positions only 897 distinct values remain. Positions are not the "
                    "only loss: with the product and cos/sin in bf16 as well, the angle is off by up to pi at 8K; "
                    "float32 angles with a bf16 cache stay within 6e-4 rad.",
        fix="compute RoPE in float32 and cast the rotated values back to the compute dtype (#1497, #1508)",
        headline=("bf16_of_8191", "distinct_positions_8192", "bf16_lowp_max_angle_error_8192"),
    ),
    Incident(
        name="keras-hub-1508",
        reference="keras-team/keras-hub#1508",
        year=2024,
        stack="KerasNLP / keras-hub (RotaryEmbedding layer)",
        what="the shared RotaryEmbedding layer computed in the layer's dtype; the PR makes it float32 always",
        code_path="keras_nlp.layers.RotaryEmbedding: angles, cos and sin in the compute dtype; the PR casts to "
                  "float32 inside the layer and back at the end, and moves Gemma onto the layer",
        recipe={"before": "positions, angle, cos/sin in the compute dtype", "after": "float32, cast at the end"},
        settings={"head_dim": 256, "base": 10000.0, "lengths": [_GEMMA_L]},
        published={"claim": "significant precision losses in dtypes other than float32"},
        published_source="PR description (tirthasheshpatel, 2024-03-12): the layer always computes in float32 "
                         "because of significant precision losses in other dtypes; follow-up of #1497",
        measure=_measure_keras,
        checks=(claim("claim", lambda m: min(m["bf16_lowp_max_angle_error_8192"], m["fp16_lowp_max_angle_error_8192"])
                      > 100 * m["fp32_max_angle_error_8192"],
                      "max angle error at 8192: bf16 {bf16_lowp_max_angle_error_8192}, fp16 "
                      "{fp16_lowp_max_angle_error_8192}, float32 {fp32_max_angle_error_8192} rad"),),
        explanation="At Gemma's 8192 context the all-bf16 computation is off by up to pi (random phases) and the "
                    "all-fp16 one also by up to pi (positions exact only to 2048, the product rounded at angles "
                    "up to 8191), while float32 angles with the bf16 output stay within 6e-4 rad.",
        fix="compute in float32 inside the layer, cast the result to the compute dtype (the PR)",
        headline=("bf16_lowp_max_angle_error_8192", "fp16_lowp_max_angle_error_8192", "fp32_max_angle_error_8192"),
    ),
    Incident(
        name="megatron-lm-744",
        reference="NVIDIA/Megatron-LM#744",
        year=2024,
        stack="Megatron-LM (Megatron-Core)",
        what="question: model.to(bfloat16) casts RotaryEmbedding's inv_freq buffer; should it stay float32?",
        code_path="RotaryEmbedding registers inv_freq as a buffer, so model.to(torch.bfloat16) rounds it; the "
                  "positions are built in inv_freq's dtype (as in megatron-lm-535's listing) and the angle "
                  "product follows",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"head_dim": 128, "base": 10000.0, "lengths": [4096]},
        published={"question": "is the bf16 inv_freq a potential precision issue?"},
        published_source="issue (rchardx, 2024-03-21), open, no answer: after model.to(bfloat16) inv_freq is bf16; "
                         "keeping float32 for the sin/cos computation seems wiser",
        measure=_measure_megatron744,
        checks=(),
        explanation="Yes, measurably. A bf16 inv_freq is off by up to 2**-8 relative (0.0037 here), a coherent "
                    "drift m * dtheta: even with float32 positions and product (only the buffer cast) the angle "
                    "reaches pi (random phases) within 4096; with the positions built in bf16 as well, only 768 "
                    "of 4096 positions are exact. Float32 keeps it within 2.4e-4 rad (with the bf16 cache).",
        fix="keep inv_freq out of the model cast (recompute it in float32, or a non-buffer attribute) and build "
            "positions and angles in float32",
        not_recomputable="a question, no figure",
        headline=("inv_freq_max_relative_error", "inv_freq_cast_max_angle_error_4096", "lowp_max_angle_error_4096"),
    ),
    Incident(
        name="deeperspeed-61",
        reference="EleutherAI/DeeperSpeed#61",
        year=2024,
        stack="DeeperSpeed (GPT-NeoX training)",
        what="a flag to keep marked parameters out of DeepSpeed's 16-bit cast, proposed also for rotary inv_freq",
        code_path="the engine skips the half/bf16 cast of a parameter marked _deepspeed_no_cast; the PR's author "
                  "notes it should let inv_freq stay float32 (trained with it: a Mamba's A_log and D kept fp32)",
        recipe=stages_of(preset("lowp-inv-freq", "fp16")),
        settings={"head_dim": 96, "rotary_dim": 24, "base": 10000.0, "lengths": [2048],
                  "model": "GPT-NeoX-20B (rotary_pct 0.25), fp16 as trained"},
        published={"claim": "this should also allow keeping rotary inv_freq in fp32"},
        published_source="PR description (haileyschoelkopf, 2024-03-07): parameters marked _deepspeed_no_cast stay "
                         "fp32; this should also allow keeping inv_freq in rotary embeddings in fp32",
        measure=_measure_deeperspeed,
        checks=(),
        explanation="What an fp16 inv_freq costs GPT-NeoX-20B at its 2048 context: the 12 rotary frequencies are "
                    "off by up to 4.0e-4 relative, and the angle drifts by up to 0.097 rad within 2048 with "
                    "float32 positions and product; with the product in fp16 too (positions stay exact to 2048) "
                    "it is 0.34 rad; float32 stays within 6e-5 rad. The flag is read on parameters; inv_freq "
                    "is a buffer in GPT-NeoX's "
                    "RotaryEmbedding, so whether the flag reaches it depends on how the model registers it: the "
                    "thread has no measurement.",
        fix="keep inv_freq float32 (the flag where it applies, or recompute it in float32 in forward)",
        not_recomputable="qualitative ('should also allow', no figure)",
        headline=("inv_freq_max_relative_error", "inv_freq_cast_max_angle_error_2048", "lowp_max_angle_error_2048"),
    ),
    Incident(
        name="vllm-fork-503",
        reference="HabanaAI/vllm-fork#503",
        year=2024,
        stack="vLLM on Gaudi (HabanaAI vllm-fork)",
        what="ALiBi biases restored for decode; an option for float32 biases against accuracy loss on long inputs",
        code_path="ALiBi prompt and decode biases built once and shared across layers, in the model dtype (bf16) by "
                  "default; VLLM_ALIBI_USE_FLOAT32_BIASES keeps them float32 (with vllm-hpu-extension#34). MPT, "
                  "Falcon, Bloom, Baichuan, Jais",
        recipe={"bias": "bfloat16 (default) or float32 (VLLM_ALIBI_USE_FLOAT32_BIASES)"},
        settings={"heads": _MPT_HEADS, "slopes": "2**(-8k/32) (MPT-7B)", "lengths": list(_ALIBI_LENGTHS)},
        published={"claim": "float32 biases resolve an accuracy issue on long sequences"},
        published_source="PR description (tannervoas742, 2024-11-15): the env var VLLM_ALIBI_USE_FLOAT32_BIASES "
                         "resolves the accuracy issue on long sequences; merged, later reverted (#907) and re-landed "
                         "as #1055",
        measure=alibi_bias_figures,
        checks=(claim("claim", lambda m: m["bf16_max_bias_error_2048"] > 1 and m["fp32_max_bias_error_8192"] < 1e-3,
                      "bf16 bias error {bf16_max_bias_error_2048} at 2048, float32 {fp32_max_bias_error_8192} "
                      "at 8192"),),
        explanation="A bias slope * distance stored in bf16 keeps 8 significant bits: for MPT-7B's steepest head "
                    "(slope 0.84) the bias at 2047 keys is about 1722, where the bf16 spacing is 8, so it is off by "
                    "up to 4 logits, and neighbouring keys share one value (624 distinct biases for 2048 keys, "
                    "880 for 8192; off by up to 16 logits there). Unlike a constant, that error does not cancel "
                    "in softmax. Float32 biases are within 2.5e-4 at 8192. The model outputs in the thread are "
                    "not recomputable here.",
        fix="keep ALiBi biases in float32 (VLLM_ALIBI_USE_FLOAT32_BIASES), or add slope * distance in float32 "
            "inside the attention kernel",
        not_recomputable="the thread's evidence is generated text and test runs on Gaudi",
        headline=("bf16_max_bias_error_2048", "bf16_distinct_biases_steepest_head_2048", "fp32_max_bias_error_8192"),
    ),
)
