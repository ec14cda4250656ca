"""Catalog entries about float32 GEMMs that tensor cores run in TF32 (issue 53): transformers#48428 and
batch_invariant_ops#23.

Each is recomputed with the ``tf32`` / ``tf32-rz`` formats and the TF32 GEMM stacks; what a real NVIDIA H200
returned for the same operations (the project's records, ``tests/data/h200/``) stands beside what each report
claims, in the entry's settings and explanation.

>>> [i.name for i in INCIDENTS]
['transformers-48428', 'batch-invariant-ops-23']
"""

from __future__ import annotations

import numpy as np

from ..formats import get_format, round_to
from ..positions import predict_positions
from ..rope import RopeSchedule, audit, stack
from .core import Figures, Incident, claim, close, stages_of

__all__ = ["INCIDENTS"]

# What the H200 (sm_90; torch 2.11 + CUDA 13.0, Triton 3.6) returned, recorded by the project's scripts
# (tf32_modes.json, tf32_record_h200.json): the facts the entries set beside the reports.
H200: dict[str, object] = {
    "cublas_high_rounding": "to nearest, ties to even (2051 -> 2052)",
    "cublas_high_tf32_from_k": {"mm": 2, "bmm": 4},
    "transformers_k1_gemm_high_batch_1_to_16": "exact (131072 of 131072)",
    "positions_131072_cublas_high_k16": {"exact": 8192, "distinct": 8193, "max_err": 32.0},
    "tl_dot_default_rounding": "truncation (2051 -> 2050)",
    "positions_131072_tl_dot_default": {"exact": 8192, "distinct": 8192, "max_err": 63.0},
    "tl_dot_ieee_and_tf32x3": "exact",
    "torch_compile_max_autotune_batch_1": {"exact": 8192, "max_err": 63.0},
}

# ---- transformers-48428: Qwen3's rotary module (head_dim 128, rope_theta 1e6) under "high"

_QWEN3 = RopeSchedule(head_dim=128, base=1000000.0)
_LENGTHS = (2048, 4096, 32768)


def _measure_48428() -> Figures:
    rows = {(r.recipe, r.length): r for r in audit(_QWEN3, [stack("transformers-tf32", "bf16"),
                                                           stack("transformers", "bf16")], list(_LENGTHS),
                                                    distances=[1])}
    out: Figures = {
        "tf32_exact_integers_to": get_format("tf32").max_exact_integer,
        "tf32_value_of_2049": float(round_to(2049, "tf32")),
        "tf32_value_of_2051": float(round_to(2051, "tf32")),
        "tf32_rz_value_of_2051": float(round_to(2051, "tf32-rz")),
        "tf32_exact_positions_32768": predict_positions(32768, "tf32").exact_count,
    }
    for L in _LENGTHS:
        tf, ok = rows["transformers-tf32", L], rows["transformers", L]
        out[f"tf32_gemm_colliding_{L}"] = tf.colliding_positions
        out[f"tf32_gemm_max_pair_error_d1_{L}"] = float(f"{tf.pair_errors[0].max_rotation_error:.4g}")
        out[f"fp32_max_pair_error_d1_{L}"] = float(f"{ok.pair_errors[0].max_rotation_error:.4g}")
    return out


# ---- batch-invariant-ops-23: torch.mm(ones(1, 1), arange(8192)[None]) through a Triton tl.dot


def _measure_bio23() -> Figures:
    pos = np.arange(8192)
    rz, rn = round_to(pos, "tf32-rz"), round_to(pos, "tf32")
    llama = RopeSchedule(head_dim=128, base=500000.0)
    [row] = audit(llama, [stack("transformers-tl-dot", "float32")], [8192], distances=[1])
    return {
        "differing_of_8192": int((rz != pos).sum()),
        "value_of_2049": float(rz[2049]),
        "value_of_4099": float(rz[4099]),
        "differing_of_8192_to_nearest": int((rn != pos).sum()),
        "max_position_error_8192": float(np.abs(rz - pos).max()),
        "llama31_fp32_cos_sin_max_rotation_error_8192": float(f"{row.max_rotation_error:.4g}"),
    }


