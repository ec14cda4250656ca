"""Catalog entries reported in 2026, second module (issue 40): openvino#35674, vllm#54620, FunASR#3597,
transformers#47674, foundry#236, pegainfer#220, imp#1316.

>>> [i.name for i in INCIDENTS][:3]
['openvino-35674', 'vllm-54620', 'funasr-3597']
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..formats import get_format, round_to, spacing
from ..positions import predict_positions
from ..rope import RopeSchedule, exact_angles, parse_stages, run_recipe, wrap
from .core import Figures, Incident, claim, close, rounded, stages_of

__all__ = ["INCIDENTS"]


def _r(x: Any, fmt: str) -> np.ndarray:
    """Round float64 values to ``fmt`` (correctly rounded: one operation's result as the hardware stores it)."""
    return np.asarray(round_to(np.asarray(x, dtype=np.float64), fmt), dtype=np.float64)


# ---- openvino-35674

_OV_INV_F16 = parse_stages("inv_freq=fp16", "fp16", name="inv_freq=f16")  # positions, product, sin/cos in f32
_OV_MODELS = (("qwen25_vl", 1000000.0), ("qwen3_vl", 5000000.0))


def _measure_ov35674() -> Figures:
    out: Figures = {}
    m = np.arange(32768, dtype=np.float64)
    for tag, base in _OV_MODELS:
        s = RopeSchedule(head_dim=128, base=base)
        st = run_recipe(_OV_INV_F16, s, m)
        err = np.abs(wrap(st["angle"] - exact_angles(m, s.inv_freq()))).max(axis=1)
        top = np.maximum.accumulate(err)
        for L in (101, 1024, 4096, 32768):
            out[f"{tag}_max_angle_error_{L}"] = rounded(float(top[L - 1]), 4)
        for t in (0.01, 0.1, 1.0):
            out[f"{tag}_first_position_error_over_{t:g}_rad".replace(".", "_")] = int(np.argmax(err > t))
        inv = s.inv_freq()
        out[f"{tag}_frequencies_subnormal_in_f16"] = int(np.count_nonzero(inv < math.ldexp(1.0, -14)))
    out["sin_cos_lipschitz_constant"] = 1.0
    return out


# ---- vllm-54620 / funasr-3597

_FUNASR_DEPTH = 560  # SenseVoice encoder input: 80 mel bins x 7 stacked (LFR) frames
_FUNASR_T = 2000


def funasr_encoding_errors(T: int, depth: int = _FUNASR_DEPTH, fmt: str = "float16") -> np.ndarray:
    """Max |encoding - exact| per position 1..T of FunASR's SinusoidalPositionEncoder.encode run in ``fmt``.

    Every op rounds its result to ``fmt`` as the source computes it: log(10000) on an fp16 tensor, / (depth/2 - 1),
    arange * -increment, exp, positions * inv_timescales, sin and cos (each correctly rounded).
    """
    pos = np.arange(1, T + 1, dtype=np.float64)
    inc = _r(_r(math.log(float(_r(10000.0, fmt))), fmt) / (depth / 2 - 1), fmt)
    inv = _r(np.exp(_r(np.arange(depth // 2) * -inc, fmt)), fmt)
    angle = _r(pos[:, None] * inv[None, :], fmt)
    enc = np.concatenate([_r(np.sin(angle), fmt), _r(np.cos(angle), fmt)], axis=1)
    exact = pos[:, None] * np.exp(-np.arange(depth // 2) * math.log(10000.0) / (depth / 2 - 1))[None, :]
    ref = np.concatenate([np.sin(exact), np.cos(exact)], axis=1)
    return np.abs(enc - ref).max(axis=1)


def _fix_errors(T: int, depth: int = _FUNASR_DEPTH) -> np.ndarray:
    """The fix: the same encoding in float32, cast to fp16 once at the end."""
    pos = np.arange(1, T + 1, dtype=np.float64)
    exact = pos[:, None] * np.exp(-np.arange(depth // 2) * math.log(10000.0) / (depth / 2 - 1))[None, :]
    ref = np.concatenate([np.sin(exact), np.cos(exact)], axis=1)
    enc = _r(ref, "float16")  # float32 evaluation errors (~1e-7 rad at these angles) are far below fp16's 2**-12
    return np.abs(enc - ref).max(axis=1)


def _measure_funasr() -> Figures:
    err = np.maximum.accumulate(funasr_encoding_errors(_FUNASR_T))
    fix = _fix_errors(_FUNASR_T)
    out: Figures = {
        "fp16_log_10000": float(_r(math.log(10000.0), "float16")),
        "fp16_log_timescale_increment": float(_r(_r(math.log(10000.0), "float16") / (_FUNASR_DEPTH / 2 - 1),
                                                 "float16")),
        "first_T_max_abs_error_over_0_42": int(np.argmax(err >= 0.42)) + 1,
        "fix_max_abs_error": rounded(float(fix.max()), 4),
        "fp16_half_spacing_below_1": math.ldexp(1.0, -12),
    }
    for T in (100, 200, 500, 1000, 2000):
        out[f"max_abs_error_T{T}"] = rounded(float(err[T - 1]), 4)
    out["max_abs_error"] = out["max_abs_error_T1000"]
    return out


# ---- transformers-47674

_GDINO_D = 256  # d_model; max_text_len 256


def gdino_text_embedding(L: int, d: int = _GDINO_D) -> np.ndarray:
    """encode_sinusoidal_position_embedding on int64 ids 0..L-1: float32 sin/cos (interleaved), then .to(int64).

    Angles 2*pi*p / 10000 ** (2 * (i // 2) / d); float32 values modelled as the correctly rounded float64 ones.
    """
    p = np.arange(L, dtype=np.float64)
    dim_t = 10000.0 ** (2 * (np.arange(d) // 2) / d)
    a = p[:, None] * 2 * math.pi / dim_t[None, :]
    v = np.where(np.arange(d) % 2 == 0, np.sin(a), np.cos(a))
    return np.trunc(_r(v, "float32"))


def _measure_gdino() -> Figures:
    out: Figures = {}
    for L in (8, 256):
        e = gdino_text_embedding(L)
        out[f"zero_share_{L}"] = rounded(float(np.mean(e == 0)), 4)
        out[f"distinct_rows_{L}"] = int(np.unique(e, axis=0).shape[0])
    out["values"] = sorted({float(x) for x in np.unique(gdino_text_embedding(256))})
    out["bf16_ids_exact_to"] = get_format("bf16").max_exact_integer
    return out


# ---- foundry-236


def _measure_foundry() -> Figures:
    p = predict_positions(4096, "bfloat16")
    q = predict_positions(2048, "bfloat16")
    return {
        "bf16_exact_integers_to": get_format("bf16").max_exact_integer,
        "first_aliasing_index": p.first_inexact,
        "distinct_indices_2048": q.distinct_values,
        "distinct_indices_4096": p.distinct_values,
        "bf16_spacing_2048_4096": float(spacing([2048.0], "bf16")[0]),
        "fp32_exact_integers_to": get_format("fp32").max_exact_integer,
    }


# ---- pegainfer-220

_PEGA_CACHE, _PEGA_CTX, _PEGA_HEAD = 4096, 40960, 128


def _measure_pegainfer() -> Figures:
    nbytes = _PEGA_CTX * _PEGA_HEAD * 2
    return {
        "cache_positions": _PEGA_CACHE,
        "advertised_context": _PEGA_CTX,
        "uncovered_positions": _PEGA_CTX - _PEGA_CACHE,
        "uncovered_share": rounded((_PEGA_CTX - _PEGA_CACHE) / _PEGA_CTX, 4),
        "full_cache_bytes": nbytes,
        "full_cache_mb": rounded(nbytes / 1e6, 4),
        "full_cache_mib": rounded(nbytes / 2**20, 4),
    }


# ---- imp-1316

_IMP_POSITIONS = (40, 500, 1000, 2000, 8000, 16000, 32768, 131071)
_IMP_PUBLISHED = (3.0e-6, 5.7e-5, 9.3e-5, 2.3e-4, 8.5e-4, 1.6e-3, 8.9e-4, 1.0e-2)


def _measure_imp() -> Figures:
    """What a float32 reduction by 1/(2 pi) alone would cost: the angle as float32, times fl32(1/(2 pi)), rounded.

    The fast intrinsics' own approximation (hardware) is not modelled; this is the part any float32 reduction
    of the kernel's float32 angle must lose, at head_dim 8, theta 10000.
    """
    th = _r(10000.0 ** (-np.arange(0, 8, 2) / 8), "float32")
    c = float(_r(1 / (2 * math.pi), "float32"))
    out: Figures = {}
    for pos in _IMP_POSITIONS:
        ang = _r(pos * th, "float32")
        turns = _r(ang * c, "float32")
        red = 2 * math.pi * (turns - np.rint(turns))
        exact = ang - 2 * math.pi * np.rint(ang / (2 * math.pi))
        d = np.abs(red - exact)
        out[f"reduction_error_{pos}"] = rounded(float(np.minimum(d, 2 * math.pi - d).max()), 3)
    out["angle_of_pair_0_is_position"] = bool(th[0] == 1.0)
    return out


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="openvino-35674",
        reference="openvinotoolkit/openvino#35674",
        year=2026,
        stack="OpenVINO (f16-compressed IR)",
        what="the RoPE inv_freq constant compressed to f16 when a model is exported in FP16",
        code_path="IR exported with FP16 weight compression: the inv_freq Constant stored as f16 (decompressed for the "
                  "MatMul), positions and the product in f32, Sin/Cos in f32. The PR (closed, not merged) proposed a "
                  "transformation restoring the constant to f32",
        recipe=stages_of(_OV_INV_F16),
        settings={"head_dim": 128, "bases": {t: b for t, b in _OV_MODELS}, "lengths": [101, 1024, 4096, 32768],
                  "models": "Qwen2.5-VL (base 1e6), Qwen3-VL (base 5e6)"},
        published={"claim": "significant phase errors for large position ids (e.g. above 100)",
                   "amplification": "sin/cos make the error very large"},
        published_source="PR description and the new header's comment (PiotrKrzem, 2026-05-05): inv_freq loses "
                         "accuracy in f16, the product with the position id is off, the error becomes very large "
                         "through sin/cos, phase errors for position ids above about 100",
        measure=_measure_ov35674,
        checks=(claim("claim", lambda m: m["qwen25_vl_max_angle_error_101"] >= 0.1,
                      "the largest phase error up to position 100 is {qwen25_vl_max_angle_error_101} rad (Qwen2.5-VL; "
                      "{qwen3_vl_max_angle_error_101} rad Qwen3-VL); it passes 0.1 rad at position "
                      "{qwen25_vl_first_position_error_over_0_1_rad} and 1 rad at "
                      "{qwen25_vl_first_position_error_over_1_rad}"),
                claim("amplification", lambda m: m["sin_cos_lipschitz_constant"] > 1,
                      "sin and cos are 1-Lipschitz: a phase error e moves cos/sin by at most e")),
        explanation="An f16 inverse frequency carries a relative error up to 2**-11 (more for the 19 slowest pairs, "
                    "which are f16 subnormals at base 1e6), and the f32 product multiplies the absolute error by the "
                    "position: a coherent drift m * dtheta that grows linearly. At position 100 it is 0.018 rad, "
                    "0.18 rad by 1K, 0.73 rad by 4K and random phases (pi) by 32K (Qwen2.5-VL; Qwen3-VL alike). So "
                    "the bug is real for long contexts, but 'above 100' overstates it by an order of magnitude, "
                    "and sin/cos do not enlarge it: |cos(a + e) - cos(a)| <= |e|.",
        fix="keep the inv_freq constant in f32 (exclude it from FP16 compression) or compute it in the graph in f32; "
            "the PR points to openvino#35341 as the general fix",
        headline=("qwen25_vl_max_angle_error_101", "qwen25_vl_max_angle_error_4096",
                  "qwen25_vl_first_position_error_over_1_rad"),
    ),
    Incident(
        name="vllm-54620",
        reference="vllm-project/vllm#54620",
        year=2026,
        stack="vLLM (FunASR audio encoder)",
        what="FunASR's sinusoidal position encoding computed in the runtime dtype (fp16) end to end",
        code_path="SinusoidalPositionEncoder.encode in vllm/model_executor/models/funasr.py (as in FunASR): positions, "
                  "log(10000), the increment / (depth/2 - 1), exp(arange * -increment), positions * inv_timescales "
                  "and sin/cos all in x.dtype; depth = 560 (80 mel x 7 LFR frames), positions 1..T. Fix: all in "
                  "float32, cast once at the end",
        recipe={"positions": "float16", "frequencies": "float16 (log, divide, multiply, exp)", "angles": "float16",
                "trig": "float16", "table": "float16"},
        settings={"depth": _FUNASR_DEPTH, "base": 10000.0, "lengths": [100, 200, 500, 1000, 2000],
                  "note": "the report gives no length; 'positions up to several hundred'"},
        published={"max_abs_error": 0.42, "fix_max_abs_error": 0.0002},
        published_source="PR description (iharshlalakiya, 2026-08-31, fixing vllm#54569): fp16 errors up to ~0.42 "
                         "against fp32 for positions up to several hundred; ~0.0002 after the fix",
        measure=_measure_funasr,
        checks=(claim("max_abs_error", lambda m: m["first_T_max_abs_error_over_0_42"] < 1000,
                      "max abs error {max_abs_error_T500} at T = 500, {max_abs_error_T1000} at T = 1000"),
                close("fix_max_abs_error", 5e-5)),
        explanation="In fp16 log(10000) = 9.2109 (exact 9.2103) and the increment 0.03302 carry relative errors "
                    "near 2**-11 that exp turns into inverse-timescale errors of a few 1e-4 relative; the product "
                    "with positions in the hundreds (fp16 spacing 0.25 to 0.5 there) adds half a spacing. The "
                    "largest error over the table grows with length: 0.049 at T = 100, 0.27 at 500, and reaches "
                    "0.42 at T = 726 (about 44 s of audio at 60 ms per LFR frame), 0.54 at 1000. The float32 "
                    "encoding cast once to fp16 is within 2**-12 = 0.000244 (the report's ~0.0002).",
        fix="compute the encoding in float32 and cast the result to the model dtype (the PR)",
        headline=("max_abs_error_T500", "first_T_max_abs_error_over_0_42", "fix_max_abs_error"),
    ),
    Incident(
        name="funasr-3597",
        reference="modelscope/FunASR#3597",
        year=2026,
        stack="FunASR (Fun-ASR-Nano with a vLLM decoder)",
        what="garbage fp16 transcripts attributed to the Qwen3 decoder, not the audio encoder",
        code_path="Fun-ASR-Nano: audio encoder (sinusoidal positions, as in vllm-54620) and a Qwen3 decoder served by "
                  "vLLM; the PR keeps the encoder in fp16 and runs the decoder in bf16",
        recipe={"encoder": "float16", "decoder": "bfloat16 (the fix)"},
        settings={"depth": _FUNASR_DEPTH, "lengths": [100, 500, 1000]},
        published={"isolation": "audio fp16 + decoder bf16 transcribes correctly; audio bf16 + decoder fp16 does not"},
        published_source="PR description (LauraGPT, 2026-08-31): split tests on an H100 isolate the failure to the "
                         "Qwen3 decoder; the maintainer's comment on vllm#54569 asks for a bf16 control before "
                         "blaming vLLM",
        measure=_measure_funasr,
        checks=(),
        explanation="The two reports disagree on the cause. What the tool can say: the encoder's fp16 sinusoid is "
                    "off by up to 0.27 at 500 frames and 0.54 at 1000 (vllm-54620), so it is not harmless; but the "
                    "split test (encoder fp16 works with a bf16 decoder) says that error alone did not break this "
                    "sample, and a decoder in fp16 can fail for reasons outside position encoding (activation "
                    "overflow). Both fixes are cheap and independent; neither report's transcript is recomputable.",
        fix="both: the encoder's sinusoid in float32 (vllm-54620) and the decoder in bf16 (this PR)",
        not_recomputable="the isolation is a transcription result on the model; the tool measures only the "
                         "encoder's position table",
        headline=("max_abs_error_T500", "max_abs_error_T1000"),
    ),
    Incident(
        name="transformers-47674",
        reference="huggingface/transformers#47674",
        year=2026,
        stack="transformers",
        what="Grounding DINO's text position embeddings cast back to int64 (the ids' dtype), truncating sin/cos",
        code_path="GroundingDinoEncoderLayer.get_text_position_embeddings: encode_sinusoidal_position_embedding("
                  "text_position_ids[..., None]) with int64 ids; the function ends with .to(pos_tensor.dtype), so "
                  "every float32 sin/cos value is truncated toward zero",
        recipe={"angles": "float32", "trig": "float32", "table": "int64 (truncation toward zero)"},
        settings={"d_model": _GDINO_D, "lengths": [8, 256], "note": "the report's repro: ids 0..7"},
        published={"zero_share_8": 0.934, "values": [-1.0, 0.0, 1.0]},
        published_source="issue (Yigtwxx, 2026-07-31): the embedding collapses to {-1, 0, 1}; 93.4 % of it is zero "
                         "at d_model 256",
        measure=_measure_gdino,
        checks=(close("zero_share_8", 5e-4),
                claim("values", lambda m: set(m["values"]) <= {-1.0, 0.0, 1.0},
                      "values {values}")),
        explanation="Truncation keeps only values that are exactly +-1 in float32: cos at position 0 (128 of 256 "
                    "components), and cos of the fastest pair, whose angle is 2 pi p, for every p (float32 cos of "
                    "fl(2 pi p) rounds to 1). For ids 0..7 that is 136 of 2048 values, 1912 zeros (93.36 %); at the "
                    "model's 256 text tokens 99.3 % are zero and the 256 positions share only 10 distinct "
                    "embeddings (ids 0..7: 3), so the text encoder gets almost no position signal.",
        fix="cast the ids to the text features' dtype before encoding (transformers#47675); ids up to 256 are exact "
            "even in bf16",
        headline=("zero_share_8", "zero_share_256", "distinct_rows_256"),
    ),
    Incident(
        name="foundry-236",
        reference="RosettaCommons/foundry#236",
        year=2026,
        stack="foundry (RFdiffusion3, bf16 AMP)",
        what="a sparse-attention index tensor inherits bf16 from the distance matrix under AMP",
        code_path="get_sparse_attention_indices: the index sentinel tensor takes D_LL's dtype (bf16 under AMP), "
                  "so atom indices are stored in bf16 and collide in the sort-based mask; distances in bf16 tie. "
                  "Fix: the index tensor in float32",
        recipe={"positions": "bfloat16 (indices)", "distances": "bfloat16"},
        settings={"lengths": [2048, 4096]},
        published={"bf16_exact_integers_to": 256, "first_aliasing_index": 2048, "bf16_spacing_2048_4096": 16.0},
        published_source="PR description (jonfunk21, 2026-03-09): bf16 represents integers exactly only to ~256, "
                         "so indices >= 2048 alias (L > 2048); step ~16 in the 2048-4096 range",
        measure=_measure_foundry,
        checks=(close("bf16_exact_integers_to", 0), close("bf16_spacing_2048_4096", 0.0),
                close("first_aliasing_index", 0)),
        explanation="bf16 keeps 8 significant bits: every integer to 256 is exact, 257 rounds to 256, so indices "
                    "alias from 257, not from 2048 (the report's own first sentence gives 256). An input of 2048 "
                    "atoms keeps only 641 distinct indices, 4096 only 769; the spacing in [2048, 4096) is 16, as "
                    "stated. Any input over 256 atoms can hit the duplicate-index assertion.",
        fix="keep the index tensor in float32 (exact to 2**24) or an integer dtype, whatever D_LL's dtype (the PR)",
        headline=("first_aliasing_index", "distinct_indices_2048", "bf16_spacing_2048_4096"),
    ),
    Incident(
        name="pegainfer-220",
        reference="pegainfer-project/pegainfer#220",
        year=2026,
        stack="pegainfer (Rust + CUDA)",
        what="Qwen3-4B cos/sin cache built for 4096 positions while 40960-token contexts are admitted",
        code_path="weights.rs precomputes the RoPE cos/sin cache for a hard-coded 4096 positions; the kernels index "
                  "cos_cache[pos * head_dim + d] without a bounds check; admission limits requests by KV blocks "
                  "only and the frontend advertises max_position_embeddings = 40960",
        recipe={"cache": "bfloat16, 4096 positions"},
        settings={"head_dim": _PEGA_HEAD, "cache_positions": _PEGA_CACHE, "max_position_embeddings": _PEGA_CTX},
        published={"full_cache_mb": 10.5, "cache_positions": _PEGA_CACHE, "advertised_context": _PEGA_CTX},
        published_source="issue (xiaguan, 2026-06-04): a cache for all 40960 positions is 40960 x 128 x bf16, "
                         "about 10.5 MB per cache",
        measure=_measure_pegainfer,
        checks=(close("full_cache_mb", 0.05),),
        explanation="Not a rounding bug but the same failure seen from the table's side: positions 4096..40959 "
                    "(90 % of the advertised context) read past the table, so their rotations are whatever memory "
                    "follows it. 40960 x 128 x 2 bytes = 10,485,760 bytes = 10.49 MB (10.0 MiB) per table.",
        fix="build the cache for max_position_embeddings and reject requests whose prompt + max_tokens exceed it",
        headline=("uncovered_positions", "uncovered_share", "full_cache_mb"),
    ),
    Incident(
        name="imp-1316",
        reference="kekzl/imp#1316",
        year=2026,
        stack="imp (CUDA)",
        what="the RoPE kernel's fast __cosf/__sinf drift at long positions; every test used positions <= 40",
        code_path="src/compute/rope.cu: angle = float(pos) * freq; __cosf(angle), __sinf(angle) (fast intrinsics); "
                  "the CPU reference computes the same float angle and an accurate cos/sin, so the test isolates "
                  "the transcendental. head_dim 8, theta 10000",
        recipe={"angle": "float32", "trig": "float32 fast intrinsics (__cosf/__sinf)"},
        settings={"head_dim": 8, "base": 10000.0, "positions": list(_IMP_POSITIONS)},
        published={f"max_gpu_cpu_{p}": v for p, v in zip(_IMP_POSITIONS, _IMP_PUBLISHED)},
        published_source="issue (kekzl, 2026-08-08): max |gpu - cpu| on Q per position, from 3.0e-6 at 40 to "
                         "1.0e-2 at 131071; above the 1e-4 tolerance from about position 2000",
        measure=_measure_imp,
        checks=(),
        explanation="The error is the hardware intrinsic's, so only a GPU can recompute it. What the tool can say: "
                    "the angle of pair 0 is the position itself (theta^0 = 1), and a float32 reduction by 1/(2 pi) "
                    "alone loses up to 6.7e-5 rad at 2000 and 1.3e-3 rad at 32768 but only 6.9e-4 at 131071, "
                    "where the report measures 1.0e-2: the growth to 1e-2 is the intrinsic's own approximation "
                    "outside [-pi, pi] (its error grows with |x|), and the q values that scale it are not given.",
        fix="use cosf/sinf (or sincosf) with full range reduction, or reduce the angle in float64 / from a "
            "precomputed table, and test positions up to the trained context",
        not_recomputable="the figures are the GPU fast intrinsics' output on an unstated q; no GPU referee here",
        headline=("reduction_error_2000", "reduction_error_131071"),
    ),
)
