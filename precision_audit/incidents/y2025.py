"""Catalog entries reported in 2025: vllm#27722 (gpt-oss' YaRN ramp), executorch#9393, and the paper "When
Precision Meets Position" (TMLR 2025).

>>> [i.name for i in INCIDENTS]
['vllm-27722', 'executorch-9393', 'when-precision-meets-position']
"""

from __future__ import annotations

import numpy as np

from ..rope.attention import apply_errors, attention_errors
from ..rope import RopeSchedule, audit, preset, wrap
from .core import Figures, Incident, claim, close, rounded, stages_of

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
)
