"""ggml's real rope op (llama.cpp's CPU kernel, via ggml-python) as the referee for the llama.cpp stack.

(a) the kernel at small positions against cos/sin of the exact (float64) angle, within a bound derived from
    its float32 arithmetic; (b) the numpy model (tests/referees/_ggml_model.py) against the kernel
    at 32K positions: angles bit for bit (shown through the outputs, and directly through the C library's own
    cosf/sinf), outputs within one float32 ulp (the model's cos/sin are correctly rounded, the C library's are
    faithful), within one float16 ulp for float16 data.  Figures measured on this machine are in
    notes/stacks-llamacpp.md.  The package's own stack (precision_audit.rope.stack("llama.cpp-cpu")) is refereed
    against the same kernel in tests/test_stacks.py.  ggml-python missing: skipped with a reason, except in CI,
    which installs it (referees.need).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from referees import _ggml_model as model  # tests/ helper: the referees (kernels and models)
from referees import need
from referees._ggml import ggml_rope_angles, libm_cosf_sinf

from precision_audit.rope.schedules import RopeSchedule

need("ggml")

U32 = 2.0**-24  # float32 unit roundoff
L = 32768
D = 128


def _llama3_factors(base: float, d: int) -> np.ndarray:
    """Llama 3's rope_freqs (factor 8, bands 1..4 over 8192), float64 formula rounded to float32."""
    wl = 2 * np.pi * base ** (np.arange(0, d, 2) / d)
    s = (8192 / wl - 1) / 3
    return np.where(wl < 2048, 1.0, np.where(wl > 8192, 8.0, 1 / ((1 - s) / 8 + s))).astype(np.float32)


def _libm() -> tuple[Any, ...]:
    try:
        return libm_cosf_sinf()
    except OSError as e:
        pytest.skip(f"no C math library to call: {e}")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("mode", ["neox", "normal"])
