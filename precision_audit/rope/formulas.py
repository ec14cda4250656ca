"""How inference and training stacks make RoPE values where they differ from ``position * inv_freq``.

Each function here is one "how" of the recipe vocabulary
(:mod:`precision_audit.rope.recipes`), used by every stack that computes that
way.  All arithmetic is float32 with every operation correctly rounded (numpy
float32 operations are IEEE operations); a libm or polynomial function is
modelled correctly rounded unless the stack ships its own polynomial, which is
then modelled bit for bit.

Inverse frequencies (``inv_freq_from``):

* ``"exp-log"``: ``exp(-i * fl32(logf(base) / (d/2)))`` with MLX's CPU float32
  exponential (a Cephes polynomial with fused multiply-adds): MLX's
  ``fast::rope`` without ``freqs`` on a CPU stream (ml-explore/mlx,
  ``mlx/fast.cpp`` ``fast::rope`` fallback and ``mlx/backend/cpu/simd/math.h``
  ``simd::exp``, commit 846d176).
* ``"exp2-log2"``: ``exp2(-fl32(i / (d/2)) * fl32(log2f(base)))``, exp2 correctly
  rounded: MLX's Metal and CUDA kernels (``mlx/backend/metal/kernels/rope.metal``
  ``rope_single_impl``; ``mlx/backend/cuda/rope.cu``).
* ``"pow64-recip32"``: ``fl32(s / fl32(base ** (2i/d)))`` with the power in
  float64 (numpy), ``s = fl32(1/factor)`` for linear scaling (1 otherwise);
  llama3: the same, then Llama 3's band scaling in float64 per value, rounded
  once to float32 (TensorRT-LLM pins numpy < 2, where a Python float and a
  float32 scalar compute in float64): TensorRT-LLM's table
  (NVIDIA/TensorRT-LLM ``tensorrt_llm/functional.py``
  ``RopeEmbeddingUtils.create_sinusoidal_positions_for_attention_plugin`` and
  ``apply_llama3_scaling``).
* ``"mlx-lm"``: mlx-lm's ``freqs`` (periods) for the scaled types it passes to
  ``mx.fast.rope``, every op in float32 (ml-explore/mlx-lm d78bf58,
  ``mlx_lm/models/rope_utils.py``; ``base ** e`` correctly rounded), then
  ``1.0f / freqs`` as the kernel takes them (:func:`mlx_lm_inv_freq`):
  ``SuScaledRoPE`` (longrope: always the long factors), ``YarnRoPE`` (its own
  blend ``(s p * p) / (s p * mask + p * (1 - mask))``, ramp bounds always
  floor / ceil), ``ProportionalRoPE`` (``factor * base ** (2i / head_dim)``,
  infinite periods for the pairs that do not rotate).
* ``"rcp-pow"``: ``powf(fl32(1/base), fl32(2j/d))`` (times ``fl32(1/rope_scale)``
  for linear scaling): FlashInfer's on-the-fly kernels
  (flashinfer-ai/flashinfer fb28d72, ``include/flashinfer/pos_enc.cuh``
  ``BatchQKApplyRotaryPosIdsKernel``; ``rope_rcp_theta = 1.0f / rope_theta`` on
  the host); the kernel's ``__powf`` is modelled correctly rounded and bounded
  in :mod:`precision_audit.rope.cuda`.

Angles (``angle_from``), ggml's ``rope_yarn`` family (ggml-org/ggml,
``src/ggml-cpu/ops.cpp`` ``ggml_rope_cache_init``/``rope_yarn``,
``src/ggml-cuda/rope.cu`` ``rope_norm``/``rope_neox``, ``src/ggml.c``
``ggml_rope_yarn_corr_dims``, commit d99724f; the same in llama.cpp 0c1e570):

* ``"repeated-product"`` (ggml CPU): ``theta = (float) p``, then
  ``theta *= theta_scale`` once per pair, ``theta_scale = powf(base, -2/d)``:
  pair i carries i float32 roundings;
* ``"power-product"`` (ggml CUDA): ``p * powf(theta_scale, i)``, one product
  (CUDA builds use ``-use_fast_math``: ``__powf``/``__cosf`` are approximations
  the model replaces by correctly rounded functions, a lower bound);
* then for both: ``theta / freq_factor_i`` (llama 3's ``rope_freqs``),
  ``freq_scale * theta`` (linear scaling, ``1/factor``), and YaRN's ramp mix
  ``interp * (1 - mix_i) + extrap * mix_i`` with the first product fused into
  the sum (an FMA, as GCC contracts it on FMA hardware).
  LongRoPE (Phi-3): the GGUF's ``rope_factors_long`` (float32) are the
  divisors; llama.cpp takes them when the context per sequence exceeds
  ``n_ctx_orig`` (the default context is the training one: 128K for Phi-3.5)
  and the short ones otherwise (``llama_model::get_rope_factors``).

Angles as a division (``angle_from="position-over-timescale"``), MaxText's
``RotaryEmbedding`` (AI-Hypercomputer/maxtext e591f30, ``src/maxtext/layers/
embeddings.py``, ``RotaryEmbedding.timescale`` and ``__call__``): the
timescale ``min * (max/min) ** fraction`` with ``fraction = fl32(2i / d)``,
``min = 1``, ``max = base``, the power in float32 (correctly rounded here),
times the linear factor where one is set (a float32 product), and the angle
``fl32(position / timescale)``: one float32 division, not a product by an
inverse frequency.  TensorRT-LLM's on-the-fly kernel computes the same
(``cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttentionUtils.h``
``rotary_embedding_coefficient``: ``t_step / pow(base, zid / (float) dim)``,
CUDA's ``powf``, max 2 ulp by the CUDA Math API, modelled correctly rounded).

>>> [float(v) for v in exp32(np.float32([0.0, -1.0]))]
[1.0, 0.3678794503211975]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ..formats import get_format, round_to
from .schedules import RopeSchedule, round_mp, yarn_bounds
from .oracle import F64

__all__ = [
    "ANGLE_HOWS", "INV_FREQ_HOWS", "MLX_LM_ROPE_TYPES", "RCP_POW_ROPE_TYPES", "TIMESCALE_ROPE_TYPES", "AngleMaker",
    "angle_maker", "exp32", "flashinfer_mismatch", "fma32", "llama31_smooth", "rcp_pow_inputs", "theta_scale",
    "ggml_mismatch", "how_inv_freq", "long_factors_mismatch", "mlx_lm_inv_freq", "mlx_mismatch", "mpmath_pow",
    "rounded_ramp_mismatch", "scaled_product_maker", "timescales", "vllm_dynamic_base", "vllm_mismatch",
    "vllm_overrides",
]

F32 = npt.NDArray[np.float32]
_f = np.float32

ANGLE_HOWS: tuple[str, ...] = ("product", "repeated-product", "power-product", "position-over-timescale",
                               "scaled-product")
INV_FREQ_HOWS: tuple[str, ...] = ("exp-log", "exp2-log2", "pow64-recip32", "mlx-lm", "rcp-pow")


def fma32(a: npt.ArrayLike, b: npt.ArrayLike, c: npt.ArrayLike) -> F32:
    """``a * b + c`` rounded once to float32 (``std::fma`` on floats).

    The float32 product is exact in float64; the float64 sum is rounded to
    odd (its last bit set when inexact, from the exact TwoSum error), so the
    final rounding to float32 is correct.

    >>> float(fma32(np.float32(1 + 2**-23), np.float32(1 - 2**-23), np.float32(-1)))  # -2**-46 exactly
    -1.4210854715202004e-14
    """
    a64, b64, c64 = (np.asarray(v, dtype=np.float32).astype(np.float64) for v in (a, b, c))
    p = a64 * b64
    s = p + c64
    bb = s - p
    err = (p - (s - bb)) + (c64 - bb)
    bits = s.view(np.int64) if s.ndim else np.array(s).view(np.int64)
    odd = (err != 0) & ((bits & 1) == 0)
    if np.any(odd):  # round to odd: step toward the exact value, onto an odd significand
        s = np.where(odd, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return np.asarray(s).astype(np.float32)


def exp32(x: npt.ArrayLike) -> F32:
    """MLX's CPU float32 ``exp``: ``2**n * P(f)`` with ``y = x * 1.442695f``, ``n = floor(y + 0.5)``, ``f = y - n``.

    ``P`` is the Cephes degree-6 polynomial evaluated by fused multiply-adds
    (mlx/backend/cpu/simd/math.h ``simd::exp``); ``2**n`` is built from
    exponent bits.
    """
    x0 = np.asarray(x, dtype=np.float32)
    y = x0 * _f(1.442695)
    ipart = np.floor(y.astype(np.float64) + 0.5).astype(np.float32)
    fpart = y - ipart
    p = _f(1.535336188319500e-4)
    for c in (1.339887440266574e-3, 9.618437357674640e-3, 5.550332471162809e-2, 2.402264791363012e-1,
              6.931472028550421e-1, 1.0):
        p = fma32(p, fpart, _f(c))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        bits = (np.nan_to_num(ipart).astype(np.int64) + 127) << 23
        out = ((bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32) * p).astype(np.float32)
    out = np.where(x0 > 88.0, _f(np.inf), np.where(x0 < -88.0, _f(0.0), out))
    return np.where(np.isnan(x0), x0, out).astype(np.float32)


def _cr32(value: float) -> np.float32:
    """A float64 result of a libm function, rounded to float32 (the correctly rounded stand-in)."""
    return _f(float(round_to(value, "float32")[()]))


def how_inv_freq(how: str, schedule: RopeSchedule) -> F64:
    """The float32 inverse frequencies a stack computes by ``how`` (:data:`INV_FREQ_HOWS`), as float64.

    >>> s = RopeSchedule(head_dim=4, base=10000.0)
    >>> how_inv_freq("exp-log", s).tolist()  # MLX CPU: exp(-ln(1e4)/2), one float32 ulp above 0.01
    [1.0, 0.010000000707805157]
    """
    if how not in INV_FREQ_HOWS:
        raise ValueError(f"unknown inv_freq how {how!r}; valid: {', '.join(INV_FREQ_HOWS)}")
    if how == "pow64-recip32":
        return _pow64_recip32(schedule)
    if how == "mlx-lm":
        return mlx_lm_inv_freq(schedule)
    if how == "rcp-pow":
        return _rcp_pow(schedule)
    if schedule.scaling != "default":
        raise ValueError(f"inv_freq how {how!r} builds the default schedule only, not rope type {schedule.scaling!r}")
    half = schedule.rotary // 2
    base = _f(schedule.base)
    i = np.arange(half, dtype=np.float32)
    if how == "exp-log":
        step = _cr32(math.log(float(base))) / _f(half)
        return exp32(-i * _f(step)).astype(np.float64)
    log2b = _cr32(math.log2(float(base)))
    e = (-(i / _f(half)) * log2b).astype(np.float32)
    return np.asarray(round_to(np.exp2(e.astype(np.float64)), "float32"), dtype=np.float64)


RCP_POW_ROPE_TYPES: tuple[str, ...] = ("default", "linear", "llama3")
"""The rope types FlashInfer's on-the-fly kernels run with ``rcp-pow`` frequencies (linear: ``rope_scale``;
llama3: ``apply_llama31_rope``)."""


def rcp_pow_inputs(s: RopeSchedule) -> tuple[float, F32]:
    """FlashInfer's ``__powf`` arguments: the float32 base ``1.0f / (float) rope_theta`` (host code) and the
    exponents ``float(2j) / float(rotary_dim)``, j < d/2 (``include/flashinfer/pos_enc.cuh``).

    >>> b, e = rcp_pow_inputs(RopeSchedule(head_dim=4, base=10000.0)); b, e.tolist()
    (9.999999747378752e-05, [0.0, 0.5])
    """
    d = s.rotary
    return float(_f(_f(1) / _f(s.base))), (np.arange(0, d, 2, dtype=np.float32) / _f(d)).astype(np.float32)


def llama31_smooth(s: RopeSchedule) -> tuple[np.float32, np.float32]:
    """FlashInfer's host constants of the llama 3.1 blend ``smooth = freq * a + b``: ``a = (float) (L0 / (2 pi
    high - 2 pi low))`` in double, ``b = -1.0f / (high / low - 1.0f)`` in float (``BatchQKApplyLlama31RotaryPosIds``).

    >>> [float(v) for v in llama31_smooth(RopeSchedule(head_dim=8, scaling="llama3", factor=8.0))]  # 8192 / (6 pi), -1/3
    [434.5990905761719, -0.3333333432674408]

    Equal band factors (Llama 4 Scout) divide by zero on the host, as IEEE arithmetic does: ``a = inf``,
    ``b = -inf``.

    >>> [float(v) for v in llama31_smooth(RopeSchedule(head_dim=8, scaling="llama3", factor=16.0,
    ...                                                  high_freq_factor=1.0))]
    [inf, -inf]
    """
    hi, lo = float(_f(s.high_freq_factor)), float(_f(s.low_freq_factor))
    width = 2 * math.pi * hi - 2 * math.pi * lo
    a = _f(float(_f(s.original_max_position_embeddings)) / width) if width else _f(math.inf)
    with np.errstate(divide="ignore"):
        return a, _f(_f(-1) / (_f(_f(hi) / _f(lo)) - _f(1)))


def _rcp_pow(s: RopeSchedule) -> F64:
    """FlashInfer's on-the-fly frequencies: ``powf(fl32(1/base), fl32(2j/d))`` correctly rounded (the fast-math
    ``__powf`` is bounded in :mod:`.cuda`), then ``(1 - sm) * (freq * fl32(1/rope_scale)) + sm * freq`` with
    ``sm = clamp(fma(freq, a, b), 0, 1)`` (:func:`llama31_smooth`; 0 for default and linear, where it is exact),
    the sum fused with the second product (nvcc contracts it; the other contraction is within the bound's
    slack, :func:`.cuda.frequency_bound`)."""
    if s.scaling not in RCP_POW_ROPE_TYPES:
        raise ValueError(f"inv_freq how 'rcp-pow' builds rope types {', '.join(RCP_POW_ROPE_TYPES)}, "
                         f"not {s.scaling!r}")
    base, exps = rcp_pow_inputs(s)
    inv = _pow32(base, exps)
    if s.scaling == "default":
        return inv.astype(np.float64)
    scaled = (inv * (_f(1) / _f(s.factor))).astype(np.float32)
    if s.scaling == "linear":
        return scaled.astype(np.float64)
    a, b = llama31_smooth(s)
    with np.errstate(invalid="ignore"):  # equal band factors: f * inf - inf is NaN
        raw = fma32(inv, a, b)
    # max(0.0f, min(1.0f, smooth)) is fmaxf / fminf, which return the other operand for a NaN: the smooth is 1,
    # so with equal band factors no frequency is divided by the factor (see :func:`flashinfer_mismatch`)
    sm = np.where(np.isnan(raw), _f(1), np.clip(raw, _f(0), _f(1))).astype(np.float32)
    return fma32(sm, inv, ((_f(1) - sm) * scaled).astype(np.float32)).astype(np.float64)


def flashinfer_mismatch(schedule: RopeSchedule) -> str | None:
    """How the schedule FlashInfer's llama 3.1 kernel runs differs from the declared one, or None.

    With equal band factors (Llama 4 Scout) the host constants are ``a = inf``, ``b = -inf``
    (:func:`llama31_smooth`), every smooth ``f a + b`` is NaN and the clamp ``max(0.0f, min(1.0f, NaN))``
    gives 1: no frequency is divided by the factor, the kernel runs plain RoPE.

    >>> scout = RopeSchedule(head_dim=128, base=500000.0, scaling="llama3", factor=16.0, high_freq_factor=1.0)
    >>> flashinfer_mismatch(scout).split(": ")[-1]
    'the 29 frequencies the declared schedule divides by 16 stay undivided'
    >>> flashinfer_mismatch(RopeSchedule(scaling="llama3", factor=8.0)) is None
    True
    """
    s = schedule
    if not s.equal_band_factors:
        return None
    n = int(np.count_nonzero(s.inv_freq() != RopeSchedule(head_dim=s.head_dim, base=s.base,
                                                           rotary_dim=s.rotary_dim).inv_freq()))
    return (f"FlashInfer's llama 3.1 kernel with low_freq_factor = high_freq_factor = {s.low_freq_factor:g}: its "
            "smooth is inf * freq - inf = NaN, which max(0, min(1, NaN)) turns into 1, so it runs plain RoPE "
            f"(base {s.base:g}): the {n} frequencies the declared schedule divides by {s.factor:g} stay undivided")


def _pow64_recip32(s: RopeSchedule) -> F64:
    """TensorRT-LLM's table frequencies (see the module docstring): default, linear and llama3."""
    if s.scaling not in ("default", "linear", "llama3"):
        raise ValueError(f"inv_freq how 'pow64-recip32' builds the default, linear and llama3 schedules, "
                         f"not rope type {s.scaling!r}")
    d = s.rotary
    powers = np.array([float(mpmath_pow(float(s.base), (2 * i) / d)) for i in range(d // 2)], dtype=np.float64)
    scale = _f(1.0 / s.factor) if s.scaling == "linear" else _f(1)
    inv = (scale / powers.astype(np.float32)).astype(np.float32).astype(np.float64)
    if s.scaling != "llama3":
        return inv
    L0, lo, hi, factor = s.original_max_position_embeddings, s.low_freq_factor, s.high_freq_factor, s.factor
    wavelen = 2 * math.pi / inv
    with np.errstate(divide="ignore", invalid="ignore"):  # equal band factors: numpy's inf / NaN, unused (no band)
        smooth = (L0 / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
    out = np.where(wavelen < L0 / hi, inv, np.where(wavelen > L0 / lo, inv / factor, mid))
    return out.astype(np.float32).astype(np.float64)


MLX_LM_ROPE_TYPES: tuple[str, ...] = ("yarn", "longrope", "proportional")
"""The scaled rope types whose ``freqs`` :func:`mlx_lm_inv_freq` builds as mlx-lm does."""


def _pow32(base: float, exps: F32) -> F32:
    """``fl32(base) ** e`` correctly rounded to float32, per float32 exponent (MLX's ``power``, modelled)."""
    b = float(_f(base))
    return np.array([mpmath_pow(b, float(e), "float32") for e in exps], dtype=np.float32)


def mlx_lm_inv_freq(schedule: RopeSchedule) -> F64:
    """The float32 inverse frequencies ``1.0f / freqs`` of mlx-lm's ``freqs`` for a scaled schedule, as float64.

    ml-explore/mlx-lm d78bf58, ``mlx_lm/models/rope_utils.py``, every op in float32 (a Python scalar meets a
    float32 array as a float32 value), ``p = base ** (arange(0, d, 2) / d)`` correctly rounded:

    * ``SuScaledRoPE`` (longrope): ``freqs = long_factor * p``, the long factors at every length;
    * ``YarnRoPE``: ``freqs = (s p * p) / (s p * mask + p * (1 - mask))`` with ``mask = 1 - ramp``, the ramp
      bounds floor / ceil of the correction dims always (``yarn_find_correction_range``);
    * ``ProportionalRoPE``: ``freqs = factor * base ** (arange(0, rotated, 2) / head_dim)``, then infinite
      periods (frequency 0) for the pairs that do not rotate.

    >>> s = RopeSchedule(head_dim=8, rotary_dim=4, scaling="proportional")
    >>> mlx_lm_inv_freq(s).tolist()  # 1 / 10000**(2/8) = 0.1; the two tail pairs do not rotate
    [1.0, 0.10000000149011612, 0.0, 0.0]
    """
    s = schedule
    if s.scaling not in MLX_LM_ROPE_TYPES:
        raise ValueError(f"mlx-lm's freqs are modelled for rope types {', '.join(MLX_LM_ROPE_TYPES)}, "
                         f"not {s.scaling!r}")
    if s.scaling == "proportional":
        d, r = s.head_dim, s.rotary
        p = _pow32(s.base, (np.arange(0, r, 2, dtype=np.float32) / _f(d)).astype(np.float32))
        freqs = (_f(s.factor) * p).astype(np.float32)
        inv = (_f(1) / freqs).astype(np.float32)
        return np.concatenate([inv, np.zeros(d // 2 - r // 2, dtype=np.float32)]).astype(np.float64)
    d = s.rotary
    p = _pow32(s.base, (np.arange(0, d, 2, dtype=np.float32) / _f(d)).astype(np.float32))
    if s.scaling == "longrope":
        freqs = (np.asarray(s.long_factor, dtype=np.float32) * p).astype(np.float32)
    else:
        low, high = yarn_bounds(replace(s, truncate=True))
        ramp = ((np.arange(d // 2, dtype=np.float32) - _f(low)) / _f(high - low)).astype(np.float32)
        mask = (_f(1) - np.clip(ramp, _f(0), _f(1))).astype(np.float32)
        inter = (_f(s.factor) * p).astype(np.float32)
        num = (inter * p).astype(np.float32)
        den = ((inter * mask).astype(np.float32) + (p * (_f(1) - mask)).astype(np.float32)).astype(np.float32)
        freqs = (num / den).astype(np.float32)
    return (_f(1) / freqs).astype(np.float32).astype(np.float64)


def long_factors_mismatch(schedule: RopeSchedule, who: str, when: str | None = None) -> str | None:
    """The note for a stack that runs LongRoPE's long factors at every length (None for other types, or when
    both factor sets are equal): up to L0 the declared schedule uses the short factors.  ``when`` names the
    setting that makes the stack take the long set (``max_model_len``, ``n_ctx``), None if it always does.

    The figures, in float64: the largest relative difference of the two sets' frequencies and the largest
    angle difference at position L0 - 1.
    """
    s = schedule
    if s.scaling != "longrope" or tuple(s.long_factor or ()) == tuple(s.short_factor or ()):
        return None
    L0 = s.original_max_position_embeddings
    short, long = s.inv_freq(None), s.inv_freq(L0 + 1)
    rel = float(np.max(np.abs(long / short - 1)))
    rad = float(np.max(np.abs(long - short))) * (L0 - 1)
    cond = f" ({when} > {L0})" if when else ""
    return (f"{who} uses the long factors at every length{cond}: sequences up to {L0} run other frequencies "
            f"than the short factors they were trained with (up to {rel:.1%} apart, {rad:.3g} rad at position "
            f"{L0 - 1})")


def vllm_dynamic_base(schedule: RopeSchedule) -> float:
    """The base vLLM's ``DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache`` computes, in float64:
    ``base * ((max_len / L0) - (factor - 1)) ** (d / (d - 2))`` with ``max_len = L0 * factor``: the bracket is
    1 (no ``factor *`` in front of ``max_len / L0``, unlike transformers' ``factor * L / L0``), so the plain base.

    >>> vllm_dynamic_base(RopeSchedule(head_dim=128, scaling="dynamic", factor=4.0,
    ...                                original_max_position_embeddings=4096))
    10000.0
    """
    s = schedule
    L0, f, d = s.original_max_position_embeddings, s.factor, s.rotary
    max_len = L0 * f
    return float(s.base * ((max_len / L0) - (f - 1)) ** (d / (d - 2)))


def vllm_overrides(schedule: RopeSchedule) -> tuple[tuple[str, object], ...]:
    """The schedule fields vLLM computes its frequencies with in place of the declared ones.

    longrope: ``short_factor := long_factor`` when ``max_model_len`` (by default the config's
    ``max_position_embeddings``, i.e. ``factor > 1``) exceeds L0 (``Phi3LongRoPEScaledRotaryEmbedding``:
    ``use_long_rope``); dynamic: the default schedule with :func:`vllm_dynamic_base`.
    """
    s = schedule
    if s.scaling == "longrope" and s.factor > 1:
        return (("short_factor", s.long_factor),)
    if s.scaling == "dynamic":
        return (("scaling", "default"), ("base", vllm_dynamic_base(s)))
    return ()


def vllm_mismatch(schedule: RopeSchedule) -> str | None:
    """How the schedule vLLM runs differs from the declared one (longrope, dynamic), or None.

    >>> dyn = RopeSchedule(head_dim=128, scaling="dynamic", factor=2.0, original_max_position_embeddings=4096)
    >>> vllm_mismatch(dyn)[:68]
    "vLLM's DynamicNTKScalingRotaryEmbedding keeps the plain base 10000 a"
    """
    s = schedule
    if s.scaling == "longrope" and s.factor > 1:
        return long_factors_mismatch(s, "vLLM", "max_model_len")
    if s.scaling != "dynamic":
        return None
    L0, f, d = s.original_max_position_embeddings, s.factor, s.rotary
    top = int(L0 * f)
    grown = s.base * (f * top / L0 - (f - 1)) ** (d / (d - 2))
    return (f"vLLM's DynamicNTKScalingRotaryEmbedding keeps the plain base {vllm_dynamic_base(s):g} at every "
            f"length (its NTK bracket max_len / L0 - (factor - 1) is 1): the declared schedule up to L0 = {L0}, "
            f"but above it transformers grows the base with the length (to {grown:.6g} at {top}, the lowest "
            f"frequency {f * f - f + 1:g}x lower); vLLM's cache ends at {top} positions")


def mlx_mismatch(schedule: RopeSchedule) -> str | None:
    """How the schedule mlx-lm runs differs from the declared one: YaRN's ramp bounds always rounded
    (``yarn_find_correction_range``: math.floor / math.ceil), LongRoPE's long factors at every length
    (``SuScaledRoPE``); None otherwise."""
    if schedule.scaling == "yarn":
        return rounded_ramp_mismatch(schedule)
    return long_factors_mismatch(schedule, "mlx-lm's SuScaledRoPE")


def mpmath_pow(x: float, y: float, fmt: str = "float64") -> float:
    """``x ** y`` correctly rounded to ``fmt`` (a correctly rounded libm's ``pow`` / ``powf`` stands in).

    >>> mpmath_pow(10000.0, 0.5), mpmath_pow(10000.0, -0.25, "float32")
    (100.0, 0.10000000149011612)
    """
    import mpmath

    with mpmath.workprec(160):
        return round_mp(mpmath.mpf(x) ** mpmath.mpf(y), get_format(fmt))


@dataclass(frozen=True)
class AngleMaker:
    """A stack's float32 angles for pair i at position p, where they are not ``p * inv_freq``: see the module
    docstring.

    ggml: ``theta_scale`` is ``powf(base, -2/d)``; ``freq_factors`` the
    divisors (or None); ``freq_scale`` the linear factor; ``mix`` YaRN's
    per-pair ramp mix (None without YaRN); ``power`` chooses
    ``p * powf(ts, i)`` (CUDA) over repeated multiplication (CPU).
    ``timescale`` (MaxText): the float32 timescales; when given the angle is
    ``fl32(p / timescale_i)`` and the ggml fields are unused.
    ``position_scale`` and ``inv_freq`` (``scaled-product``: MLX's and
    TransformerEngine's linear scaling): the angle is
    ``fl32(fl32(p * position_scale) * inv_freq_i)``.
    """

    theta_scale: np.float32
    nf: int
    freq_factors: F32 | None
    freq_scale: np.float32
    mix: F32 | None
    power: bool
    timescale: F32 | None = None
    position_scale: np.float32 | None = None
    inv_freq: F32 | None = None
    columns: tuple[int, ...] | None = None

    @property
    def width(self) -> int:
        """The pairs it writes: ``nf``, or the ``columns`` chosen (a frequency subset: M-RoPE's sections)."""
        return self.nf if self.columns is None else len(self.columns)

    def angles_into(self, pos: F64, out: F64) -> None:
        """Write the float32 angles of float32 positions ``pos`` (n,) into ``out`` (n, width), as float64: every
        pair's, or those of ``columns`` (each still made as the stack makes it among all ``nf``: ggml's chain
        of products runs through the pairs before it)."""
        if self.columns is not None:
            full = np.empty((pos.size, self.nf))
            replace(self, columns=None).angles_into(pos, full)
            out[:] = full[:, list(self.columns)]
            return
        p = pos.astype(np.float32)
        if self.timescale is not None:  # one float32 division (IEEE: correctly rounded)
            out[:] = np.divide(p[:, None], self.timescale[None, :], dtype=np.float32)
            return
        if self.position_scale is not None and self.inv_freq is not None:  # two float32 products
            ps = np.multiply(p, self.position_scale, dtype=np.float32)
            out[:] = np.multiply(ps[:, None], self.inv_freq[None, :], dtype=np.float32)
            return
        if self.power:
            powers = round_to(np.power(float(self.theta_scale), np.arange(self.nf, dtype=np.float64)), "float32")
            cols = (p[:, None] * np.asarray(powers, dtype=np.float32)[None, :]).astype(np.float32)
            out[:] = self._post(cols)
            return
        theta = p.copy()
        block = np.empty((p.size, self.nf), dtype=np.float32)
        for i in range(self.nf):
            block[:, i] = theta
            np.multiply(theta, self.theta_scale, out=theta)
        out[:] = self._post(block)

    def _post(self, t: F32) -> F32:
        """``/ freq_factor``, ``* freq_scale`` and YaRN's mix, in float32 (rope_yarn)."""
        if self.freq_factors is not None:
            t = (t / self.freq_factors[None, :]).astype(np.float32)
        interp = t if self.freq_scale == 1 else (self.freq_scale * t).astype(np.float32)
        if self.mix is None:
            return interp
        second = (t * self.mix[None, :]).astype(np.float32)
        return fma32(interp, (_f(1) - self.mix)[None, :], second)


def _corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """``ggml_rope_yarn_corr_dims`` in float32: floor/ceil of ``d ln(L0 / (2 pi r)) / (2 ln base)``, clamped."""
    def dim(r: float) -> np.float32:
        denom = _f(_f(r) * _f(2)) * _f(math.pi)
        num = _f(n_dims) * _cr32(math.log(float(_f(_f(n_ctx_orig) / denom))))
        return _f(num / (_f(2) * _cr32(math.log(float(_f(base))))))

    return float(max(_f(0), _f(math.floor(dim(beta_fast))))), float(min(_f(n_dims - 1), _f(math.ceil(dim(beta_slow)))))


def _llama3_factors(s: RopeSchedule) -> F32:
    """llama.cpp's ``rope_freqs`` for a llama3 schedule, as its converter computes them in torch float32.

    convert_hf_to_gguf (``LlamaModel.generate_extra_tensors``): ``freq = 1 / base**(2i/d)``; ``wavelen =
    2 pi / freq``; factor 1 below ``L0/high``, ``factor`` above ``L0/low``, else ``1 / ((1 - sm) / factor + sm)``
    with ``sm = (L0 / wavelen - low) / (high - low)``; each operation rounded to float32 (pow correctly rounded).
    """
    d = s.rotary
    expo = (np.arange(0, d, 2, dtype=np.float32) / _f(d)).astype(np.float32)
    powr = np.asarray(round_to(np.power(float(_f(s.base)), expo.astype(np.float64)), "float32"), dtype=np.float32)
    freq = (_f(1) / powr).astype(np.float32)
    wavelen = ((_f(1) / freq).astype(np.float32) * _f(2 * math.pi)).astype(np.float32)
    L0, lo, factor = _f(s.original_max_position_embeddings), _f(s.low_freq_factor), _f(s.factor)
    with np.errstate(divide="ignore", invalid="ignore"):  # equal band factors: the converter's else branch (the
        # only one that divides by high - low) is never taken, except for a wavelength exactly L0 / low (refused)
        sm = (((L0 * (_f(1) / wavelen)).astype(np.float32) - lo) / _f(float(s.high_freq_factor - s.low_freq_factor)))
        sm = sm.astype(np.float32)
        mid = (_f(1) / ((((_f(1) - sm) / factor).astype(np.float32) + sm).astype(np.float32))).astype(np.float32)
    out = np.where(wavelen < _f(float(s.original_max_position_embeddings / s.high_freq_factor)), _f(1),
                   np.where(wavelen > _f(float(s.original_max_position_embeddings / s.low_freq_factor)), factor, mid))
    return out.astype(np.float32)


GGML_ROPE_TYPES: tuple[str, ...] = ("default", "linear", "yarn", "llama3", "longrope")


def ggml_mismatch(schedule: RopeSchedule) -> str | None:
    """How the schedule llama.cpp (ggml) runs differs from the declared one, in words; None if it runs it.

    ggml always rounds YaRN's ramp bounds to whole dims (``ggml_rope_yarn_corr_dims``: floor / ceil in
    float32); a schedule that declares ``truncate=False`` (gpt-oss) keeps them fractional, so 9 of gpt-oss'
    32 frequencies differ (vLLM#27722 found the same in vLLM, fixed there by vLLM#28244).
    LongRoPE: llama.cpp takes the long factors whenever the context per sequence exceeds L0, by default
    (the training context) at every length: see :func:`long_factors_mismatch`.

    >>> oss = RopeSchedule(head_dim=64, base=150000.0, scaling="yarn", factor=32.0, beta_fast=32.0,
    ...                    beta_slow=1.0, truncate=False, original_max_position_embeddings=4096)
    >>> ggml_mismatch(oss)
    "rounds YaRN's ramp bounds to whole dims (8, 18); the config declares 8.0928, 17.3980 (truncate=false)"
    """
    s = schedule
    if s.scaling == "longrope" and s.factor > 1:
        return long_factors_mismatch(s, "llama.cpp", "n_ctx")
    if s.scaling != "yarn" or s.truncate:
        return None
    return _ramp_note(s, *_corr_dims(s.rotary, s.original_max_position_embeddings, s.base, s.beta_fast, s.beta_slow))


def rounded_ramp_mismatch(schedule: RopeSchedule) -> str | None:
    """:func:`ggml_mismatch` for code that rounds YaRN's ramp bounds in float64 (``math.floor`` / ``math.ceil``
    of the correction dims, whatever ``truncate`` says): vLLM before vllm-project/vllm#28244, TensorRT-LLM's
    ``create_sinusoidal_positions_yarn``.

    >>> oss = RopeSchedule(head_dim=64, base=150000.0, scaling="yarn", factor=32.0, beta_fast=32.0,
    ...                    beta_slow=1.0, truncate=False, original_max_position_embeddings=4096)
    >>> rounded_ramp_mismatch(oss) == ggml_mismatch(oss)
    True
    """
    s = schedule
    if s.scaling != "yarn" or s.truncate:
        return None
    return _ramp_note(s, *yarn_bounds(replace(s, truncate=True)))


def _ramp_note(s: RopeSchedule, lo: float, hi: float) -> str:
    dlo, dhi = yarn_bounds(s)
    return (f"rounds YaRN's ramp bounds to whole dims ({lo:g}, {hi:g}); the config declares {dlo:.4f}, "
            f"{dhi:.4f} (truncate=false)")


TIMESCALE_ROPE_TYPES: tuple[str, ...] = ("default", "linear")
"""The rope types MaxText's ``RotaryEmbedding`` runs (linear: ``rope_linear_scaling_factor``)."""


def timescales(schedule: RopeSchedule) -> F32:
    """MaxText's float32 timescales ``fl32(fl32(base) ** fl32(2i / d))`` (times the linear factor in float32).

    ``min_timescale`` is 1 (MaxText's ``rope_min_timescale``), so ``min * power`` is exact; the power is
    taken correctly rounded (XLA's float32 pow is not modelled).

    >>> timescales(RopeSchedule(head_dim=4, base=10000.0)).tolist()  # 1, 1e4 ** 0.5
    [1.0, 100.0]
    """
    s = schedule
    if s.scaling not in TIMESCALE_ROPE_TYPES:
        raise ValueError(f"MaxText's RotaryEmbedding does not implement rope type {s.scaling!r}; "
                         f"it implements {', '.join(TIMESCALE_ROPE_TYPES)}")
    d = s.rotary
    fraction = (np.arange(0, d, 2, dtype=np.float32) / _f(d)).astype(np.float32)
    # correctly rounded to float32 at once (numpy's float64 power differs between CPUs, and rounding it again
    # to float32 could round twice)
    ts = _pow32(s.base, fraction)
    if s.scaling == "linear":
        ts = (ts * _f(s.factor)).astype(np.float32)
    return ts


def angle_maker(how: str, schedule: RopeSchedule) -> AngleMaker:
    """The angle computation of a non-product ``how`` (:data:`ANGLE_HOWS`) for a schedule.

    ``repeated-product`` / ``power-product`` (ggml) refuse, naming the rope
    type, what ggml does not compute this way (dynamic NTK, proportional).
    LongRoPE divides theta by the long factors (the short ones when
    ``factor <= 1``), as llama.cpp does with its default context.  YaRN's ramp bounds are always rounded to whole dims
    (floor/ceil, as ``ggml_rope_yarn_corr_dims`` does), whatever the
    schedule's ``truncate`` says: a schedule that declares ``truncate=False``
    (gpt-oss) runs with other frequencies here, which the audit measures
    against the declared ones (see :func:`ggml_mismatch`).
    ``position-over-timescale`` (MaxText): :func:`timescales`.

    >>> m = angle_maker("repeated-product", RopeSchedule(head_dim=4, base=10000.0))
    >>> out = np.empty((1, 2)); m.angles_into(np.array([3.0]), out); out.tolist()  # 3 * fl32(1e4**-0.5)
    [[3.0, 0.029999999329447746]]
    >>> m = angle_maker("position-over-timescale", RopeSchedule(head_dim=4, base=10000.0))
    >>> m.angles_into(np.array([3.0]), out); out.tolist()  # 3 / 100, one float32 division
    [[3.0, 0.029999999329447746]]
    """
    if how not in ANGLE_HOWS[1:]:
        raise ValueError(f"unknown angle how {how!r}; valid: {', '.join(ANGLE_HOWS[1:])}")
    if how == "scaled-product":
        raise ValueError("the scaled-product angle needs the recipe's own inverse frequencies: "
                         "stored_inv_freq(recipe, schedule) builds it (scaled_product_maker)")
    if how == "position-over-timescale":
        ts = timescales(schedule)
        return AngleMaker(_f(1), ts.size, None, _f(1), None, False, timescale=ts)
    return _ggml_maker(how, schedule)


def scaled_product_maker(inv_freq: npt.ArrayLike, schedule: RopeSchedule) -> AngleMaker:
    """Linear scaling as MLX (``mx.fast.rope``'s ``scale``: ``L = scale * float(pos)``, then ``L * inv_freq``;
    mlx-lm passes ``scale = 1 / factor``) and TransformerEngine (``seq *= 1 / factor`` on float32 positions,
    then the product) compute it: the positions scaled by ``fl32(1 / factor)`` in float32, then multiplied by
    the unscaled inverse frequencies ``inv_freq`` (float32).

    >>> m = scaled_product_maker([1.0, 0.01], RopeSchedule(head_dim=4, scaling="linear", factor=2.5))
    >>> out = np.empty((1, 2)); m.angles_into(np.array([3.0]), out); out.tolist()  # fl32(3 * fl32(0.4))
    [[1.2000000476837158, 0.012000000104308128]]
    """
    inv = np.asarray(inv_freq, dtype=np.float64).astype(np.float32)
    scale = _f(1.0 / schedule.factor) if schedule.scaling == "linear" else _f(1)
    return AngleMaker(_f(1), inv.size, None, _f(1), None, False, position_scale=scale, inv_freq=inv)


def theta_scale(s: RopeSchedule) -> np.float32:
    """ggml's ``theta_scale = powf(freq_base, -2.0f / n_dims)`` (host float32, correctly rounded).

    >>> float(theta_scale(RopeSchedule(head_dim=4, base=10000.0)))  # 1e4 ** -0.5
    0.009999999776482582
    """
    return _cr32(float(_f(s.base)) ** float(_f(-2.0) / _f(s.rotary)))


def _ggml_maker(how: str, schedule: RopeSchedule) -> AngleMaker:
    """ggml's angle computation (``repeated-product`` or ``power-product``) for a schedule."""
    s = schedule
    if s.scaling not in GGML_ROPE_TYPES:
        raise ValueError(f"llama.cpp (ggml) does not implement rope type {s.scaling!r}; "
                         f"it implements {', '.join(GGML_ROPE_TYPES)}")
    d = s.rotary
    ts = theta_scale(s)
    factors = _llama3_factors(s) if s.scaling == "llama3" else None
    if s.scaling == "longrope":  # the GGUF's rope_factors_long (short: n_ctx <= L0, i.e. factor <= 1)
        factors = np.asarray(s.long_factor if s.factor > 1 else s.short_factor, dtype=np.float32)
    fs = _f(1.0 / s.factor) if s.scaling in ("linear", "yarn") else _f(1)
    mix = None
    if s.scaling == "yarn":
        lo, hi = _corr_dims(d, s.original_max_position_embeddings, s.base, s.beta_fast, s.beta_slow)
        i = np.arange(d // 2, dtype=np.float32)
        y = ((i - _f(lo)) / _f(max(_f(0.001), _f(_f(hi) - _f(lo))))).astype(np.float32)
        mix = (_f(1) - np.minimum(_f(1), np.maximum(_f(0), y))).astype(np.float32)
    return AngleMaker(ts, d // 2, factors, fs, mix, how == "power-product")
