"""Catalog entries reported in 2026, third module (issue 40): Automodel#2549, sglang#29729, sglang#33117,
UNI-D2#6, aiter#4765.

>>> [i.name for i in INCIDENTS][:3]
['automodel-2549', 'sglang-29729', 'sglang-33117']
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from ..formats import get_format, round_to, spacing
from ..positions import predict_positions
from ..rope import RopeSchedule, audit, preset
from .core import Figures, Incident, claim, close, rounded, stages_of

__all__ = ["INCIDENTS", "bf16_ulp_index"]


def _r(x: Any, fmt: str) -> np.ndarray:
    """Round float64 values to ``fmt`` (correctly rounded: one operation's result as the hardware stores it)."""
    return np.asarray(round_to(np.asarray(x, dtype=np.float64), fmt), dtype=np.float64)


# ---- automodel-2549

# Llama-3.2-1B's config.json: head_dim 64, rope_theta 500000, llama3 scaling (factor 32, low 1, high 4, original 8192)
_LLAMA32 = RopeSchedule(head_dim=64, base=500000.0, scaling="llama3", factor=32.0,
                        original_max_position_embeddings=8192, low_freq_factor=1.0, high_freq_factor=4.0)
_AM_LENGTHS = (1024, 8192, 131072)


def _measure_automodel() -> Figures:
    rows = {(r.recipe, r.length): r for r in audit(_LLAMA32, [preset("lowp-inv-freq", "bf16"), preset("fp32", "bf16")],
                                                    list(_AM_LENGTHS))}
    inv = _LLAMA32.inv_freq()
    back = _r(_r(inv, "bfloat16"), "float32")  # the later .float(): bf16 -> fp32 is exact, nothing comes back
    out: Figures = {"inv_freq_max_relative_error": rounded(float((np.abs(back - inv) / inv).max()), 4),
                    "upcast_recovers_bits": bool(np.array_equal(back, _r(inv, "float32")))}
    for L in _AM_LENGTHS:
        out[f"inv_freq_cast_max_angle_error_{L}"] = rounded(rows["lowp-inv-freq", L].max_angle_error, 4)
        out[f"fp32_max_angle_error_{L}"] = rounded(rows["fp32", L].max_angle_error, 4)
    return out


# ---- sglang-29729 / sglang-33117: the fp32 cos/sin cache downcast in place to the query dtype

_QWEN25VL = RopeSchedule(head_dim=128, base=1000000.0)  # Qwen2.5-VL text: head_dim 128, rope_theta 1e6
_SG_LENGTHS = (4096, 32768, 131072)


def _measure_sglang_cache() -> Figures:
    recipes = [preset("fp32", "float32"), preset("fp32", "bf16"), preset("fp32", "fp16")]
    rows = {(r.dtype, r.length): r for r in audit(_QWEN25VL, recipes, list(_SG_LENGTHS))}
    out: Figures = {"bf16_half_spacing_below_1": 2.0**-9, "fp16_half_spacing_below_1": 2.0**-12}
    for L in _SG_LENGTHS:
        for fmt, tag in (("float32", "fp32"), ("bfloat16", "bf16"), ("float16", "fp16")):
            out[f"{tag}_cache_max_rotation_error_{L}"] = rounded(rows[fmt, L].max_rotation_error, 4)
    return out


# ---- uni-d2-6


def _measure_unid2() -> Figures:
    out: Figures = {"bf16_exact_positions_to": get_format("bf16").max_exact_integer,
                    "first_inexact_position": predict_positions(512, "bfloat16").first_inexact,
                    "fp16_exact_positions_to": get_format("fp16").max_exact_integer}
    for L in (1024, 4096):
        p = predict_positions(L, "bfloat16")
        out[f"distinct_positions_{L}"] = p.distinct_values
        out[f"max_run_{L}"] = p.max_run
    return out


# ---- aiter-4765

_AITER_TOKENS, _AITER_HEADS, _AITER_HEAD, _AITER_MAX_POS = 4096, 4, 64, 32


def bf16_ulp_index(x: Any) -> np.ndarray:
    """The integer order of bf16 values (+0 is 0, each step one ulp; negatives mirrored): ULP distance = |a - b|."""
    b = np.asarray(x, dtype=ml_dtypes.bfloat16).view(np.uint16).astype(np.int64)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)