INCIDENTS: tuple[Incident, ...] = (
    Incident(
        name="transformers-48428",
        reference="huggingface/transformers#48428",
        year=2026,
        stack="transformers (B200, torch.set_float32_matmul_precision('high'))",
        what="the rotary angle GEMM inv_freq @ position_ids runs in TF32 on a tensor-core kernel: positions "
             "above 2048 lose their value",
        code_path="Qwen3RotaryEmbedding.forward (and Llama's, Qwen2's, Mistral's ...): (inv_freq_expanded.float() "
                  "@ position_ids_expanded.float()) inside autocast(enabled=False), which fixes the dtype, not "
                  "the GEMM's arithmetic; under 'high' cuBLAS may pick a TF32 kernel (on a B200 at batch > 1)",
        recipe=stages_of(stack("transformers-tf32", "bf16")),
        settings={"model": "Qwen3 (head_dim 128, rope_theta 1e6)", "lengths": list(_LENGTHS),
                  "stack": "transformers-tf32", "h200": H200},
        published={"tf32_exact_integers_to": 2048, "tf32_value_of_2049": 2048.0,
                   "claim": "RoPE angles corrupted for positions beyond 2048 (reproduced on a B200, sm_100, at "
                            "batch size > 1; not on an A100)"},
        published_source="issue (Conzel, 2026-08-31; transformers 4.51.3, torch 2.7 + CUDA 12.9): TF32 keeps 10 "
                         "mantissa bits, integers exact only to 2**11 = 2048, position 2049 becomes 2048; the "
                         "broadcast multiply fixes it on B200 and A100 (huggingface/transformers#48450)",
        measure=_measure_48428,
        checks=(close("tf32_exact_integers_to", 0), close("tf32_value_of_2049", 0),
                claim("claim", lambda m: m["tf32_gemm_colliding_2048"] == 0 and m["tf32_gemm_colliding_4096"] > 0,
                      "colliding positions through the TF32 GEMM: {tf32_gemm_colliding_2048} at 2048, "
                      "{tf32_gemm_colliding_4096} at 4096")),
        explanation="Recomputed: a TF32 GEMM reads 11 significant bits of each operand, so positions are exact to "
                    "2048 and 2049 -> 2048; from 2049 on, neighbouring tokens share a rotation (1023 of 4096 "
                    "positions share the previous one's, 26623 of 32768) and neighbours' relative rotation is off "
                    "by up to 1.0 rad at 4096 and 3.0 at 32768, against 5e-3 rad for the float32 GEMM (bf16 "
                    "cos/sin both). The report says TF32 'truncates'; cuBLAS on the "
                    "H200 rounds to nearest even (2051 -> 2052; truncation, as Triton's tl.dot does, gives 2050): "
                    "the same exact range, half the error. On the H200 transformers' own K = 1 GEMM stayed exact "
                    "under 'high' at batch 1-16 (cuBLAS went TF32 from K = 2 for mm, K = 4 for bmm): whether the "
                    "angle GEMM goes TF32 depends on the GPU and the shape, as the report found (B200 at batch > "
                    "1, not A100); the B200 itself is not recomputable here.",
        fix="compute the angle as a broadcast multiply, position_ids[:, :, None] * inv_freq[None, None, :] "
            "(huggingface/transformers#48450), or keep 'highest' for the rotary module",
        not_recomputable="which GPUs and batch sizes pick a TF32 kernel (a B200 run)",
        headline=("tf32_value_of_2049", "tf32_gemm_colliding_4096", "tf32_gemm_max_pair_error_d1_32768"),
    ),
    Incident(
        name="batch-invariant-ops-23",
        reference="thinking-machines-lab/batch_invariant_ops#23",
        year=2026,
        stack="batch_invariant_ops (set_batch_invariant_mode: a Triton persistent mm)",
        what="matmul_kernel_persistent calls tl.dot without input_precision: float32 inputs run in TF32, "
             "silently below torch.mm's IEEE float32",
        code_path="set_batch_invariant_mode(True) replaces aten::mm / aten::addmm with matmul_kernel_persistent, "
                  "whose tl.dot(a, b, acc) takes Triton's default input precision (TF32 for float32 on tensor-core "
                  "GPUs); a rotary angle computed as an mm goes through it. Fix: input_precision='ieee' "
                  "(batch_invariant_ops#24)",
        recipe=stages_of(stack("transformers-tl-dot", "float32")),
        settings={"positions": "arange(8192) as float32, mm(ones(1, 1), pos[None, :])",
                  "rope": "Llama-3.1 head_dim 128, rope_theta 5e5 (no llama3 scaling)", "h200": H200},
        published={"differing_of_8192": 4096, "value_of_2049": 2048.0,
                   "claim": "cos of the angle diverges from the IEEE float32 reference for positions above 2048"},
        published_source="issue and PR #24 description (chenwenxiaolive, 2026-06-22): 4096 of the 8192 positions "
                         "change through the kernel, out[2049] = 2048; TF32 is exact only to 2048",
        measure=_measure_bio23,
        checks=(close("differing_of_8192", 0), close("value_of_2049", 0),
                claim("claim", lambda m: m["llama31_fp32_cos_sin_max_rotation_error_8192"] > 1.0,
                      "max rotation error of float32 cos/sin from the tl.dot angle at 8192: "
                      "{llama31_fp32_cos_sin_max_rotation_error_8192} rad")),
        explanation="Recomputed with truncation to TF32 (tf32-rz): of 0..8191 the 4096 integers with more than "
                    "11 significant bits change (2048 below 2**11, then 1024 per binade stay), 2049 -> 2048 and "
                    "4099 -> 4096, errors up to 3; rounding to nearest would change the same 4096. The H200 "
                    "confirms the mechanism: a Triton tl.dot at its default precision truncated every one of "
                    "200768 recorded float32 inputs (positions to 131072: 8192 exact, max error 63), while "
                    "input_precision='ieee' and 'tf32x3' stayed exact; torch.compile's max-autotune picked such "
                    "a template for transformers' angle at batch 1 (8192 exact of 131072, max error 63). Through "
                    "Llama-3.1's frequencies the float32 cos/sin of the truncated angle are off by up to pi at 8192.",
        fix="give tl.dot input_precision='ieee' for float32 inputs (batch_invariant_ops#24), or 'tf32x3'",
        headline=("differing_of_8192", "value_of_2049", "llama31_fp32_cos_sin_max_rotation_error_8192"),
    ),
)
