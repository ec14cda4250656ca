"""A numpy model of ggml's rope arithmetic, operation by operation, in float32.

Written from ggml's published source (ggml-org/ggml ``src/ggml-cpu/ops.cpp``:
``ggml_compute_forward_rope_flt``, ``ggml_rope_cache_init``, ``rope_yarn``,
``rope_yarn_ramp``; ``src/ggml.c``: ``ggml_rope_yarn_corr_dims``; identical in
llama.cpp@0c1e57098, which llama-cpp-python 0.3.36 vendors); the formulas and
the format of every operation are in ``/work/notes/stacks-llamacpp.md``.
The code is not copied: each C expression is re-stated as numpy float32
operations, which are IEEE-754 correctly rounded like the C ones.

Transcendentals are modelled correctly rounded: ``powf``/``logf``/``cosf``/
``sinf`` as the float64 function of the float32 argument, rounded to float32.
The real kernel calls the C library's functions, which are faithful (glibc's
are within ~0.6 ulp), so the model's cos/sin may differ from the kernel's by
one float32 ulp; the angles (repeated float32 multiplications and divisions)
are reproduced bit for bit.

The GPU paths are modelled too, with the same correctly rounded stand-ins for
their fast-math intrinsics (CUDA builds with ``-use_fast_math``; Metal's fast
math is on by default): :func:`theta_cuda` (``p * powf(theta_scale, i)``,
``src/ggml-cuda/rope.cu``) and :func:`theta_metal` (``p * pow(freq_base,
(-1/n_dims) * 2i)``, ``src/ggml-metal/ggml-metal.metal``).

How llama.cpp feeds the op is modelled here too: :func:`converter_llama3_factors` (the ``rope_freqs``
tensor of a Llama 3 GGUF, computed with torch as llama.cpp's converter computes it) and
:func:`llama_cpp_attn_factor` (the context's ``attn_factor`` for YaRN).

Used by the tests only (``tests/test_stack_ggml.py``, ``tests/test_stacks.py``, ``tests/test_gguf.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "F32",
    "converter_llama3_factors",
    "corr_dims",
    "cpu_rope_cache",
    "llama_cpp_attn_factor",
    "powf",
    "theta_cpu",
    "theta_cuda",
    "theta_metal",
    "theta_scale",
    "ulp_diff",
    "yarn",
]

F32 = np.float32
A32 = npt.NDArray[np.float32]


def _f(x: float | npt.ArrayLike) -> A32:
    """float64 value(s) rounded to float32 (round to nearest even)."""
    return np.asarray(x, dtype=np.float64).astype(np.float32)


def powf(x: float | A32, y: float | A32) -> A32:
    """``powf`` modelled correctly rounded: float64 pow of the float32 operands, rounded to float32."""
    return _f(np.power(np.float64(F32(x)) if np.isscalar(x) else np.asarray(x, np.float64),
                       np.asarray(y, dtype=np.float32).astype(np.float64)))


def _logf(x: float | A32) -> A32:
    return _f(np.log(np.asarray(x, dtype=np.float32).astype(np.float64)))


def theta_scale(freq_base: float, n_dims: int) -> np.float32:
    """``powf(freq_base, -2.0f/n_dims)``: the exponent is a float32 division, then one powf."""
    return F32(powf(F32(freq_base), F32(-2.0) / F32(n_dims)))


def theta_cpu(positions: npt.ArrayLike, n_dims: int, freq_base: float) -> A32:
    """ggml CPU: ``theta = (float) p``, then ``theta *= theta_scale`` once per pair (float32), [n, n_dims/2]."""
    p = np.asarray(positions, dtype=np.int64).astype(np.float32)  # int64 -> float: exact below 2**24
    ts = theta_scale(freq_base, n_dims)
    out = np.empty((p.size, n_dims // 2), dtype=np.float32)
    theta = p.copy()
    for i in range(n_dims // 2):
        out[:, i] = theta
        theta = theta * ts  # float32 * float32, rounded to float32
    return out


def theta_cuda(positions: npt.ArrayLike, n_dims: int, freq_base: float) -> A32:
    """ggml CUDA: ``pos[i2] * powf(theta_scale, iw/2.0f)``: one powf per pair, one float32 product."""
    p = np.asarray(positions, dtype=np.int64).astype(np.float32)
    i = np.arange(n_dims // 2, dtype=np.float32)  # iw/2.0f = i exactly
    return (p[:, None] * powf(theta_scale(freq_base, n_dims), i)[None, :]).astype(np.float32)


def theta_metal(positions: npt.ArrayLike, n_dims: int, freq_base: float) -> A32:
    """ggml Metal: ``theta_base * pow(freq_base, inv_ndims*iw)`` with ``inv_ndims = -1.f/n_dims``, iw = 2i."""
    p = np.asarray(positions, dtype=np.int64).astype(np.float32)
    inv = F32(-1.0) / F32(n_dims)
    e = (inv * np.arange(0, n_dims, 2, dtype=np.float32)).astype(np.float32)
    return (p[:, None] * powf(F32(freq_base), e)[None, :]).astype(np.float32)


def corr_dims(n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float,
              beta_slow: float) -> tuple[np.float32, np.float32]:
    """``ggml_rope_yarn_corr_dims``: [floor(dim(beta_fast)) clamped >= 0, ceil(dim(beta_slow)) clamped <= n_dims-1].

    ``dim(r) = n_dims * logf(n_ctx_orig / (r * 2 * (float)M_PI)) / (2 * logf(base))``, all float32.
    """
    def dim(n_rot: float) -> np.float32:
        denom = F32(F32(n_rot) * F32(2)) * F32(math.pi)
        ratio = F32(F32(n_ctx_orig) / denom) if n_ctx_orig else F32(0)
        with np.errstate(divide="ignore"):
            num = F32(F32(n_dims) * _logf(ratio))
        return F32(num / F32(F32(2) * _logf(F32(freq_base))))

    start, end = F32(np.floor(dim(beta_fast))), F32(np.ceil(dim(beta_slow)))
    return F32(max(F32(0), start)), F32(min(F32(n_dims - 1), end))


def yarn(theta_extrap: A32, freq_scale: float, dims: tuple[np.float32, np.float32], ext_factor: float,
         mscale: float, fma: bool = False) -> tuple[A32, np.float32]:
    """``rope_yarn``'s angle and magnitude for pairs i (columns): returns (theta, mscale).

    ``theta_interp = freq_scale * theta_extrap``; with ``ext_factor != 0``:
    ``ramp_mix = ramp(i) * ext_factor``, ``theta = theta_interp * (1 - ramp_mix)
    + theta_extrap * ramp_mix`` and ``mscale *= 1 + 0.1f * logf(1/freq_scale)``.
    ``fma=True`` models a compiler that contracts ``a*b + c`` into one fused
    multiply-add (GCC's default ``-ffp-contract=fast`` on FMA hardware): the
    first product is fused with the sum, the second is rounded.
    """
    fs = F32(freq_scale)
    interp = (fs * theta_extrap).astype(np.float32)
    ms = F32(mscale)
    if F32(ext_factor) == 0:
        return interp, ms
    i = np.arange(theta_extrap.shape[-1], dtype=np.int64)  # i0/2, integer division of i0 = 2i
    y = ((i.astype(np.float32) - dims[0]) / F32(max(F32(0.001), F32(dims[1] - dims[0])))).astype(np.float32)
    ramp = (F32(1) - np.minimum(F32(1), np.maximum(F32(0), y))).astype(np.float32)
    mix = (ramp * F32(ext_factor)).astype(np.float32)
    one_minus = (F32(1) - mix).astype(np.float32)
    second = (theta_extrap * mix).astype(np.float32)
    if fma:
        theta = _f(interp.astype(np.float64) * one_minus.astype(np.float64) + second.astype(np.float64))
        grow = _f(np.float64(F32(0.1)) * np.float64(_logf(F32(1) / fs)) + 1.0)
    else:
        theta = ((interp * one_minus).astype(np.float32) + second).astype(np.float32)
        grow = F32(F32(1) + F32(F32(0.1) * _logf(F32(1) / fs)))
    return theta, F32(ms * F32(grow))


def cpu_rope_cache(positions: npt.ArrayLike, n_dims: int, freq_base: float, freq_scale: float = 1.0,
                   ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                   beta_slow: float = 1.0, n_ctx_orig: int = 0, freq_factors: Sequence[float] | None = None,
                   dtype: str = "f32", fma: bool = False) -> tuple[A32, A32, A32]:
    """ggml CPU's cos/sin cache for the positions: (cos, sin, theta), [n, n_dims/2] float32 (cos/sin float16 for f16).

    theta: :func:`theta_cpu`, divided by ``freq_factors[i]`` (float32 division),
    then :func:`yarn`; ``cos = cosf(theta) * mscale`` in float32 (cosf modelled
    correctly rounded); on f16 data the rotated pair ``(1*c - 0*s, 1*s + 0*c)``
    is stored rounded to float16.
    """
    theta = theta_cpu(positions, n_dims, freq_base)
    if freq_factors is not None:
        theta = (theta / np.asarray(freq_factors, dtype=np.float32)[None, :]).astype(np.float32)
    dims = corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
    theta, ms = yarn(theta, freq_scale, dims, ext_factor, attn_factor, fma=fma)
    t64 = theta.astype(np.float64)
    cos = (_f(np.cos(t64)) * ms).astype(np.float32)
    sin = (_f(np.sin(t64)) * ms).astype(np.float32)
    if dtype == "f16":
        return cos.astype(np.float16), sin.astype(np.float16), theta
    if dtype != "f32":
        raise ValueError(f"dtype {dtype!r} must be 'f32' or 'f16'")
    return cos, sin, theta


def ulp_diff(a: npt.ArrayLike, b: npt.ArrayLike, dtype: str = "f32") -> npt.NDArray[np.int64]:
    """|a - b| in units in the last place of float32 (``"f32"``) or float16 (``"f16"``), by bit pattern.

    Both are rounded to the format first (exact for values already in it); the
    bit patterns are mapped to a monotone integer line, so the difference
    counts the representable values between them (+0 and -0 are one apart).
    """
    ft, it = (np.float32, np.int32) if dtype == "f32" else (np.float16, np.int16)
    bits = 8 * np.dtype(ft).itemsize

    def line(x: npt.ArrayLike) -> npt.NDArray[np.int64]:
        v = np.asarray(x, dtype=np.float64).astype(ft).view(it).astype(np.int64)
        return np.where(v < 0, -(v & ((1 << (bits - 1)) - 1)) - 1, v)

    return np.abs(line(a) - line(b))


def llama_cpp_attn_factor(factor: float) -> float:
    """llama_context's ``attn_factor`` for YaRN without a log multiplier: ``get_mscale(s) / (1 + 0.1 logf(s))``
    in float32 (``logf`` modelled correctly rounded), ``get_mscale(s) = 0.1f * logf(s) + 1``: the kernel
    multiplies its own ``1 + 0.1 logf(1/freq_scale)`` back, so cos/sin carry YaRN's ``0.1 ln s + 1``."""
    g = F32(F32(F32(0.1) * _logf(F32(factor))) + F32(1))
    return float(F32(g * F32(F32(1) / g)))


def converter_llama3_factors(cfg: Mapping[str, Any]) -> npt.NDArray[np.float32]:
    """``rope_freqs`` as llama.cpp's converter computes them from a config.json dict, in torch float32 as there.

    llama.cpp@0c1e57098 ``conversion/llama.py`` ``LlamaModel.generate_extra_tensors``, re-stated with the
    same torch operations: ``freqs = 1 / base ** (arange(0, d, 2) / d)``; per pair, ``wavelen = 2 pi / freq``
    (a float32 reciprocal times 2 pi rounded to float32); 1 below ``old_len / high``, ``factor`` above
    ``old_len / low``, else ``1 / ((1 - s) / factor + s)`` with ``s = (old_len / wavelen - low) / (high -
    low)``; stored as float32.  torch is imported here (callers skip without it).
    """
    import torch

    rs = cfg["rope_scaling"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    freqs = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    out: list[Any] = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_len / high:
            out.append(1)
        elif wavelen > old_len / low:
            out.append(factor)
        else:
            s = (old_len / wavelen - low) / (high - low)
            out.append(1 / ((1 - s) / factor + s))
    return torch.tensor(out, dtype=torch.float32).numpy()