def _measure_aiter() -> Figures:
    """NeoX rotation of bf16 q with a bf16 cos/sin table: fp32 math rounded once (the issue's reference) against
    the same with each product rounded to bf16, over 4096 tokens x 4 heads x 64 (positions 0..31 repeating)."""
    d = _AITER_HEAD
    q = _r(np.random.default_rng(0).standard_normal((_AITER_TOKENS, _AITER_HEADS, d)), "bfloat16")
    inv = _r(1.0 / 10000.0 ** (np.arange(0, d, 2) / d), "float32")
    a = _r((np.arange(_AITER_TOKENS) % _AITER_MAX_POS)[:, None] * inv[None, :], "float32")
    c, s = _r(np.cos(a), "bfloat16")[:, None, :], _r(np.sin(a), "bfloat16")[:, None, :]
    x1, x2 = q[..., : d // 2], q[..., d // 2:]
    ref = _r(np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1), "bfloat16")

    def b(v: np.ndarray) -> np.ndarray:
        return _r(v, "bfloat16")

    low = b(np.concatenate([b(x1 * c) - b(x2 * s), b(x2 * c) + b(x1 * s)], axis=-1))
    ulps = np.abs(bf16_ulp_index(low) - bf16_ulp_index(ref))
    i = int(ulps.argmax())
    norm = np.hypot(x1, x2)
    scale = np.asarray(spacing(np.concatenate([norm, norm], axis=-1), "bf16"), dtype=np.float64)
    return {
        "bf16_value_14993_ulps_from_zero": float(np.asarray(np.uint16(14993)).view(ml_dtypes.bfloat16)),
        "bf16_math_max_ulp_distance": int(ulps.max()),
        "bf16_math_output_at_max": float(low.flat[i]),
        "reference_at_max": float(ref.flat[i]),
        "bf16_math_max_abs_error": rounded(float(np.abs(low - ref).max()), 4),
        "bf16_math_max_error_in_pair_ulps": rounded(float((np.abs(low - ref) / scale).max()), 4),
        "share_over_1000_ulps": rounded(float(np.mean(ulps > 1000)), 4),
    }


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="automodel-2549",
        reference="NVIDIA-NeMo/Automodel#2549",
        year=2026,
        stack="NeMo Automodel",
        what="a model-wide bf16 cast rounds the RoPE frequency buffer (inv_freq / freqs_cis); .float() later cannot "
             "restore it",
        code_path="self.to(config.torch_dtype) / cast_model_to_dtype rounds every floating buffer, inv_freq included; "
                  "the rotary tables are then built in float32 from the bf16-rounded frequencies. Fix: llama (and "
                  "Qwen2) recompute inv_freq in fp32 from the config in _build_cache; 6 more families keep "
                  "rotary_emb in fp32 via _keep_in_fp32_modules (cherry-picked to r0.5.0 as #2606)",
        recipe=stages_of(preset("lowp-inv-freq", "bf16")),
        settings={"model": "Llama-3.2-1B", "head_dim": 64, "base": 500000.0, "scaling": "llama3 (factor 32)",
                  "lengths": list(_AM_LENGTHS)},
        published={"claim": "cos/sin tables built from a bf16-rounded frequency; a later .float() can't recover it",
                   "max_kl": 1.1e-2, "kl_gate": 5e-3, "more_families": 6},
        published_source="PR description (akoumpa, 2026-06-13): checkpoint_robustness on a Llama-3.2-1B SFT, "
                         "Automodel->Automodel max KL 0, Automodel->vanilla HF max KL 1.1e-2 > 5e-3; a scan found "
                         "the same pattern in 6 more model families",
        measure=_measure_automodel,
        checks=(claim("claim", lambda m: not m["upcast_recovers_bits"]
                      and m["inv_freq_cast_max_angle_error_8192"] > 100 * m["fp32_max_angle_error_8192"],
                      "upcast recovers bits: {upcast_recovers_bits}; angle error at 8192 {inv_freq_cast_max_angle_"
                      "error_8192} rad (bf16 inv_freq) vs {fp32_max_angle_error_8192} (fp32)"),),
        explanation="bf16 -> fp32 is exact, so .float() returns the rounded frequency: up to 2**-8 relative error "
                    "(0.0029 here), a coherent drift m * dtheta. With float32 positions and product the angle is "
                    "off by 0.93 rad within 1024 and pi (random phases) by 8192, against 7e-5 rad (1024), 6e-4 "
                    "(8192) and 9e-3 (131072) for fp32 frequencies with the bf16 cache. The KL figures and the "
                    "count of 6 more families "
                    "are the PR's own runs and scan, not recomputable here.",
        fix="recompute inv_freq in float32 from the config when building the tables, or keep the rotary module out "
            "of the cast (_keep_in_fp32_modules); the PR does both, #2606 backports it",
        not_recomputable="the KL values come from whole-model checkpoint runs; the family count from the PR's scan",
        headline=("inv_freq_max_relative_error", "inv_freq_cast_max_angle_error_1024",
                  "inv_freq_cast_max_angle_error_8192"),
    ),
    Incident(
        name="sglang-29729",
        reference="sgl-project/sglang#29729",
        year=2026,
        stack="SGLang (ROCm and other non-CUDA backends)",
        what="the RoPE cos/sin cache downcast to the model dtype off CUDA; an opt-in flag keeps it fp32",
        code_path="rotary_embedding/base.py keeps the cache fp32 only on CUDA and casts it to the model dtype "
                  "elsewhere; SGLANG_ROPE_CACHE_FP32 (default off) keeps it fp32. A review on the PR points out "
                  "that forward_cuda's fallback (always taken on ROCm) and forward_xpu reassign the cache in the "
                  "query dtype, undoing the flag after the first step",
        recipe=stages_of(preset("fp32", "bf16")),
        settings={"head_dim": 128, "base": 1000000.0, "lengths": list(_SG_LENGTHS)},
        published={"claim": "measurable RoPE numerical drift against the reference on non-CUDA backends"},
        published_source="PR description (zx3xyy, 2026-06-30; merged) and the gemini-code-assist review on "
                         "base.py: the in-place downcast in forward_cuda's fallback and forward_xpu",
        measure=_measure_sglang_cache,
        checks=(),
        explanation="The downcast rounds each cos/sin value once: at most 2**-9 = 2.0e-3 in bf16 (2**-12 in "
                    "fp16). Against the fp32 table's own rotation error that is 10x larger at 4K positions "
                    "(2.8e-3 against 2.9e-4), but the fp32 table's error grows with position (float32 frequencies "
                    "and angles near 1e5 on a 2**-7 grid): 2.4e-3 at 32K, 9.5e-3 at 131072, where the bf16 cache "
                    "is 1.2e-2. The drift is real and largest, relatively, at short context; the PR gives no "
                    "figure.",
        fix="keep the cache fp32 and cast a temporary, never self.cos_sin_cache, where a kernel needs the query "
            "dtype (sglang#33117 for M-RoPE)",
        not_recomputable="qualitative ('measurable drift', no figure)",
        headline=("fp32_cache_max_rotation_error_4096", "bf16_cache_max_rotation_error_4096",
                  "fp32_cache_max_rotation_error_131072"),
    ),
    Incident(
        name="sglang-33117",
        reference="sgl-project/sglang#33117",
        year=2026,
        stack="SGLang (M-RoPE: Qwen-VL, GLM-V, Ernie-VL)",
        what="MRotaryEmbedding downcasts its fp32 cos/sin cache in place to the query dtype on the first forward",
        code_path="MRotaryEmbedding inherits the fp32 cache, but forward_cuda / forward_triton call "
                  "_match_cos_sin_cache_dtype(query), which replaces the cache with a bf16/fp16 copy; the Ernie4.5 "
                  "fused-rope wrapper does the same per call. M-RoPE sections only choose which position id (t, "
                  "h, w) indexes each frequency, so the storage rounding is the same as for text RoPE",
        recipe=stages_of(preset("fp32", "bf16")),
        settings={"head_dim": 128, "base": 1000000.0, "lengths": list(_SG_LENGTHS), "model": "Qwen2.5-VL text"},
        published={"claim": "multimodal models lose the fp32 cache that text models keep for numerical stability"},
        published_source="PR description (KCaverly, 2026-07-31; closed unmerged): the base class keeps the cache "
                         "fp32 on CUDA by design; M-RoPE models are the only ones that do not",
        measure=_measure_sglang_cache,
        checks=(claim("claim", lambda m: m["bf16_cache_max_rotation_error_4096"]
                      > 5 * m["fp32_cache_max_rotation_error_4096"],
                      "max rotation error at 4096: bf16 cache {bf16_cache_max_rotation_error_4096}, fp32 cache "
                      "{fp32_cache_max_rotation_error_4096}"),),
        explanation="Confirmed in size: the in-place bf16 copy is off by up to 2**-9 per value, a rotation "
                    "error of 2.8e-3 rad at 4K positions against the fp32 table's 2.9e-4 (10x). It does not grow "
                    "with position, so at the 128K contexts these models accept the fp32 table's own error "
                    "(9.5e-3 rad) dominates (bf16 cache 1.2e-2); float64 angles would be needed to gain there.",
        fix="never reassign self.cos_sin_cache; cast a temporary where a kernel needs the query dtype, or pass the "
            "fp32 cache to kernels that accept it (the PR)",
        headline=("bf16_cache_max_rotation_error_4096", "fp32_cache_max_rotation_error_4096",
                  "fp32_cache_max_rotation_error_131072"),
    ),
    Incident(
        name="uni-d2-6",
        reference="nkalyanv99/UNI-D2#6",
        year=2026,
        stack="UNI-D2 (discrete diffusion LMs, BREVO)",
        what="RoPE positions built with type_as(inv_freq): after a bf16 model cast the positions are bf16",
        code_path="torch.arange(...).type_as(self.inv_freq): inv_freq is a registered buffer, cast with the model; "
                  "cloning it keeps the cast dtype. Fix: inv_freq, positions and their product in float32",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"lengths": [1024, 4096]},
        published={"bf16_exact_positions_to": 256},
        published_source="PR description (Laz4rz, 2026-07-03; merged): above 256 bf16 cannot represent every "
                         "consecutive integer, so positions alias or skip",
        measure=_measure_unid2,
        checks=(close("bf16_exact_positions_to", 0),),
        explanation="bf16 keeps 8 significant bits: 257 rounds to 256, and the run of positions sharing one value "
                    "grows with the spacing (runs of 5 at 1024, 17 at 4096); of 4096 positions only 769 distinct "
                    "values remain. Collisions are local, so order across far-apart tokens survives but order "
                    "within a run does not, which is what a task like BREVO needs. fp16 would be exact to 2048.",
        fix="build inv_freq, positions and the frequency matrix in float32 whatever the buffer's dtype (the PR)",
        headline=("first_inexact_position", "distinct_positions_4096", "max_run_4096"),
    ),
    Incident(
        name="aiter-4765",
        reference="ROCm/aiter#4765",
        year=2026,
        stack="AITER (ROCm Triton RoPE, via vLLM)",
        what="rope_cached_thd_positions_offsets_2c_fwd_inplace differs from a float32 reference by ~15,000 bf16 ULP",
        code_path="Triton cached-RoPE kernel, NeoX style, bf16 q/k [8, 256] (4 heads x 64), cos/sin table for 32 "
                  "positions; reference: q, cos, sin upcast to float32, rotated, rounded once to bf16",
        recipe={"q": "bfloat16", "cache": "bfloat16", "reference": "float32 math, one rounding",
                "model of the kernel": "each product rounded to bf16"},
        settings={"tokens": _AITER_TOKENS, "heads": _AITER_HEADS, "head_size": _AITER_HEAD,
                  "positions": f"0..{_AITER_MAX_POS - 1} repeating", "q": "standard normal, seed 0"},
        published={"max_ulp_distance": 14993, "expected_max_ulp": 2, "cuda_atol": 1e-3},
        published_source="issue (divakar-amd, 2026-08-14): max ULP distance ~14,993 in bf16 against the reference, "
                         "expected 1-2; NVIDIA's CUDA RoPE passes atol 1e-3",
        measure=_measure_aiter,
        checks=(claim("max_ulp_distance", lambda m: m["bf16_math_max_ulp_distance"] >= 10000,
                      "bf16 intermediate products give a max ULP distance of {bf16_math_max_ulp_distance}"),),
        explanation="The figure is a ULP distance near zero, where ULPs measure nothing: the bf16 value 14,993 "
                    "ulps above +0 is 0.0011. One bf16 rounding of each product is enough: where the two rounded "
                    "products cancel exactly the kernel writes 0 against a reference of about 0.0065, 15,317 "
                    "ulps on this draw (0.03 % of outputs beyond 1000 ulps), while every output is within 1 ulp "
                    "of its pair's norm (max absolute error 0.031 for |q| up to ~4). So the report's number is "
                    "what bf16 intermediate arithmetic produces, not evidence of a larger fault; whether the "
                    "kernel rounds in bf16 is not recomputable without it.",
        fix="compute the rotation in float32 (upcast q, cos, sin; round once), and compare with an absolute or "
            "norm-relative tolerance, not ULPs near zero",
        not_recomputable="the kernel's own arithmetic (a GPU Triton kernel) and the issue's inputs are not given",
        headline=("bf16_value_14993_ulps_from_zero", "bf16_math_max_ulp_distance", "bf16_math_max_error_in_pair_ulps"),
    ),
)
