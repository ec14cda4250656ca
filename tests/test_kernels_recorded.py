"""Third-party RoPE code recorded on a CUDA GPU, refereeing the stack models on any CPU.

``scripts/capture_kernels.py`` ran on an NVIDIA H200 (torch 2.11 + CUDA 13.0, triton 3.6, transformers 5.17,
liger-kernel 0.8.5, flash-attention 0251105a, unsloth 015bdef; ``meta`` in the file says so) and saved inputs
and outputs in ``tests/data/cuda_kernels.npz``:

(a) the rotation kernels.  flash-attention's triton ``apply_rotary`` loads x, cos, sin ``.to(tl.float32)``
    and stores the float32 rotation in x's dtype: the ``fp32-then-cast`` model must give every output bit.
    liger's and unsloth's triton kernels rotate in the cos/sin dtype; triton contracts ``x1*cos - x2*sin``
    and ``x2*cos + x1*sin`` into one multiply-add each (the product with x1 is not rounded): the ``fused``
    model must give every output bit, and the per-operation model (``elementwise``) must not (the recording
    tells the two apart).  A second, independent oracle (exact rationals, rounded here) checks ``fused``.
(b) transformers' ``LlamaRotaryEmbedding`` built on the GPU: ``inv_freq`` from CUDA's ``powf`` and the
    float32 division, cos/sin from CUDA's ``cosf``/``sinf`` of the float32 angle, each within the CUDA C++
    Programming Guide's maximum errors (powf 4 ulp, sinf/cosf 2 ulp, + - * / correctly rounded); the bfloat16
    cache is the round-to-nearest-even cast of the float32 one; and our model of the cache (correctly rounded
    cos/sin standing in for CUDA's) gives the recorded bfloat16 cache wherever CUDA's 2 ulp cannot cross a
    bfloat16 rounding boundary; the audit's rotation errors, computed from the model, describe the GPU's cache.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np
import pytest

from precision_audit.formats import round_to
from precision_audit.rope import stack
from precision_audit.rope.attention import apply_rotation

DATA = Path(__file__).parent / "data" / "cuda_kernels.npz"
DTYPES = ("bfloat16", "float16")
HALF = 64  # head_dim 128: pair i is dims i and i + 64
ROTATION_KERNELS = [("flash", "flash-attn"), ("liger", "liger"), ("unsloth", "unsloth")]


@pytest.fixture(scope="module")
def z() -> dict[str, np.ndarray]:
    with np.load(DATA) as f:
        return {k: f[k] for k in f.files}


def _values(bits: np.ndarray, dtype: str) -> np.ndarray:
    """uint16 bits of a 16-bit format as float64 values."""
    return bits.view(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16).astype(np.float64)


def _cases(z: dict[str, np.ndarray], kernel: str, dtype: str) -> list[tuple[str, np.ndarray, np.ndarray,
                                                                            np.ndarray, np.ndarray]]:
    """(label, x, y, cos, sin) per recorded call, cos/sin broadcast against x's layout."""
    v = lambda k: _values(z[f"{kernel}_{dtype}_{k}"], dtype)  # noqa: E731
    if kernel == "flash":  # x: (batch, seq, heads, dim); cos/sin: (seq, dim/2)
        return [("x", v("x"), v("out"), v("cos")[None, :, None], v("sin")[None, :, None])]
    cos, sin = v("cos")[None, None], v("sin")[None, None]  # q/k: (batch, heads, seq, dim)
    outs = [(t, t) for t in ("q", "k")] + ([(f"{t}_qk", t) for t in ("q", "k")] if kernel == "unsloth" else [])
    return [(label, v(src), v(f"{src}_out" + label[1:]), cos, sin) for label, src in outs]


def test_the_recording_says_where_it_came_from(z) -> None:
    meta = json.loads(str(z["meta"]))
    assert meta["gpu"].startswith("NVIDIA") and meta["liger_kernel"] and meta["flash_commit"]
    assert meta["unsloth_commit"] and meta["transformers"] and meta["triton"]
    assert z["positions"].size == 256 and z["positions"].max() < 2**20


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,name", ROTATION_KERNELS)
def test_each_stack_model_gives_every_recorded_output_bit(z, kernel: str, name: str, dtype: str) -> None:
    """(a) The stack's own apply mode reproduces the kernel bit for bit, on every recorded call."""
    mode = stack(name, dtype).apply_mode
    assert mode == ("fp32-then-cast" if kernel == "flash" else "fused")
    for label, x, y, cos, sin in _cases(z, kernel, dtype):
        y1, y2 = apply_rotation(x[..., :HALF], x[..., HALF:], cos, sin, dtype, mode)
        assert np.array_equal(y1, y[..., :HALF]) and np.array_equal(y2, y[..., HALF:]), (kernel, dtype, label)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ["liger", "unsloth"])
