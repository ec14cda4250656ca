"""Catalog entries reported in 2023: Baichuan's article, gpt-neox#1003, transformers#25681, Megatron-LM#535.

>>> [i.name for i in INCIDENTS]
['baichuan', 'gpt-neox-1003', 'transformers-25681', 'megatron-lm-535']
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format, round_to, spacing
from ..positions import predict_positions
from ..rope import RopeSchedule, audit, exact_angles, preset, run_recipe
from .core import Figures, Incident, claim, close, rounded, stages_of

__all__ = ["INCIDENTS"]


# ---- baichuan


def _measure_baichuan() -> Figures:
    b = predict_positions(8192, "bfloat16")
    return {
        "bf16_exact_share_8192": b.exact_fraction,
        "bf16_exact_positions_8192": b.exact_count,
        "bf16_distinct_8192": b.distinct_values,
        "bf16_max_run_8192": b.max_run,
        "fp32_exact_share_8192": predict_positions(8192, "float32").exact_fraction,
    }


# ---- gpt-neox-1003

_NEOX = RopeSchedule(head_dim=32, base=10000.0)
_NEOX_FP16 = preset("lowp", "fp16")
_NEOX_FP32 = preset("fp32", "fp32")


def _measure_neox() -> Figures:
    theta, m = _NEOX.inv_freq(), np.arange(2048)
    lo, hi = run_recipe(_NEOX_FP16, _NEOX, m), run_recipe(_NEOX_FP32, _NEOX, m)
    bf = run_recipe(preset("lowp", "bf16"), _NEOX, m)
    diff = np.abs(lo["cos"] - hi["cos"])
    pos, col = np.unravel_index(int(diff.argmax()), diff.shape)
    exact = np.cos(exact_angles(m, theta))
    return {
        "angle_fp16_1857_1": float(lo["angle"][1857, 1]),
        "angle_fp32_1857_1": float(hi["angle"][1857, 1]),
        "angle_exact_1857_1": 1857 * float(theta[1]),
        "max_abs_cos_diff": rounded(float(diff.max())),
        "max_abs_cos_diff_at": [int(pos), int(col)],
        "max_abs_cos_error_vs_exact": rounded(float(np.abs(lo["cos"] - exact).max())),
        "bf16_max_abs_cos_diff": rounded(float(np.abs(bf["cos"] - hi["cos"]).max())),
    }


# ---- transformers-25681

_LLAMA = RopeSchedule(head_dim=128, base=10000.0)


def _measure_25681() -> Figures:
    rows = {r.recipe + "/" + r.dtype: r for r in audit(
        _LLAMA, [preset("lowp", "bf16"), preset("lowp", "fp16"), preset("fp32", "bf16")], 2048)}
    b, h, f = rows["lowp/bfloat16"], rows["lowp/float16"], rows["fp32/bfloat16"]
    return {
        "bf16_max_rotation_error": rounded(b.max_rotation_error),
        "bf16_mean_rotation_error": rounded(b.mean_rotation_error),
        "bf16_colliding_positions": b.colliding_positions,
        "fp16_max_rotation_error": rounded(h.max_rotation_error),
        "fp16_mean_rotation_error": rounded(h.mean_rotation_error),
        "fix_fp32_max_rotation_error": rounded(f.max_rotation_error),
        "bf16_cache_bound": rounded(f.cache_bound),
    }


# ---- megatron-lm-535

_MEGATRON = RopeSchedule(head_dim=128, base=10000.0)
_MEGATRON_L = 32768


def _measure_megatron() -> Figures:
    p = predict_positions(_MEGATRON_L, "float16")
    tail = round_to(np.arange(_MEGATRON_L // 2, _MEGATRON_L, dtype=np.float64), "float16")
    last = float(round_to([_MEGATRON_L - 1], "float16")[0])
    rows = {r.recipe: r for r in audit(_MEGATRON, [preset("lowp", "fp16"), preset("fp32", "fp16")], _MEGATRON_L)}
    return {
        "fp16_max_finite": get_format("float16").max_finite,
        "largest_position": _MEGATRON_L - 1,
        "largest_position_in_fp16": last,
        "fp16_spacing_8192_16384": float(spacing([8192.0], "float16")[0]),
        "fp16_spacing_16384_32768": float(spacing([16384.0], "float16")[0]),
        "first_inexact_position": p.first_inexact,
        "fp16_exact_positions_32768": p.exact_count,
        "fp16_distinct_positions_32768": p.distinct_values,
        "fp16_max_run_32768": p.max_run,
        "fp16_max_position_error_32768": p.max_abs_error,
        "tail_distinct_values_16384_32768": int(np.unique(tail).size),
        "lowp_max_angle_error_32768": rounded(rows["lowp"].max_angle_error, 4),
        "lowp_colliding_positions_32768": rows["lowp"].colliding_positions,
        "fix_fp32_max_rotation_error_32768": rounded(rows["fp32"].max_rotation_error, 4),
    }


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="baichuan",
        reference="baichuan-inc (WeChat article, 2023)",
        year=2023,
        stack="transformers (LLaMA-style rotary code)",
        fix="build position ids in float32 (torch.arange(L, dtype=torch.float32)); keep inv_freq float32 through "
            "model.to(bf16)",
        what="bf16 position ids keep ~10 % of positions at 8K",
        code_path="position ids 0..L-1 built in bfloat16 (torch.arange(L, dtype=bf16), or arange(..., "
                  "dtype=inv_freq.dtype) after model.to(bf16))",
        recipe={"positions": "bfloat16"},
        settings={"length": 8192},
        published={"bf16_exact_share_8192": 0.10},
        published_source="Baichuan's 2023 article 混合精度下位置编码竟有大坑，LLaMA等主流开源模型纷纷中招 "
                         "(mixed precision breaks position encoding; LLaMA and other mainstream open models "
                         "affected): 长度为8192的上下文推理中,仅有大约10%的token位置编码是精确的 (in 8192-token "
                         "inference only about 10 % of tokens' position encodings are exact)",
        measure=_measure_baichuan,
        checks=(close("bf16_exact_share_8192", 0.01),),
        explanation="bfloat16 keeps 8 significant bits: from 4096 to 8192 only every 32nd integer exists, so "
                    "896 of 8192 positions (10.9 %) survive exactly; float32 keeps them all.",
    ),
    Incident(
        name="gpt-neox-1003",
        reference="EleutherAI/gpt-neox#1003",
        year=2023,
        stack="gpt-neox",
        fix="keep inv_freq and the einsum in float32 (autocast or a float32 buffer), cast cos/sin to fp16 "
            "after",
        what="RotaryEmbedding cos/sin tables built in fp16 (inv_freq.half())",
        code_path="inv_freq.half(); t = arange(seqlen).type_as(inv_freq); freqs = einsum('i,j->ij', t, "
                  "inv_freq) in fp16; emb.cos() in fp16; compared with the same code in fp32",
        recipe=stages_of(_NEOX_FP16),
        settings={"head_dim": 32, "base": 10000.0, "seqlen": 2048, "dtype": "float16"},
        published={"angle_fp16_1857_1": 1045.0, "angle_fp32_1857_1": 1044.2678, "max_abs_cos_diff": 0.7819},
        published_source="issue text (cbcase, 2023-07-27): printed emb[1857, 1] = 1044.2678 (fp32) and 1045. "
                         "(fp16), (cos_half.float() - cos_float).abs().max() = 0.7819",
        measure=_measure_neox,
        checks=(close("angle_fp16_1857_1", 0.0), close("angle_fp32_1857_1", 5e-5),
                close("max_abs_cos_diff", 1e-4)),
        explanation="inv_freq[1] = 10000**(-1/16) = 0.562341 rounds to 0.5625 in fp16; 1857 * 0.5625 = "
                    "1044.5625 rounds to 1045 (fp16 spacing is 1 in [1024, 2048)); the angle is 0.73 rad off, and "
                    "the worst cos difference over the table (position 2008, column 1) is 0.78.",
    ),
    Incident(
        name="transformers-25681",
        reference="huggingface/transformers#25681",
        year=2023,
        stack="transformers",
        fix="build the cos/sin cache in float32 and cast it (transformers moved the angle to float32 in "
            "forward)",
        what="Llama rotary cache wrong after casting the model to fp16/bf16",
        code_path="LlamaRotaryEmbedding._set_cos_sin_cache(dtype=torch.get_default_dtype()): t = arange(seq, "
                  "dtype=dtype); einsum(t, inv_freq.to(dtype)); emb.cos().to(dtype): every stage in the model "
                  "dtype when the model is built or recomputed in bf16/fp16",
        recipe=stages_of(preset("lowp", "bf16")),
        settings={"head_dim": 128, "base": 10000.0, "max_position_embeddings": 2048, "dtype": "bfloat16|float16"},
        published={"claim": "cos/sin cache values are wrong when the model is cast to float16/bfloat16"},
        published_source="issue title and quoted code (KeremTurgutlu); the stored copy shows no figure",
        measure=_measure_25681,
        checks=(claim("claim", lambda m: m["bf16_max_rotation_error"] > 100 * m["fix_fp32_max_rotation_error"]
                      and m["fp16_max_rotation_error"] > 100 * m["fix_fp32_max_rotation_error"],
                      "bf16 max rotation error {bf16_max_rotation_error} rad, fp16 {fp16_max_rotation_error} "
                      "rad, fp32 fix {fix_fp32_max_rotation_error} rad"),),
        explanation="Within the 2048-token table the bf16 path rotates by up to pi off (positions above 256 "
                    "collide: bf16 keeps every 8th integer near 2048); fp16 positions stay exact to 2048 but the "
                    "fp16 inv_freq and product still move the rotation by up to 0.98 rad; building the cache in fp32 "
                    "and casting it leaves only the cache rounding (<= 2.8e-3 rad in bf16).",
        headline=("bf16_max_rotation_error", "fp16_max_rotation_error", "fix_fp32_max_rotation_error"),
    ),
    Incident(
        name="megatron-lm-535",
        reference="NVIDIA/Megatron-LM#535",
        year=2023,
        stack="Megatron-LM",
        what="RoPE positions cast to fp16 by seq.type_as(inv_freq) at max_seq_len 32768",
        code_path="RotaryEmbedding.forward under --fp16: the inv_freq buffer is fp16 (the fp16 model cast reaches it), "
                  "seq = arange(max_seq_len) is cast by seq.type_as(inv_freq), einsum('i,j->ij') in fp16; the "
                  "returned angles feed cos()/sin() in fp16",
        recipe=stages_of(preset("lowp", "fp16")),
        settings={"head_dim": 128, "base": 10000.0, "max_seq_len": _MEGATRON_L, "dtype": "float16"},
        published={"exceeds_fp16_range": "If max_seq_len = 32768, it exceeds fp16 range",
                   "tail_identical": "seq.type_as(self.inv_freq) will cast seq to f16, and lose fraction bits, "
                                     "making all tail token embeddings the same",
                   "positions_lost": "LM models won't be able to tell its position"},
        published_source="issue text (nrailg, 2023-10-10), with the quoted RotaryEmbedding code; no other figure",
        measure=_measure_megatron,
        checks=(claim("exceeds_fp16_range", lambda m: m["largest_position"] > m["fp16_max_finite"],
                      "fp16's largest finite value is {fp16_max_finite:g}; the largest position {largest_position} "
                      "is finite (stored as {largest_position_in_fp16:g}): what breaks is the spacing, "
                      "{fp16_spacing_8192_16384:g} in [8192, 16384) and {fp16_spacing_16384_32768:g} in "
                      "[16384, 32768)"),
                claim("tail_identical", lambda m: m["tail_distinct_values_16384_32768"] == 1,
                      "positions 16384..32767 take {tail_distinct_values_16384_32768} distinct fp16 values: runs "
                      "of up to {fp16_max_run_32768} neighbouring tokens share one, far-apart tokens stay apart"),
                claim("positions_lost", lambda m: m["lowp_max_angle_error_32768"] > 3.0,
                      "max angle error {lowp_max_angle_error_32768} rad by 32768")),
        explanation="32767 is far below fp16's largest finite value 65504 (overflow to inf starts at 65520), so "
                    "nothing exceeds the fp16 range. What is lost are low-order integer bits, not fraction bits: "
                    "fp16 keeps 11 significant bits, so integers are exact to 2048 and the spacing is 2, 4, 8 and "
                    "16 in the binades up to 32768. Of 32768 positions 6144 (18.75 %) stay exact and 6145 distinct "
                    "values remain; in [16384, 32768) groups of 16 (up to 17) neighbours share a value, not the "
                    "whole tail. The fp16 angles are off by up to pi (random phases) for the fast pairs: the model "
                    "cannot tell neighbouring positions apart, which is the issue's point.",
        fix="build seq, inv_freq and the einsum in float32 (keep the inv_freq buffer out of the fp16 cast) and cast "
            "cos/sin to fp16 after",
        headline=("largest_position", "fp16_max_finite", "fp16_spacing_16384_32768",
                  "tail_distinct_values_16384_32768", "fp16_max_run_32768"),
    ),
)
