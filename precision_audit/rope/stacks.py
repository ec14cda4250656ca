"""Stacks: the RoPE code paths that inference and training stacks really run, each written from its source.

A :class:`Stack` is a preset (:class:`~precision_audit.rope.recipes.Preset`: one format per stage and how each
value is made, from the vocabulary of :mod:`precision_audit.rope.recipes` and :mod:`precision_audit.rope.formulas`)
with the rope types it runs, the code it was read from, the fix when it is not safe, and where it runs another
schedule than the model declares (a mismatch the audit measures).  :data:`STACKS` holds one row per stack;
:func:`stack` gives a stack's recipe for a dtype and schedule, :func:`select_stacks` the stacks that run a model.

>>> stack("vllm", "bf16").stages["cache"], STACKS["vllm"].label
('bfloat16', 'vLLM')
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..checks import ArgumentTypeError, check_choice, check_names, describe, unknown_name
from ..formats import Format, get_format
from .schedules import ROPE_TYPES, RopeSchedule, check_schedule
from .formulas import flashinfer_mismatch, ggml_mismatch, mlx_mismatch, rounded_ramp_mismatch, vllm_mismatch, vllm_overrides
from .recipes import DTYPE, PRESETS, Preset, Recipe, preset

__all__ = ["ROLES", "SETTINGS", "STACKS", "Stack", "recipe", "recipes_for", "select_stacks", "setting_stacks", "stack"]

ROLES: tuple[str, ...] = ("train", "serve")
"""What a stack is used for: training (the schedule a model learns) or serving (the schedule it is run with)."""

SETTINGS: dict[str, str] = {
    "matmul-precision-high": "torch.set_float32_matmul_precision('high') (or allow_tf32, or Triton's tl.dot "
                             "default): a float32 GEMM may read its inputs as TF32 on tensor-core GPUs",
}
"""Settings under which a stack's code runs another path: such a stack (``Stack.setting``) is audited only when
its setting is asked for (``all``, ``train`` and ``serve`` leave it out; :func:`setting_stacks` lists it)."""

_D, _F32 = DTYPE, "float32"


@dataclass(frozen=True)
class Stack:
    """An inference or training stack's RoPE code path, written from its published source.

    ``preset`` is the path as recipe fields (see :class:`Preset`);
    ``inv_freq_by_type`` overrides ``inv_freq_from`` per rope type (MLX takes
    mlx-lm's ``freqs`` for scaled types and computes the default one itself),
    ``angle_by_type`` ``angle_from`` (linear scaling by scaled positions);
    ``rope_types`` are the types it implements as modelled, every other type
    is refused with ``refused``'s reason (or "not implemented"); ``source``
    cites the code read; ``fix`` is what a user does when the path is not safe.
    ``mismatch`` says, for a schedule, how the schedule the stack really runs
    differs from the declared one (None where it runs the declared one): the
    audit measures the stack's angles against the declared schedule, so the
    difference shows up as error; ``mismatch_fix`` is what to do about it.
    ``roles``: what the stack is used for (:data:`ROLES`).
    ``overrides_for`` gives, for a declared schedule, the schedule fields
    the stack computes its frequencies with in place of the declared ones
    (added to the preset's ``overrides`` by :func:`stack`: vLLM's one
    LongRoPE factor set per deployment, its fixed dynamic-NTK base).
    """

    label: str
    preset: Preset
    rope_types: tuple[str, ...]
    source: str
    fix: str | None = None
    inv_freq_by_type: tuple[tuple[str, str], ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    angle_by_type: tuple[tuple[str, str], ...] = ()
    mismatch: Callable[[RopeSchedule], str | None] | None = None
    mismatch_fix: str | None = None
    roles: tuple[str, ...] = ("serve",)
    overrides_for: Callable[[RopeSchedule], tuple[tuple[str, Any], ...]] | None = None
    setting: str | None = None

    def __post_init__(self) -> None:
        bad = [r for r in self.roles if r not in ROLES]
        if bad or not self.roles:
            raise ValueError(f"stack {self.label!r}: roles {self.roles!r} must be some of {', '.join(ROLES)}")
        if self.setting is not None and self.setting not in SETTINGS:
            raise ValueError(f"stack {self.label!r}: setting {self.setting!r} must be one of {', '.join(SETTINGS)}")

    def runs_other_schedule(self, schedule: RopeSchedule) -> str | None:
        """How the schedule this stack runs differs from ``schedule`` (the declared one), or None."""
        return None if self.mismatch is None else self.mismatch(schedule)

    def check(self, name: str, rope_type: str) -> None:
        """Raise ValueError naming the stack and the rope type if the stack does not run that type."""
        if rope_type not in self.rope_types:
            why = dict(self.refused).get(rope_type, "not implemented there")
            raise ValueError(f"stack {name!r} does not run rope type {rope_type!r}: {why} "
                             f"(it runs {', '.join(self.rope_types)})")


_VLLM_REFUSED = (("dynamic", "not modelled for this stack (the vllm stack models vLLM's DynamicNTKScalingRotary"
                             "Embedding: the plain base at every length)"),
                 ("longrope", "not modelled for this stack (the vllm stack models vLLM's one factor set per "
                              "deployment)"))
_GGML_REFUSED = (("dynamic", "ggml has no dynamic NTK"),
                 ("proportional", "not modelled yet"))
_MLX_REFUSED = (("dynamic", "mlx-lm recomputes the base per call in float64 (not modelled yet)"),)
_MLX_TYPES = ("default", "linear", "llama3", "yarn", "longrope", "proportional")
_SCALED = (("linear", "scaled-product"),)  # linear scaling: positions times 1/factor, then the product
_MLX_FREQS = (("llama3", "float32"), ("yarn", "mlx-lm"), ("longrope", "mlx-lm"), ("proportional", "mlx-lm"))
_MLX_MISMATCH_FIX = ("YaRN with truncate=false: serve it on a stack that honours truncate (transformers; vLLM with "
                     "vllm-project/vllm#28244); LongRoPE: mlx-lm has no switch for the short factors (accept it, or "
                     "serve contexts up to L0 on transformers)")
_TE_REFUSED = tuple((t, "TransformerEngine's RotaryPositionEmbedding builds default RoPE and position interpolation "
                        "only") for t in ("dynamic", "yarn", "longrope", "llama3", "proportional"))
_FLASH_REFUSED = tuple((t, "flash_attn's RotaryEmbedding builds default RoPE only (and XPos, not modelled)")
                       for t in ROPE_TYPES if t != "default")
_UNSLOTH_REFUSED = (("dynamic", "Unsloth builds its cache once from the init inv_freq: no dynamic NTK update"),
                    ("longrope", "Unsloth's LongRopeRotaryEmbedding (short and long caches) is not modelled yet"),
                    ("proportional", "not modelled yet"))
_TORCHTUNE_REFUSED = tuple((t, "torchtune builds default RoPE and llama3 (Llama3ScaledRoPE) only here; its Phi-3 "
                               "and Llama 4 variants are not modelled yet") for t in ROPE_TYPES
                           if t not in ("default", "llama3"))
_MAXTEXT_REFUSED = (("llama3", "MaxText's LLaMARotaryEmbedding (hard-coded Llama 3.1 factors, 1/scaled(1/timescale), "
                               "float32 cos/sin) is not modelled yet"),
                    ("yarn", "MaxText's YarnRotaryEmbedding is not modelled yet"),
                    *((t, "MaxText has no such rope type") for t in ("dynamic", "longrope", "proportional")))
_ALL = ROPE_TYPES
_TF32, _TF32_RZ = "tf32", "tf32-rz"
_TF32_FIX = ("compute the angle as a broadcast multiply, inv_freq[None, :, None] * position_ids[:, None, :].float() "
             "(huggingface/transformers#48450), or run the rotary module under torch.set_float32_matmul_precision"
             "('highest')")
_TL_DOT_FIX = ("give that tl.dot input_precision='ieee' (or 'tf32x3'), or compute the angle as a broadcast "
               "multiply (huggingface/transformers#48450)")
_GGML = ("default", "linear", "yarn", "llama3", "longrope")
_FP32_THEN_CAST = "fp32-then-cast"
_FUSED = "fused"  # triton's multiply-add contraction (liger, unsloth: tests/data/cuda_kernels.npz)
_TRUNCATE = (("truncate", True),)  # code that always rounds YaRN's ramp bounds (no truncate switch)
_UPGRADE_VLLM = "upgrade vLLM to a release with vllm-project/vllm#28244 (truncate honoured)"
_GGML_MISMATCH_FIX = ("serve it on a stack that computes the declared schedule (transformers; vLLM with "
                      "vllm-project/vllm#28244)")
_LLAMA_CPP_MISMATCH_FIX = ("YaRN with truncate=false: " + _GGML_MISMATCH_FIX + "; LongRoPE: run short contexts with "
                           "-c <= L0 (llama.cpp then takes rope_factors_short), or accept it")
_VLLM_MISMATCH_FIX = ("LongRoPE: serve short contexts with --max-model-len <= L0 (vLLM then takes the short "
                      "factors), or accept it; dynamic: serve lengths above L0 on transformers (it grows the base "
                      "per length), or accept the plain base")

# One row per stack.  Each cites the code read (repository @ commit: file, function); docs/stacks notes in
# the README give the float steps.  transformers' rows are its preset paths; the others add their hows.
STACKS: dict[str, Stack] = {
    "transformers": Stack(
        "transformers as built", Preset(_F32, _F32, _F32, _F32, _D, _F32, "fp32 rotary module, cos/sin cast"),
        _ALL, "huggingface/transformers 5.x: modeling_rope_utils.py ROPE_INIT_FUNCTIONS; models/llama/"
              "modeling_llama.py LlamaRotaryEmbedding.forward (fp32 angle, cos*attention_scaling, .to(x.dtype)), "
              "apply_rotary_pos_emb (q*cos + rotate_half(q)*sin in the model dtype)", roles=("train", "serve")),
    "transformers-cast": Stack(
        "transformers after model.to(dtype)", Preset(_F32, _D, _F32, _F32, _D, _F32, "inv_freq buffer downcast"),
        _ALL, "huggingface/transformers 5.x: inv_freq and original_inv_freq are buffers that module.to(dtype) casts; "
              "forward upcasts them (dynamic rebuilds in fp32 above max_position_embeddings)",
        fix="call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)", roles=("train", "serve")),
    "vllm": Stack(
        "vLLM", Preset(_F32, _F32, _F32, _F32, _D, _F32, "fp32 cos/sin cache stored in the dtype",
                       apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default", "linear", "yarn", "llama3", "dynamic", "longrope"),
        "vllm-project/vllm: model_executor/layers/rotary_embedding/base.py _compute_inv_freq, "
        "_compute_cos_sin_cache (float32, .to(dtype)); csrc/pos_encoding_kernels.cu (rotation in float); "
        "phi3_long_rope_scaled_rope.py @17d618b Phi3LongRoPEScaledRotaryEmbedding (use_long_rope = max_model_len > "
        "original_max_position_embeddings: the long cache at every position; inv_freq 1.0 / (factors * base ** "
        "(arange / d)) in float32, cos()*mscale with mscale sqrt(1 + ln(M/L0) / ln L0), .to(dtype)); "
        "dynamic_ntk_scaling_rope.py @3cfbaf3 DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache (one base "
        "for max_len = L0 * factor: base * (max_len / L0 - (factor - 1)) ** (d / (d - 2)) = base)",
        refused=(("proportional", "not implemented there"),), mismatch=vllm_mismatch,
        mismatch_fix=_VLLM_MISMATCH_FIX, overrides_for=vllm_overrides),
    "vllm-pre-28244": Stack(
        "vLLM before #28244", Preset(_F32, _F32, _F32, _F32, _D, _F32, "vLLM <= 0.11.0: YaRN ramp bounds always "
                                     "rounded", apply=_D, apply_mode=_FP32_THEN_CAST, overrides=_TRUNCATE),
        ("default", "linear", "yarn", "llama3"),
        "vllm-project/vllm v0.11.0: model_executor/layers/rotary_embedding/common.py yarn_find_correction_range "
        "(math.floor / math.ceil, no truncate argument: vllm-project/vllm#27722); otherwise as vllm",
        refused=_VLLM_REFUSED, mismatch=rounded_ramp_mismatch, mismatch_fix=_UPGRADE_VLLM),
    "sglang": Stack(
        "SGLang (CUDA, FlashInfer)", Preset(_F32, _F32, _F32, _F32, _F32, _F32, "fp32 cos/sin cache kept fp32, "
                                            "rotation in float32", apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default", "linear", "yarn", "llama3"),
        "sgl-project/sglang 0099dee: python/sglang/srt/layers/rotary_embedding/base.py RotaryEmbedding.__init__ "
        "(cache kept float32 on CUDA/HIP/XPU or with SGLANG_ROPE_CACHE_FP32), _compute_cos_sin_cache (float32 "
        "arange, einsum, cos/sin), forward_cuda -> apply_rope_with_cos_sin_cache_inplace (head sizes 64, 128, 256, "
        "512; FlashInfer's kernel rotates in float32); YaRN honours truncate (sgl-project/sglang#14270)",
        refused=_VLLM_REFUSED),
    "flashinfer": Stack(
        "FlashInfer (on-the-fly rope)", Preset(_F32, _F32, _F32, _F32, _F32, "rcp-pow", "freq = __powf(1/base, 2j/d), "
                                               "angle fl32(pos * freq), __sincosf, rotation in float32 (CUDA "
                                               "fast math: bound, not bit-exact)", apply=_D,
                                               apply_mode=_FP32_THEN_CAST, fast_math=("powf", "sincosf")),
        ("default", "linear", "llama3"),
        "flashinfer-ai/flashinfer fb28d72: include/flashinfer/pos_enc.cuh BatchQKApplyRotaryPosIds and "
        "BatchQKApplyLlama31RotaryPosIds (rope_rcp_theta = 1.0f / rope_theta, smooth_a, smooth_b on the host), "
        "BatchQKApplyRotaryPosIdsKernel (freq = __powf(rope_rcp_theta, float(2j) / float(rotary_dim)); smooth = "
        "clamp(freq * smooth_a + smooth_b); freq = (1 - smooth) * (freq * rope_rcp_scale) + smooth * freq; embed "
        "= float(pos) * freq; __sincosf(embed); x*cos + rotate*sin in float, stored as DType); flashinfer/jit/"
        "core.py (-use_fast_math); flashinfer/rope.py apply_rope_pos_ids, apply_llama31_rope_pos_ids",
        refused=tuple((t, "FlashInfer's on-the-fly kernels run default, linear (rope_scale) and llama 3.1 RoPE only")
                      for t in ("yarn", "dynamic", "longrope", "proportional")),
        mismatch=flashinfer_mismatch, mismatch_fix="llama3 with equal band factors (Llama 4): serve it on a stack "
                                                   "that computes transformers' bands (transformers, vLLM)"),
    "sglang-fallback": Stack(
        "SGLang (fallback kernel)", Preset(_F32, _F32, _F32, _F32, _D, _F32, "fp32 cache downcast to the query "
                                           "dtype", apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default", "linear", "yarn", "llama3"),
        "sgl-project/sglang 0099dee: rotary_embedding/base.py: other head sizes on CUDA (use_fallback_kernel: "
        "cos_sin_cache.to(query.dtype), vLLM's rotary_embedding kernel) and platforms that cast the cache at "
        "init (not CUDA/HIP/XPU, SGLANG_ROPE_CACHE_FP32 unset)",
        fix="set SGLANG_ROPE_CACHE_FP32=1 (platforms that cast at init); other head sizes on CUDA take this "
            "path whatever the setting", refused=_VLLM_REFUSED),
    "llama.cpp-cpu": Stack(
        "llama.cpp CPU", Preset(_F32, _F32, _F32, _F32, _D, _F32, "ggml CPU rope, K stored in the KV-cache type",
                                apply=_D, apply_mode=_FP32_THEN_CAST, angle_from="repeated-product"),
        _GGML, "ggml-org/ggml d99724f (= llama.cpp 0c1e570): src/ggml-cpu/ops.cpp ggml_rope_cache_init, rope_yarn, "
               "rotate_pairs; src/ggml.c ggml_rope_yarn_corr_dims; convert_hf_to_gguf LlamaModel rope_freqs; "
               "LongRoPE: convert_hf_to_gguf Phi3MiniModel (rope_factors_long/short float32, rope.scaling."
               "attn_factor sqrt(1 + ln(M/L0) / ln L0)), src/models/phi3.cpp @358a4a0 (ggml_rope_ext with "
               "get_rope_factors, attn_factor), src/llama-model.cpp llama_model::get_rope_factors (long "
               "when n_ctx per sequence > n_ctx_orig_yarn; n_ctx 0 = the training context), src/llama-context.cpp "
               "(yarn_attn_factor *= rope_attn_factor; ext_factor 0)",
        refused=_GGML_REFUSED, mismatch=ggml_mismatch, mismatch_fix=_LLAMA_CPP_MISMATCH_FIX),
    "llama.cpp-cuda": Stack(
        "llama.cpp CUDA", Preset(_F32, _F32, _F32, _F32, _F32, _F32, "ggml CUDA rope: angles, cos/sin and rotation "
                                 "in float32 in the kernel, K stored in the KV-cache type (fast-math __powf, "
                                 "__sinf/__cosf: bound, not bit-exact)",
                                 apply=_D, apply_mode=_FP32_THEN_CAST, angle_from="power-product",
                                 fast_math=("powf", "sincosf")),
        _GGML, "ggml-org/ggml d99724f: src/ggml-cuda/rope.cu rope_norm/rope_neox (pos * powf(theta_scale, i)), "
               "rope_yarn (cosf/sinf of the float32 angle), built with -use_fast_math (src/ggml-cuda/CMakeLists."
               "txt: powf -> __powf, cosf/sinf -> __cosf/__sinf); ggml_rope_yarn_corr_dims, rope factors and "
               "attn_factor as on the CPU",
        refused=_GGML_REFUSED, mismatch=ggml_mismatch, mismatch_fix=_LLAMA_CPP_MISMATCH_FIX),
    "mlx": Stack(
        "MLX (Metal)", Preset(_F32, _F32, _F32, _F32, _D, "exp2-log2", "mx.fast.rope Metal kernel",
                              apply=_D, apply_mode=_FP32_THEN_CAST),
        _MLX_TYPES, "ml-explore/mlx 846d176: mlx/backend/metal/kernels/rope.metal rope_single_impl "
                    "(exp2, metal::fast::cos/sin not modelled; with freqs: 1 / freqs); mlx-lm d78bf58 "
                    "rope_utils.py Llama3RoPE, YarnRoPE, SuScaledRoPE, ProportionalRoPE (freqs in float32; the "
                    "YaRN / LongRoPE mscale multiplies q/k in the data dtype: the audit keeps it on cos/sin)",
        inv_freq_by_type=_MLX_FREQS, refused=_MLX_REFUSED, mismatch=mlx_mismatch, mismatch_fix=_MLX_MISMATCH_FIX,
        angle_by_type=_SCALED),
    "mlx-cpu": Stack(
        "MLX (CPU)", Preset(_F32, _F32, _F32, _F32, _D, "exp-log", "mx.fast.rope CPU fallback"),
        _MLX_TYPES, "ml-explore/mlx 846d176: mlx/fast.cpp fast::rope fallback (with freqs: reciprocal(freqs)), "
                    "mlx/backend/cpu/simd/math.h simd::exp (rotation op by op in the data dtype); mlx-lm d78bf58 "
                    "rope_utils.py as for mlx (the YaRN / LongRoPE mscale multiplies q/k in the data dtype: the "
                    "audit keeps it on cos/sin)",
        inv_freq_by_type=_MLX_FREQS, refused=_MLX_REFUSED, mismatch=mlx_mismatch, mismatch_fix=_MLX_MISMATCH_FIX,
        angle_by_type=_SCALED),
    "tensorrt-llm": Stack(
        "TensorRT-LLM (table)", Preset(_F32, _F32, _F32, _F32, _F32, "pow64-recip32", "numpy float32 cos/sin table, "
                                       "rotation in float32", apply=_D, apply_mode=_FP32_THEN_CAST,
                                       overrides=_TRUNCATE),
        ("default", "linear", "yarn", "llama3"),
        "NVIDIA/TensorRT-LLM: tensorrt_llm/functional.py RopeEmbeddingUtils.create_sinusoidal_positions_for_"
        "attention_plugin (inv_freq = scale / (theta ** (arange(0, d, 2) / d)).astype(float32): power in float64; "
        "np.einsum in float32; np.cos/np.sin in float32; table float32), apply_llama3_scaling, "
        "create_sinusoidal_positions_yarn (torch float32, ramp bounds always math.floor / math.ceil); the attention "
        "plugin rotates in float32 and stores q/k in the model dtype",
        inv_freq_by_type=(("yarn", _F32),),
        refused=(("dynamic", "TensorRT-LLM's dynamic type is Hunyuan's alpha scaling, not dynamic NTK"),
                 ("longrope", "create_sinusoidal_positions_long_rope is not modelled yet"),
                 ("proportional", "not implemented there")),
        mismatch=rounded_ramp_mismatch, mismatch_fix=_GGML_MISMATCH_FIX),
    "tensorrt-llm-kernel": Stack(
        "TensorRT-LLM (on-the-fly kernel)", Preset(_F32, _F32, _F32, _F32, _F32, _F32, "angle p / powf(base, 2i/d) "
                                                   "in float32, cosf/sinf, rotation in float32", apply=_D,
                                                   apply_mode=_FP32_THEN_CAST, angle_from="position-over-timescale"),
        ("default",),
        "NVIDIA/TensorRT-LLM: cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttentionUtils.h "
        "rotary_embedding_coefficient (inv_freq = t_step / pow(base, zid / (float) rot_embed_dim); cos, sin of "
        "it in float32); CUDA's powf (2 ulp) and cosf/sinf modelled correctly rounded",
        refused=(("linear", "not modelled yet"), ("llama3", "not modelled yet"), ("yarn", "not modelled yet"),
                 ("dynamic", "not modelled yet"), ("longrope", "not modelled yet"),
                 ("proportional", "not modelled yet"))),
    "openvino": Stack(
        "OpenVINO GPU (f16 positions)", Preset(_D, _D, _D, _D, _D, _F32, "position ids i32 -> f16 before the frequency "
                                               "MatMul, f16 inv_freq constant, Sin/Cos in f16"),
        _ALL, "openvinotoolkit/openvino#34716 and #33214: the GPU plugin's f16 inference precision converts "
              "position_ids to f16 before the MatMul with the (f16-compressed) inv_freq constant and runs Sin/Cos in "
              "f16 where no IncreasePositionIdsPrecision pattern matches the model's graph (Qwen3-VL before #34716, "
              "Gemma 4 before #36896); the GPU plugin runs f16 (give -d float16)",
        fix="update OpenVINO so that IncreasePositionIdsPrecision matches the model (openvino#34716, #36896), or "
            "run with inference precision f32"),
    "openvino-fixed": Stack(
        "OpenVINO GPU (IncreasePositionIdsPrecision)", Preset(_F32, _D, _F32, _F32, _D, _F32, "position ids and "
                                                              "MatMul in f32, inv_freq constant f16, cast after "
                                                              "Sin/Cos"),
        _ALL, "openvinotoolkit/openvino#33214 / #34716: IncreasePositionIdsPrecision converts position_ids "
              "i32 -> f32, inserts Convert(f16 -> f32) after the Broadcast of the (f16-compressed) inv_freq, runs "
              "MatMul and Sin/Cos in f32 and converts their outputs to f16",
        fix="keep the inv_freq constant in f32 (export without compressing it to f16)"),
    # the angle GEMM on tensor cores (issue 53): the same module, its float32 matmul read as TF32
    "transformers-tf32": Stack(
        "transformers, rotary GEMM in TF32 (matmul precision 'high')",
        Preset(_TF32, _TF32, _F32, _F32, _D, _F32, "the angle GEMM inv_freq @ positions on tensor cores: both "
               "operands rounded to TF32 (to nearest even, as cuBLAS converts), the one-term product exact in "
               "float32; cos/sin in float32, cast to the dtype"),
        _ALL, "huggingface/transformers releases whose models/llama/modeling_llama.py LlamaRotaryEmbedding."
              "forward computes inv_freq_expanded.float() @ position_ids_expanded.float() under autocast(enabled="
              "False) (4.51.3 in the report; 5.24 multiplies by broadcast instead); under "
              "torch.set_float32_matmul_precision('high') cuBLAS may pick a TF32 tensor-core kernel for it: "
              "huggingface/transformers#48428 (B200, sm_100, batch > 1; not on A100). On an H200 (recorded) the "
              "K = 1 GEMM stayed exact at batch 1-16 while K >= 2 (mm) / K >= 4 (bmm) went TF32, to nearest even",
        fix=_TF32_FIX, roles=("train", "serve"), setting="matmul-precision-high"),
    "transformers-tl-dot": Stack(
        "transformers, rotary GEMM in a Triton tl.dot (TF32, truncated)",
        Preset(_TF32_RZ, _TF32_RZ, _F32, _F32, _D, _F32, "the angle GEMM in a Triton kernel's tl.dot at its "
               "default input precision: both operands truncated to TF32, the one-term product exact in float32; "
               "cos/sin in float32, cast to the dtype"),
        _ALL, "triton-lang/triton: tl.dot(input_precision=None) takes TF32 for float32 inputs on tensor-core "
              "GPUs (the default allow_tf32); a Triton mm that replaces torch's (thinking-machines-lab/"
              "batch_invariant_ops#23) or torch.compile's max-autotune mm templates (ALLOW_TF32 under 'high') run "
              "transformers' rotary GEMM so. Recorded on an H200: tl.dot truncates every float32 input to TF32; "
              "input_precision='ieee' and 'tf32x3' stay exact",
        fix=_TL_DOT_FIX, roles=("train", "serve"), setting="matmul-precision-high"),
    # training stacks (issue 29): fused rotary kernels as users train with them
    "transformer-engine": Stack(
        "TransformerEngine (fused rope)",
        Preset(_F32, _F32, _F32, _F32, _F32, _F32, "fp32 freqs; sincosf on the angle in the kernel (CUDA sincosf "
               "not modelled: correctly rounded float32 stands in); cos/sin stay float32, rotation in float32, output "
               "cast to the dtype", apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default", "linear"), "NVIDIA/TransformerEngine d0067d0: transformer_engine/pytorch/attention/rope.py "
                      "RotaryPositionEmbedding.__init__/forward (float32 inv_freq and arange, autocast off, outer "
                      "product in float32), FusedRoPEFunc.forward (freqs.float()); transformer_engine/common/"
                      "fused_rope/fused_rope.cu fused_rope_block_forward (sincosf into float32 shared memory, "
                      "v*cos + rotate*sin in float, stored as scalar_t)",
        refused=_TE_REFUSED, roles=("train",), angle_by_type=_SCALED),
    "flash-attn": Stack(
        "flash-attention (RotaryEmbedding)",
        Preset(_F32, _F32, _F32, _F32, _D, _F32, "float32 positions, inv_freq and angle; torch cos/sin in float32 "
               "(CUDA cosf/sinf not modelled: correctly rounded float32 stands in) cached in the dtype; the triton "
               "kernel rotates in float32 (tl.load(...).to(tl.float32)) and stores in the dtype",
               apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default",), "Dao-AILab/flash-attention 0251105: flash_attn/layers/rotary.py RotaryEmbedding."
                      "_compute_inv_freq, _update_cos_sin_cache (arange float32, inv_freq recomputed in float32 if "
                      "the buffer was cast, torch.outer, cos/sin .to(dtype)); flash_attn/ops/triton/rotary.py "
                      "rotary_kernel (x, cos, sin loaded .to(tl.float32), o0/o1 stored in OUT's dtype)",
        refused=_FLASH_REFUSED, roles=("train",)),
    "liger": Stack(
        "Liger-Kernel (liger_rotary_pos_emb)",
        Preset(_F32, _F32, _F32, _F32, _D, _F32, "transformers' rotary module makes cos/sin (fp32, cast to the dtype); "
               "liger's triton kernel casts q/k to the cos/sin dtype and rotates in it, x1's product fused into "
               "the sum by triton (recorded bit for bit on an H200)", apply_mode=_FUSED),
        _ALL, "linkedin/Liger-Kernel ead96b6: src/liger_kernel/transformers/rope.py liger_rotary_pos_emb (replaces "
              "transformers' apply_rotary_pos_emb; cos/sin from the model's rotary module); src/liger_kernel/ops/"
              "rope.py _triton_rope (q/k tiles .to(sin_row.dtype), q*cos - q2*sin in that dtype, stored in q's)",
        roles=("train",)),
    "unsloth": Stack(
        "Unsloth (fast rope kernel)",
        Preset(_F32, _F32, _F32, _F32, _D, _F32, "int64 positions .float(), float32 inv_freq (transformers' init "
               "functions) and angle, cos/sin * attention_scaling in float32 cached in the dtype; the triton kernel "
               "rotates in the cos/sin dtype, x1's product fused into the sum by triton (recorded bit for bit on an "
               "H200)", apply_mode=_FUSED),
        ("default", "linear", "yarn", "llama3"),
        "unslothai/unsloth 015bdef: unsloth/models/llama.py LlamaRotaryEmbedding._unsloth_recompute_inv_freq "
        "(_compute_config_rope_inv_freq: transformers' ROPE_INIT_FUNCTIONS), _set_cos_sin_cache (arange int64 "
        ".float(), torch.outer, cos()*attention_scaling .to(dtype): torch's default dtype at init, which "
        "from_pretrained sets to the model dtype, x.dtype in extend_rope_embedding), LlamaAttention_fast_forward "
        "(cos/sin .to(Q.dtype)); unsloth/kernels/rope_embedding.py _rope_embedding_QK, _rope_embedding (Q loaded "
        ".to(sin1.dtype), Q*cos - Q2*sin in that dtype)",
        refused=_UNSLOTH_REFUSED, roles=("train",)),
    "torchtune": Stack(
        "torchtune (RotaryPositionalEmbeddings)",
        Preset(_F32, _F32, _F32, _F32, _F32, _F32, "float32 theta buffer and positions (theta's dtype), einsum and "
               "cos/sin in float32, cache kept float32; x.float() rotation, type_as(x)",
               apply=_D, apply_mode=_FP32_THEN_CAST),
        ("default", "llama3"), "pytorch/torchtune bd2a0fc: torchtune/modules/position_embeddings.py "
                               "RotaryPositionalEmbeddings.rope_init, build_rope_cache, forward; torchtune/models/"
                               "llama3_1/_position_embeddings.py Llama3ScaledRoPE.rope_init, apply_scaling (float32 "
                               "tensor ops, transformers' llama3 formula op for op)",
        refused=_TORCHTUNE_REFUSED, roles=("train",)),
    "maxtext": Stack(
        "MaxText (RotaryEmbedding)",
        Preset(_F32, _F32, _F32, _F32, _D, _F32, "float32 timescale min * (max/min) ** fraction, angle = position / "
               "timescale (a float32 division), sin/cos in float32 (XLA's sin/cos and pow not modelled: correctly "
               "rounded float32 stands in), cast to the activation dtype, rotation in it",
               angle_from="position-over-timescale"),
        ("default", "linear"), "AI-Hypercomputer/maxtext e591f30: src/maxtext/layers/embeddings.py "
                               "RotaryEmbedding.timescale, __call__ (sinusoid_inp = position / timescale, "
                               "jnp.sin(...).astype(inputs.dtype), apply_rotary); src/maxtext/layers/attentions.py "
                               "init_rotary_embedding (RotaryEmbedding for rope_type default, rope_min_timescale 1)",
        refused=_MAXTEXT_REFUSED, roles=("train",)),
}


def stack(name: str, dtype: str | Format = "bfloat16", schedule: RopeSchedule | None = None) -> Recipe:
    """The recipe of stack ``name`` (:data:`STACKS`) for a dtype, checked against ``schedule``'s rope type.

    >>> stack("llama.cpp-cpu", "fp16").how["angle"][:34]
    'float32: theta = p, then theta *= '
    >>> stack("vllm", "bf16", RopeSchedule(head_dim=64, scaling="dynamic", factor=2.0)).overrides
    (('scaling', 'default'), ('base', 10000.0))
    >>> stack("mlx", "bf16", RopeSchedule(head_dim=64, scaling="dynamic", factor=2.0))
    Traceback (most recent call last):
    ...
    ValueError: stack 'mlx' does not run rope type 'dynamic': mlx-lm recomputes the base per call in float64 (not modelled yet) (it runs default, linear, llama3, yarn, longrope, proportional)
    """
    row = STACKS[check_choice(name, "stack", tuple(STACKS))]
    if schedule is not None:
        check_schedule(schedule)
    recipe = replace(row.preset.recipe(name, get_format(dtype).name), stack=name)
    if schedule is not None:
        row.check(name, schedule.scaling)
        src = dict(row.inv_freq_by_type).get(schedule.scaling)
        if src is not None:
            recipe = replace(recipe, inv_freq_from=src)
        how = dict(row.angle_by_type).get(schedule.scaling)
        if how is not None:
            recipe = replace(recipe, angle_from=how)
        extra = row.overrides_for(schedule) if row.overrides_for is not None else ()
        if extra:
            recipe = replace(recipe, overrides=recipe.overrides + tuple(extra))
    return recipe


def select_stacks(names: Sequence[str], rope_types: Sequence[str], strict: bool = True) -> tuple[list[str], list[str]]:
    """The stacks ``names`` asks for (``all``: every stack; ``train`` / ``serve``: every stack in that role) that
    run each of ``rope_types``, and why the others were left out.  With ``strict``, a stack named explicitly that does not run one of the types raises
    ValueError; without, it is left out with its reason like the others.  An unknown name always raises.

    >>> select_stacks(["all"], ["yarn"])[0][:5]
    ['transformers', 'transformers-cast', 'vllm', 'vllm-pre-28244', 'sglang']
    >>> select_stacks(["mlx"], ["dynamic"])[0]
    Traceback (most recent call last):
    ...
    ValueError: stack 'mlx' does not run rope type 'dynamic': mlx-lm recomputes the base per call in float64 (not modelled yet) (it runs default, linear, llama3, yarn, longrope, proportional)
    >>> select_stacks(["mlx", "vllm"], ["dynamic"], strict=False)[0]
    ['vllm']
    >>> select_stacks(["train"], ["default"])[0]
    ['transformers', 'transformers-cast', 'transformer-engine', 'flash-attn', 'liger', 'unsloth', 'torchtune', 'maxtext']
    """
    out: list[str] = []
    skipped: list[str] = []
    plain = {k: v for k, v in STACKS.items() if v.setting is None}
    groups = {"all": tuple(plain), **{role: tuple(k for k, v in plain.items() if role in v.roles) for role in ROLES}}
    for n in dict.fromkeys(n for name in names for n in groups.get(name, [name])):
        row = STACKS[check_choice(n, "stack", tuple(STACKS))]
        try:
            for t in dict.fromkeys(rope_types):
                row.check(n, t)
        except ValueError as e:
            if strict and (n in names or not any(g in names for g in groups)):
                raise
            skipped.append(str(e))
            continue
        out.append(n)
    return out, skipped


def setting_stacks(setting: str) -> list[str]:
    """The stacks that run only under ``setting`` (:data:`SETTINGS`): what ``config --matmul-precision high`` adds.

    >>> setting_stacks("matmul-precision-high")
    ['transformers-tf32', 'transformers-tl-dot']
    """
    check_choice(setting, "setting", tuple(SETTINGS))
    return [k for k, v in STACKS.items() if v.setting == setting]


def recipe(name: str, dtype: str | Format = "bfloat16", schedule: RopeSchedule | None = None) -> Recipe:
    """The code path ``name`` with its cache in ``dtype``: a preset (:data:`~.recipes.PRESETS`, :func:`preset`)
    or a stack (:data:`STACKS`, :func:`stack`, checked against ``schedule``'s rope type when one is given).
    Every encoding package has a ``recipe(name, dtype)``.

    >>> recipe("fp32", "fp16").stages["cache"], recipe("vllm").stack
    ('float16', 'vllm')
    >>> recipe("fp23")
    Traceback (most recent call last):
    ...
    ValueError: unknown RoPE recipe 'fp23'; did you mean: fp32? (4 presets: lowp, lowp-inv-freq, fp32, fp64; or a stack, see precision_audit.rope.STACKS)
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"RoPE recipe {describe(name)} must be a name (a preset or a stack)")
    if name in PRESETS:
        if schedule is not None:
            check_schedule(schedule)
        return preset(name, dtype)
    if name in STACKS:
        return stack(name, dtype, schedule)
    near = unknown_name("RoPE recipe", name, [*PRESETS, *STACKS]).split(" (")[0]
    raise ValueError(f"{near} ({len(PRESETS)} presets: {', '.join(PRESETS)}; or a stack, see "
                     "precision_audit.rope.STACKS)")


def recipes_for(recipes: str | Recipe | Any, dtypes: Any = None, schedule: RopeSchedule | None = None
                ) -> list[Recipe]:
    """The recipes an audit runs: each name (:func:`recipe`) once per dtype of ``dtypes`` (default bfloat16),
    dtype-major; a :class:`Recipe` as it is (it carries its dtype), once, where it stands among the first
    dtype's.

    >>> [(r.name, r.cache) for r in recipes_for(["lowp", "fp32"], ["bf16", "fp16"])]
    [('lowp', 'bfloat16'), ('fp32', 'bfloat16'), ('lowp', 'float16'), ('fp32', 'float16')]
    """
    items = check_names(recipes, "recipes", "recipe", Recipe)
    for i, item in enumerate(items):
        if not isinstance(item, (str, Recipe)):
            raise ArgumentTypeError(f"recipes[{i}] {describe(item)} is not a recipe name or a Recipe (build one "
                                    "with preset(name, dtype), stack(name, dtype) or parse_stages(text, dtype))")
    fmts = ["bfloat16"] if dtypes is None else list(dict.fromkeys(
        get_format(d).name for d in check_names(dtypes, "dtypes", "format name", Format)))
    return [item if isinstance(item, Recipe) else recipe(item, d, schedule)
            for k, d in enumerate(fmts) for item in items if k == 0 or not isinstance(item, Recipe)]