def test_triton_fuses_a_product_the_elementwise_model_would_round(z, kernel: str, dtype: str) -> None:
    """(a) Rounding each product (what eager torch does) misses a share of liger's/unsloth's outputs: the
    recording tells the modes apart, so the fused model's match above is not luck."""
    for label, x, y, cos, sin in _cases(z, kernel, dtype):
        y1, y2 = apply_rotation(x[..., :HALF], x[..., HALF:], cos, sin, dtype, "elementwise")
        missed = np.count_nonzero(y1 != y[..., :HALF]) + np.count_nonzero(y2 != y[..., HALF:])
        assert missed > y.size // 20, (kernel, dtype, label, missed)


def _round_exact(v: Fraction, dtype: str) -> float:
    """Round an exact rational to a 16-bit format: nearest, ties to even, subnormals included."""
    p, emin = (8, -126) if dtype == "bfloat16" else (11, -14)
    if v == 0:
        return 0.0
    e = max(int(mpmath.floor(mpmath.log(abs(mpmath.mpf(v.numerator) / v.denominator), 2))), emin)
    while abs(v) >= Fraction(2) ** (e + 1):  # the log's float rounding may leave e one low
        e += 1
    while e > emin and abs(v) < Fraction(2) ** e:
        e -= 1
    quantum = Fraction(2) ** (e - p + 1)
    return float(round(v / quantum) * quantum)  # round() on a Fraction ties to even


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_model_against_exact_rationals(z, dtype: str) -> None:
    """(a) The fused mode (round-to-odd in float64, then one rounding) against exact rational arithmetic:
    y1 = rnd(x1 c - rnd(x2 s)), y2 = rnd(rnd(x2 c) + x1 s), on recorded liger inputs and on operands whose
    terms lie far apart (up to 2**120 in bfloat16, float16 subnormals: the float64 sum itself is inexact)."""
    rng = np.random.default_rng(7)
    _, x, _, cos, sin = _cases(z, "liger", dtype)[0]
    take = rng.choice(x[..., :HALF].size, 400, replace=False)
    x1, x2 = x[..., :HALF].ravel()[take], x[..., HALF:].ravel()[take]
    c = np.broadcast_to(cos, x[..., :HALF].shape).ravel()[take]
    s = np.broadcast_to(sin, x[..., :HALF].shape).ravel()[take]
    lo, hi = (-60, 60) if dtype == "bfloat16" else (-24, 5)  # float16: subnormal products, no overflow
    scale = lambda n: np.exp2(rng.integers(lo, hi, n).astype(np.float64))  # noqa: E731
    wide = [round_to(rng.standard_normal(300) * scale(300), dtype) for _ in range(4)]
    for a1, a2, cc, ss in ((x1, x2, c, s), tuple(wide)):
        y1, y2 = apply_rotation(a1, a2, cc, ss, dtype, "fused")
        for i in range(a1.size):
            f = [Fraction(float(t[i])) for t in (a1, a2, cc, ss)]
            want1 = _round_exact(f[0] * f[2] - Fraction(_round_exact(f[1] * f[3], dtype)), dtype)
            want2 = _round_exact(Fraction(_round_exact(f[1] * f[2], dtype)) + f[0] * f[3], dtype)
            assert (y1[i], y2[i]) == (want1, want2), (dtype, [float(t[i]) for t in (a1, a2, cc, ss)])


def _ulp32(v: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(v).astype(np.float32)).astype(np.float64)


CONFIGS = ("llama2", "llama31")  # base 1e4; base 5e5 with llama3 scaling (factor 8, band 1..4, 8192)


def _exact_llama2_theta() -> np.ndarray:
    """Llama-2's frequencies 1e4 ** -(i / 64) (the exponent 2i/128 is exact in float32), mpmath at 120 bits."""
    with mpmath.workprec(120):
        return np.array([float(1 / mpmath.power(10000, mpmath.mpf(i) / HALF)) for i in range(HALF)])


