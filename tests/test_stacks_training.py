"""The training stacks of ``precision_audit.rope.STACKS`` (issue 29) against independent models of their source.

Each stack's row was written from the source it cites (``Stack.source``).  The tests here do not read the rows
back: they evaluate what that source computes, operation by operation, in mpmath (every float32 operation
rounded to 24 bits, the correctly rounded model the package states for GPU arithmetic), and compare the result
with what the package's engine computes for the stack (``run_recipe(stack(name, dtype, s), s, positions)``):

* the product stacks (``transformer-engine``, ``flash-attn``, ``liger``, ``unsloth``, ``torchtune``): torch's
  ``1.0 / (base ** (arange(0, d, 2).float() / d))``, ``positions * inv_freq`` in float32, float32 cos/sin,
  and what a (1, 0) pair comes back as: those rounded once to the dtype (a cache cast to the dtype, or, in
  TransformerEngine and torchtune, float32 cos/sin and the float32 rotation's result cast), bit for bit at spot
  positions;
* ``maxtext``: ``position / (min * (max/min) ** fraction)`` with ``fraction = 2i/d``, each operation in float32,
  bit for bit;
* where the real code runs here in plain torch (torchtune's ``RotaryPositionalEmbeddings`` and
  ``Llama3ScaledRoPE``, loaded from the installed package by ``referees._torchtune``), the module's own cache is
  the referee: its rotation error against the package's oracle and the audit's row, within the derived bound
  of tests/_engine_bound.py (torch's faithful pow and cos/sin against the correctly rounded ones);
* liger and unsloth take their cos/sin from transformers' rotary module (liger) or transformers'
  ``ROPE_INIT_FUNCTIONS`` with the module's float32 steps (unsloth): their rows are measured against
  transformers' ``LlamaRotaryEmbedding`` itself (Llama 3.1, 32K).

No kernel of TransformerEngine (CUDA), flash-attention, Liger or Unsloth (triton) or MaxText (JAX; the
package is not installed) runs here: their rotation kernels are modelled from source only.
"""

from __future__ import annotations

import warnings
from typing import Any

import mpmath
import numpy as np
import pytest
from _engine_bound import assert_engines_within_bound, engine_bound  # tests/ helper: the engines' derived bound
from referees._torchtune import torchtune_module
from test_schedules import _build, _module_errors  # transformers' rotary modules, built from configs

from precision_audit.rope import (STACKS, RopeSchedule, audit, exact_angles, run_recipe, select_stacks, stack,
                                  stored_inv_freq, wrap)
from precision_audit.rope import formulas
from precision_audit.rope.schedules import schedule_from_rope_parameters, ulp_distance

TRAIN = ("transformer-engine", "flash-attn", "liger", "unsloth", "torchtune", "maxtext")
PRODUCT = TRAIN[:-1]
L = 32768
SPOT = [0, 1, 2, 7, 257, 4095, 32767, 131071, 1048575]  # positions
BITS = {"bfloat16": 8, "float32": 24}  # significand bits of the stored formats (normal range: |cos|, |sin| <= 1)

# how each source rotates (read from the cited files; see the module docstring).  What a (1, 0) pair comes back
# as is the float32 cos/sin rounded once to the dtype in every one of them: a cache cast to the dtype (flash-attn,
# liger, unsloth, MaxText), or float32 cos/sin (TransformerEngine, torchtune) and the float32 result cast.
FP32_ROTATION = {"transformer-engine", "flash-attn", "torchtune"}  # rotation in float32, result cast to the dtype
TRITON_FUSED = {"liger", "unsloth"}  # triton contracts one product into the sum (tests/test_kernels_recorded.py)
FP32_CACHE = {"transformer-engine", "torchtune"}  # cos/sin never stored in the dtype (rows: rotate into it)

CASES = {
    "base1e4": RopeSchedule(head_dim=128, base=10000.0),
    "base5e5": RopeSchedule(head_dim=128, base=500000.0),
    "base1e6-d64": RopeSchedule(head_dim=64, base=1000000.0),
}
LLAMA31 = dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=8192)