def test_kernel_small_positions_vs_exact_angle(mode: str, dtype: str) -> None:
    """Positions 0..63: theta_i = p * ts**i with ts = powf(base, -2/d) (faithful: rel. error <= 2u, u = 2**-24)
    and i float32 products (rel. error <= u each): |theta_i - exact| <= theta_i * (3i + 2) u; cosf/sinf add
    <= 1 ulp (<= 2u for |value| <= 1); float16 storage adds half an ulp of float16 (<= 2**-12)."""
    pos = np.arange(64)
    c, s = ggml_rope_angles(pos, D, 10000.0, mode=mode, dtype=dtype)
    exact = pos[:, None] * 10000.0 ** (-np.arange(0, D, 2) / D)[None, :]
    i = np.arange(D // 2)[None, :]
    bound = exact * (3 * i + 2) * U32 + 2 * U32 + (2.0**-12 if dtype == "f16" else 0.0)
    assert (np.abs(c - np.cos(exact)) <= bound).all()
    assert (np.abs(s - np.sin(exact)) <= bound).all()
    assert c[0].tolist() == [1.0] * (D // 2) and s[0].tolist() == [0.0] * (D // 2)  # position 0: no rotation


def test_pair_layouts_agree() -> None:
    """NEOX and normal layouts pair different elements, with the same angle per pair."""
    pos = np.arange(0, L, 97)
    assert all((a == b).all() for a, b in zip(ggml_rope_angles(pos, D, 5e5, mode="neox"),
                                               ggml_rope_angles(pos, D, 5e5, mode="normal")))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("factors", [False, True], ids=["plain", "rope_freqs"])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_model_reproduces_kernel(base: float, factors: bool, dtype: str) -> None:
    """32K positions, head dim 128: outputs within 1 ulp of the format, angles bit for bit.

    Where a one-ulp change of the angle would move cos or sin by more than 4 float32 ulps
    (|sin theta| ulp(theta) > 2**-22, most pairs of large positions), agreement within 1 ulp can only
    come from the same angle; the direct check is test_angles_bit_for_bit_through_libm.
    """
    pos = np.arange(L)
    ff = _llama3_factors(base, D) if factors else None
    kc, ks = ggml_rope_angles(pos, D, base, freq_factors=ff, dtype=dtype)
    mc, ms, theta = model.cpu_rope_cache(pos, D, base, freq_factors=ff, dtype=dtype)
    assert model.ulp_diff(kc, mc, dtype).max() <= 1
    assert model.ulp_diff(ks, ms, dtype).max() <= 1
    if dtype == "f32":
        sensitive = np.abs(np.sin(theta.astype(np.float64))) * np.spacing(theta) > 2.0**-22
        assert sensitive.sum() > pos.size * 10  # the check has teeth: millions of angle-sensitive values


@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_angles_bit_for_bit_through_libm(base: float) -> None:
    """The C library's own cosf/sinf of the model's float32 angles equal the kernel's outputs bit for bit
    (ggml calls them, one float32 argument each): the angles are the same float32 numbers."""
    cosf, sinf = _libm()
    pos = np.arange(0, L, 61)
    ff = _llama3_factors(base, D)
    kc, ks = ggml_rope_angles(pos, D, base, freq_factors=ff)
    _, _, theta = model.cpu_rope_cache(pos, D, base, freq_factors=ff)
    assert (cosf(theta) == kc).all()
    assert (sinf(theta) == ks).all()


YARN = [  # (base, factor, n_ctx_orig, head dim): Qwen2.5-style and gpt-oss-style YaRN
    (1e6, 4.0, 32768, 128),
    (150000.0, 32.0, 4096, 64),
]


@pytest.mark.parametrize(("base", "factor", "orig", "d"), YARN)
def test_yarn_model_reproduces_kernel(base: float, factor: float, orig: int, d: int) -> None:
    """YaRN ramp and mscale: the kernel matches the model with or without a fused multiply-add in
    theta_interp * (1 - mix) + theta_extrap * mix (the compiler decides; GCC fuses on FMA hardware), to
    2 ulps (cosf's 1 ulp times an mscale in [1, 2), rounded), and through libm bit for bit."""
    pos = np.arange(0, 4 * L, 7)
    fs = float(np.float32(1) / np.float32(factor))
    kw: dict[str, Any] = dict(freq_scale=fs, ext_factor=1.0, attn_factor=model.llama_cpp_attn_factor(factor),
                              n_ctx_orig=orig)
    kc, ks = ggml_rope_angles(pos, d, base, **kw)
    best = []
    for fma in (False, True):
        mc, ms, _ = model.cpu_rope_cache(pos, d, base, fma=fma, **kw)
        best.append(max(model.ulp_diff(kc, mc).max(), model.ulp_diff(ks, ms).max()))
    assert min(best) <= 2
    fma = bool(np.argmin(best))
    cosf, _ = _libm()
    sub = slice(None, None, 37)
    theta, mscale = model.yarn(model.theta_cpu(pos[sub], d, base), fs,
                               model.corr_dims(d, orig, base, 32.0, 1.0), 1.0, kw["attn_factor"], fma=fma)
    assert ((cosf(theta) * mscale).astype(np.float32) == kc[sub]).all()


def test_kernel_with_converter_factors_follows_llama3_schedule() -> None:
    """ggml with Llama 3.1's rope_freqs rotates by p * theta_scale**i / ff_i, which is transformers' llama3
    inv_freq (the schedule's float64 reference) up to float32 rounding: positions 0..63, bound as above plus
    the factors' own float32 rounding (u relative)."""
    pos = np.arange(64)
    ff = _llama3_factors(500000.0, D)
    c, s = ggml_rope_angles(pos, D, 500000.0, freq_factors=ff)
    exact = pos[:, None] * RopeSchedule(head_dim=D, base=500000.0, scaling="llama3", factor=8.0).inv_freq()[None, :]
    i = np.arange(D // 2)[None, :]
    bound = exact * (3 * i + 4) * U32 + 2 * U32
    assert (np.abs(c - np.cos(exact)) <= bound).all() and (np.abs(s - np.sin(exact)) <= bound).all()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mode"):
        ggml_rope_angles([0], 8, 1e4, mode="gptj")
    with pytest.raises(ValueError, match="freq_factors"):
        ggml_rope_angles([0], 8, 1e4, freq_factors=[1.0])
    with pytest.raises(ValueError, match="n_dims"):
        ggml_rope_angles([0], 7, 1e4)


@pytest.mark.slow
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_model_reproduces_kernel_128k(base: float) -> None:
    pos = np.arange(4 * L)
    kc, ks = ggml_rope_angles(pos, D, base)
    mc, ms, _ = model.cpu_rope_cache(pos, D, base)
    assert model.ulp_diff(kc, mc).max() <= 1 and model.ulp_diff(ks, ms).max() <= 1