def test_cuda_inv_freq_within_powf_and_division_bounds(z) -> None:
    """(b) Llama-2's inv_freq = fl(1 / powf(1e4, fl(2i/128))) (the exponent exact in float32): powf within 4
    ulp, the division correctly rounded, so within 4.5 float32 ulps of the exact value (mpmath)."""
    got = z["hf_llama2_inv_freq"].astype(np.float64)
    exact = _exact_llama2_theta()
    assert np.all(np.abs(got - exact) <= (4.5 + 1e-6) * _ulp32(exact))
    # what this H200 did: 60 of 64 entries are fl(1 / fl(exact power)), the other 4 one float32 neighbour off
    with mpmath.workprec(100):
        power = round_to([float(mpmath.power(10000, mpmath.mpf(2 * i) / 128)) for i in range(HALF)], "float32")
    model = round_to(1.0 / power, "float32")  # 1/p of float32 p: float64 rounds it at most once more, harmlessly
    off = np.abs(got - model) / _ulp32(model)
    assert np.count_nonzero(off) == 4 and np.all(off <= 1.0)


@pytest.mark.parametrize("name", CONFIGS)
def test_cuda_cos_sin_within_two_ulps_and_the_bf16_cache_is_their_cast(z, name: str) -> None:
    """(b) cos/sin of the float32 angle fl(m * inv_freq) within CUDA's 2 ulp of the correctly rounded value
    (float64 cos/sin stand in for the exact one: their error is 2**-52 relative); the bfloat16 cache is the
    nearest-even cast of the float32 values."""
    m = z["positions"].astype(np.float32)[:, None]
    angle = (m * z[f"hf_{name}_inv_freq"][None, :]).astype(np.float64)  # one float32 rounding
    for fn, key in ((np.cos, "cos"), (np.sin, "sin")):
        got = z[f"hf_{name}_{key}32"].astype(np.float64)
        exact = fn(angle)
        assert np.all(np.abs(got - exact) <= 2.5 * _ulp32(exact) + 2.0**-50), (name, key)
        cast = z[f"hf_{name}_{key}32"].astype(ml_dtypes.bfloat16)
        assert np.array_equal(cast.view(np.uint16), z[f"hf_{name}_{key}16"]), (name, key)


@pytest.mark.parametrize("name", CONFIGS)
def test_cache_model_gives_the_recorded_bf16_cache_away_from_rounding_boundaries(z, name: str) -> None:
    """(b) Our stand-in (correctly rounded float32 cos/sin, then bfloat16) from the recorded inv_freq gives the
    recorded bfloat16 cache at every entry whose float32 value is more than 2 ulp from a bfloat16 midpoint
    (there CUDA's 2 ulp cannot change the cast); on this recording that is every entry."""
    m = z["positions"].astype(np.float32)[:, None]
    angle = (m * z[f"hf_{name}_inv_freq"][None, :]).astype(np.float64)
    for fn, key in ((np.cos, "cos"), (np.sin, "sin")):
        model32 = round_to(fn(angle), "float32")
        model16 = round_to(model32, "bfloat16")
        got16 = _values(z[f"hf_{name}_{key}16"], "bfloat16")
        lo, hi = round_to(model32 - 2 * _ulp32(model32), "bfloat16"), round_to(model32 + 2 * _ulp32(model32),
                                                                               "bfloat16")
        safe = lo == hi
        assert np.array_equal(model16[safe], got16[safe]), (name, key)
        assert np.all((got16 == lo) | (got16 == hi)), (name, key)
        assert safe.mean() > 0.99, (name, key, safe.mean())


def test_the_audit_figures_hold_for_the_gpu_cache(z) -> None:
    """(b) The audit's figures for the transformers stack (bfloat16 cache, base 1e4) describe the GPU's cache:
    max and mean rotation error against the exact angle (mpmath frequencies, the package's float64 oracle for
    m * theta) in three bands of positions agree within 1 % between the recorded cache and the model's."""
    from precision_audit.rope import RopeSchedule
    from precision_audit.rope.engine import run_recipe
    from precision_audit.rope.oracle import exact_angles, wrap

    pos = z["positions"]
    sched = RopeSchedule(head_dim=128, base=10000.0)
    model = run_recipe(stack("transformers", "bfloat16", sched), sched, pos)
    exact = exact_angles(pos.astype(np.float64), _exact_llama2_theta())
    gpu = np.abs(wrap(np.arctan2(_values(z["hf_llama2_sin16"], "bfloat16"),
                                 _values(z["hf_llama2_cos16"], "bfloat16")) - exact))
    ours = np.abs(wrap(np.arctan2(model["sin"], model["cos"]) - exact))
    for lo, hi in ((0, 2**12), (2**12, 2**16), (2**16, 2**20)):
        band = (pos >= lo) & (pos < hi)
        for stat in (np.max, np.mean):
            g, o = stat(gpu[band]), stat(ours[band])
            assert abs(g - o) <= 0.01 * o, (lo, hi, stat.__name__, g, o)