def _r(x: Any, bits: int = 24) -> mpmath.mpf:
    """x rounded to ``bits`` significant bits, nearest even (float32 at 24; normal range)."""
    with mpmath.workprec(bits):
        return +mpmath.mpf(x)


def _stored(v: mpmath.mpf, fmt: str) -> float:
    """A float32 cos/sin value stored in ``fmt`` (bfloat16 / float32 in mpmath; float16 by numpy's IEEE cast)."""
    if fmt == "float16":
        return float(np.float16(float(v)))
    return float(_r(v, BITS[fmt]))


def _torch_inv_freq(d: int, base: float) -> list[mpmath.mpf]:
    """``1.0 / (base ** (torch.arange(0, d, 2).float() / d))`` in float32: the exponent ``fl32(2i / d)``, the
    power ``fl32(fl32(base) ** e)`` (correctly rounded), the reciprocal ``fl32(1 / pow)``."""
    with mpmath.workprec(200):
        return [_r(1 / _r(_r(base) ** _r(mpmath.mpf(i) / d))) for i in range(0, d, 2)]


def _trig(angles: list[list[mpmath.mpf]]) -> tuple[list[list[mpmath.mpf]], list[list[mpmath.mpf]]]:
    """float32 cos and sin of float32 angles, correctly rounded."""
    with mpmath.workprec(200):
        return ([[_r(mpmath.cos(a)) for a in row] for row in angles],
                [[_r(mpmath.sin(a)) for a in row] for row in angles])


def _check_stages(name: str, dtype: str, s: RopeSchedule, inv: list[mpmath.mpf] | None,
                  angles: list[list[mpmath.mpf]]) -> None:
    st = run_recipe(stack(name, dtype, s), s, SPOT)
    if inv is not None:
        assert st["inv_freq"].tolist() == [float(v) for v in inv]
    assert st["angle"].tolist() == [[float(a) for a in row] for row in angles]
    cos, sin = _trig(angles)
    assert st["trig_cos"].tolist() == [[float(v) for v in row] for row in cos]
    assert st["trig_sin"].tolist() == [[float(v) for v in row] for row in sin]
    kept = "float32" if name in FP32_CACHE else dtype
    assert st["cos"].tolist() == [[_stored(v, kept) for v in row] for row in cos], (name, dtype)
    assert st["sin"].tolist() == [[_stored(v, kept) for v in row] for row in sin], (name, dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", PRODUCT)
def test_product_stacks_from_mpmath(name: str, case: str, dtype: str) -> None:
    """float32 positions (torch.arange(n, dtype=float32), or int64 ``.float()``: exact below 2**24), torch's
    float32 inv_freq, the float32 product (torch.outer / einsum, one multiply), float32 cos/sin, rounded once to
    the dtype: every stage bit for bit against the mpmath model."""
    s = CASES[case]
    inv = _torch_inv_freq(s.rotary, s.base)
    with mpmath.workprec(200):
        angles = [[_r(mpmath.mpf(p) * v) for v in inv] for p in SPOT]
    _check_stages(name, dtype, s, inv, angles)


def _timescales(d: int, base: float, factor: float | None) -> list[mpmath.mpf]:
    """MaxText's ``RotaryEmbedding.timescale`` in float32: ``fraction = 2 * arange(d/2) / d`` (int32, then a
    float32 true division), ``min_timescale * (max/min) ** fraction`` with ``min = 1`` (``rope_min_timescale``)
    and ``max = base`` (a Python float, weakly typed: float32 in the power), ``* rope_linear_scaling_factor``."""
    with mpmath.workprec(200):
        ts = [_r(1 * _r(_r(base) ** _r(mpmath.mpf(2 * i) / d))) for i in range(d // 2)]
        return ts if factor is None else [_r(t * _r(factor)) for t in ts]


@pytest.mark.parametrize("factor", [None, 4.0, 3.0], ids=["default", "linear4", "linear3"])
@pytest.mark.parametrize("case", list(CASES))
def test_maxtext_from_mpmath(case: str, factor: float | None) -> None:
    """``sinusoid_inp = position / timescale`` (int32 positions promoted to float32, one float32 division), then
    float32 sin/cos cast to the activation dtype: bit for bit against the mpmath model."""
    base = CASES[case]
    s = base if factor is None else RopeSchedule(head_dim=base.head_dim, base=base.base, scaling="linear",
                                                 factor=factor)
    ts = _timescales(s.rotary, s.base, factor)
    with mpmath.workprec(200):
        angles = [[_r(_r(p) / t) for t in ts] for p in SPOT]
    assert formulas.timescales(s).tolist() == [float(t) for t in ts]
    _check_stages("maxtext", "bfloat16", s, None, angles)


def test_maxtext_division_is_not_the_product() -> None:
    """The division is a how of its own: at 1M positions MaxText's float32 angles differ from the product
    ``p * fl32(1 / timescale)`` (what a product stack would compute from the same timescales) in 15 of the 64
    pairs at p = 1048575 (both in mpmath; the package's angles are the division's)."""
    s = CASES["base1e4"]
    ts = _timescales(s.rotary, s.base, None)
    p = 1048575
    with mpmath.workprec(200):
        div = [_r(mpmath.mpf(p) / t) for t in ts]
        prod = [_r(mpmath.mpf(p) * _r(1 / t)) for t in ts]
    differ = sum(a != b for a, b in zip(div, prod))
    assert differ == 15, differ
    got = run_recipe(stack("maxtext", "bfloat16", s), s, [p])["angle"][0].tolist()
    assert got == [float(v) for v in div]


@pytest.mark.parametrize("name", TRAIN)
def test_rotation_as_the_source_does_it(name: str) -> None:
    """The apply stage: float32 rotation cast once (TransformerEngine's CUDA kernel, flash-attn's triton kernel
    loading .to(tl.float32), torchtune's x.float()), or in the cos/sin dtype (liger's and unsloth's triton
    kernels cast q/k to the cos/sin dtype, the model's, and triton fuses one product into each sum; MaxText's
    jnp ops on activation-dtype operands, each rounded); and every training stack says it trains."""
    r = stack(name, "bfloat16")
    mode = "fp32-then-cast" if name in FP32_ROTATION else "fused" if name in TRITON_FUSED else "elementwise"
    assert (r.apply, r.apply_mode) == ("bfloat16", mode)
    assert STACKS[name].roles == ("train",)
    assert name in select_stacks(["all"], ["default"])[0]


REFUSED = {
    "transformer-engine": ["llama3", "yarn", "dynamic"],
    "flash-attn": ["linear", "llama3", "yarn"],
    "unsloth": ["dynamic", "longrope"],
    "torchtune": ["yarn", "linear", "longrope"],
    "maxtext": ["llama3", "yarn"],
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_source_does_not_run_is_refused(name: str) -> None:
    """A rope type the stack's source does not compute (or not as modelled) raises ValueError naming the stack
    and the type; ``all`` leaves the stack out with the reason."""
    for kind in REFUSED[name]:
        extra = dict(short_factor=[1.0] * 64, long_factor=[2.0] * 64) if kind == "longrope" else {}
        sched = RopeSchedule(head_dim=128, scaling=kind, factor=2.0, **extra)
        with pytest.raises(ValueError, match=f"stack '{name}' does not run rope type '{kind}'"):
            stack(name, "bfloat16", sched)
        chosen, skipped = select_stacks(["all"], [kind], strict=False)
        assert name not in chosen and any(f"'{name}'" in why for why in skipped)
    with pytest.raises(ValueError, match="MaxText's RotaryEmbedding does not implement rope type 'llama3'"):
        formulas.angle_maker("position-over-timescale", RopeSchedule(head_dim=64, scaling="llama3", factor=8.0))


# --------------------------------------------------------------------------- torchtune: the real modules


def _cache_rows(cos: np.ndarray, sin: np.ndarray, theta: np.ndarray) -> tuple[float, float]:
    """Max and mean rotation error of (cos, sin) rows for positions 0..n-1 against the package's oracle."""
    ex = exact_angles(np.arange(cos.shape[0]), theta)
    e = np.abs(wrap(np.arctan2(sin, cos) - ex))
    return float(e.max()), float(e.mean())


def _torchtune(kind: str, base: float, n: int) -> Any:
    torch = pytest.importorskip("torch")
    if kind == "llama3":
        mod = torchtune_module("llama3_1").Llama3ScaledRoPE(dim=128, max_seq_len=n, base=base, scale_factor=8)
    else:
        mod = torchtune_module("rope").RotaryPositionalEmbeddings(dim=128, max_seq_len=n, base=base)
    assert mod.cache.dtype == torch.float32 and mod.theta.dtype == torch.float32
    return mod


TT_CASES = {"base1e4": ("default", CASES["base1e4"]), "base5e5": ("default", CASES["base5e5"]),
            "llama-3.1": ("llama3", schedule_from_rope_parameters(LLAMA31, head_dim=128))}


def _forward_pairs(mod: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """torchtune's forward on bf16 (1, 0) pairs at positions 0..n-1: the (cos, sin) it rotates by, as it returns
    them (its pairs are interleaved: x[2i], x[2i+1])."""
    import torch

    x = torch.zeros(1, n, 1, 128, dtype=torch.bfloat16)
    x[..., 0::2] = 1.0
    out = mod(x)[0, :, 0].float().numpy().astype(np.float64)
    return out[:, 0::2], out[:, 1::2]


@pytest.mark.parametrize("case", list(TT_CASES))
def test_torchtune_module_is_the_row(case: str) -> None:
    """torchtune's own module, built as its recipes build it, against the stack's row at 32K.

    (a) theta (torch's float32 pow, faithful) lies within the derived bound of the package's correctly rounded
    inverse frequencies (tests/_engine_bound.py); (b) where they are equal the module's float32 cache is torch's
    cos/sin (faithful: within 1 ulp) of the package's float32 angles; (c) the module's forward on bf16 (1, 0)
    pairs returns its float32 cache rounded once to bf16 (the float32 rotation ``x.float()`` then
    ``type_as(x)``); (d) the rotation error of its float32 cache (the row's cache) against the audit row: mean
    within 5 %, max within 10 % plus (L - 1) times the frequency bound (as tests/test_schedules.py's module
    referee)."""
    import torch

    kind, s = TT_CASES[case]
    mod = _torchtune(kind, s.base, L)
    theta = mod.theta.numpy().astype(np.float64)
    tool = run_recipe(stack("torchtune", "bfloat16", s), s, np.arange(L))
    ulps, radians = engine_bound(s, s.frequency_key(L))
    assert np.all(ulp_distance(theta, tool["inv_freq"], "float32") <= ulps)
    d_theta = float(radians.max())
    same = theta == tool["inv_freq"]
    assert same.sum() >= s.n_freq // 2, same.sum()
    cache = mod.cache
    for k, t in ((cache[:, :, 0], tool["trig_cos"]), (cache[:, :, 1], tool["trig_sin"])):
        assert ulp_distance(k.numpy().astype(np.float64)[:, same], t[:, same], "float32").max() <= 1
    kc, ks = _forward_pairs(mod, L)
    assert np.array_equal(kc, cache[:, :, 0].to(torch.bfloat16).float().numpy())
    assert np.array_equal(ks, cache[:, :, 1].to(torch.bfloat16).float().numpy())
    worst, mean = _cache_rows(cache[:, :, 0].numpy().astype(np.float64), cache[:, :, 1].numpy().astype(np.float64),
                              s.inv_freq())
    (row,) = audit(s, stack("torchtune", "bfloat16", s), [L])
    assert row.mean_rotation_error == pytest.approx(mean, rel=0.05)
    assert abs(row.max_rotation_error - worst) <= 0.10 * worst + (L - 1) * d_theta


def test_torchtune_keeps_float32_under_a_bf16_default_dtype() -> None:
    """torchtune's recipes build the model under ``set_default_dtype(bf16)``; theta (``.float()``) and the cache
    stay float32, and the forward rotates in float32 and casts once (``x.float()``, ``type_as(x)``): on (1, 0)
    pairs a bf16 input returns the float32 cache rounded once to bf16."""
    torch = pytest.importorskip("torch")
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        mod = _torchtune("default", 10000.0, 64)
    finally:
        torch.set_default_dtype(old)
    kc, ks = _forward_pairs(mod, 64)
    assert mod.cache.dtype == torch.float32
    assert np.array_equal(kc, mod.cache[:, :, 0].to(torch.bfloat16).float().numpy())
    assert np.array_equal(ks, mod.cache[:, :, 1].to(torch.bfloat16).float().numpy())


# --------------------------------------------------------------------------- liger, unsloth: transformers' module


@pytest.mark.parametrize("name", ["liger", "unsloth"])
def test_liger_unsloth_rows_match_transformers_module(name: str) -> None:
    """Liger's kernel takes the cos/sin of transformers' LlamaRotaryEmbedding (bf16 model); Unsloth builds the
    same float32 steps from transformers' ROPE_INIT_FUNCTIONS (int64 positions ``.float()``, ``torch.outer``,
    ``cos() * attention_scaling``, ``.to(dtype)``).  Llama 3.1 at 32K, transformers' module as the referee,
    with the bound of tests/test_stacks.py's transformers row (torch's faithful pow: (L - 1) d_theta)."""
    pytest.importorskip("torch")
    (mod_cls, cfg), sched, extra = _build("llama3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = mod_cls(cfg)
    worst, mean = _module_errors(mod, L, sched, extra)
    (row,) = audit(sched, stack(name, "bfloat16", sched), [L])
    d_theta = assert_engines_within_bound(sched, sched.frequency_key(L))
    assert row.mean_rotation_error == pytest.approx(mean, rel=0.05)
    assert abs(row.max_rotation_error - worst) <= 0.10 * worst + (L - 1) * d_theta


@pytest.mark.parametrize("factor", [2.0, 2.5, 3.0, 7.3])
def test_transformer_engine_linear_scales_positions_as_torch_does(factor: float) -> None:
    """TransformerEngine's linear scaling (rope.py, RotaryPositionEmbedding.forward: float32 ``seq``, ``seq *= 1 /
    factor``, then ``torch.einsum('i , j -> i j', seq, inv_freq)``) run in torch on the package's own float32
    inverse frequencies of the unscaled schedule: the package's angles are those float32 products, bit for bit
    (two IEEE multiplications: no kernel of this CPU decides them).  Not the product by inv_freq / factor: the
    angles differ (and the audit measures them against the declared schedule's exact theta / factor)."""
    import torch

    s = RopeSchedule(head_dim=128, scaling="linear", factor=factor)
    r = stack("transformer-engine", "bfloat16", s)
    assert r.angle_from == "scaled-product"
    maker = stored_inv_freq(r, s)
    inv32 = torch.from_numpy(stored_inv_freq(stack("transformer-engine", "bfloat16"), RopeSchedule(head_dim=128))
                             .astype(np.float32))
    pos = np.concatenate([np.arange(0, 4096), np.arange(2**20 - 4096, 2**20), [2**24 - 1]]).astype(np.float64)
    seq = torch.from_numpy(pos.astype(np.float32))
    seq *= 1 / factor
    want = torch.einsum("i , j -> i j", seq, inv32).numpy().astype(np.float64)
    got = np.empty_like(want)
    maker.angles_into(pos, got)
    assert np.array_equal(got, want)
    product = (pos[:, None].astype(np.float32) * (inv32.numpy() / np.float32(factor)).astype(np.float32)[None, :])
    assert not np.array_equal(got, product.astype(np.float64)) or factor in (2.0,)  # powers of two: the same
