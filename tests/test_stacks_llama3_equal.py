"""llama3 with equal band factors (Llama 4 Scout: low = high = 1, factor 16): every stack as its code computes it.

Expected values: the closed form (pair i of head_dim 128, base 5e5 has wavelength 2 pi 5e5**(i/64), above
L0 = 8192 exactly for i >= 35, since 64 ln(8192 / 2 pi) / ln 5e5 = 34.99: 29 pairs divided by 16, 35 kept, none
within 20 of the edge (0.3 %, far above float32 rounding)); transformers' own module (tests/test_config.py, tests/test_schedules.py); llama.cpp's
converter re-stated in the same torch float32 operations (tests/referees/_ggml_model.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from precision_audit.config import load_config
from precision_audit.rope import STACKS, stack
from precision_audit.rope.formulas import angle_maker, flashinfer_mismatch, how_inv_freq, llama31_smooth
from precision_audit.rope.schedules import RopeSchedule

DATA = Path(__file__).parent / "data"
SCOUT = load_config(DATA / "llama-4-scout-17b-16e-instruct.json").schedule
PLAIN = RopeSchedule(head_dim=128, base=500000.0)
LONG = np.arange(64) >= 35  # the pairs whose wavelength exceeds L0 = 8192 (closed form, module docstring)


def test_the_closed_form_band_split():
    wl = 2 * math.pi * 500000.0 ** (np.arange(64) / 64)
    assert np.array_equal(wl > 8192, LONG) and np.min(np.abs(wl - 8192)) > 20


def test_reference_keeps_or_divides():
    np.testing.assert_allclose(SCOUT.inv_freq(), np.where(LONG, PLAIN.inv_freq() / 16, PLAIN.inv_freq()), rtol=1e-15)


def test_flashinfer_runs_plain_rope():
    # host constants: L0 / (2 pi high - 2 pi low) = 8192 / 0 = inf (double), -1 / (high / low - 1) = -inf (float);
    # the kernel's smooth inf * f - inf is NaN, max(0, min(1, NaN)) = 1 (fminf / fmaxf drop a NaN): freq unscaled
    a, b = llama31_smooth(SCOUT)
    assert (float(a), float(b)) == (math.inf, -math.inf)
    np.testing.assert_array_equal(how_inv_freq("rcp-pow", SCOUT), how_inv_freq("rcp-pow", PLAIN))
    why = STACKS["flashinfer"].runs_other_schedule(SCOUT)
    assert why is not None and "29 frequencies" in why and "plain RoPE" in why
    assert flashinfer_mismatch(load_config(DATA / "llama-3.1-8b.json").schedule) is None


def test_tensorrt_llm_table_keeps_or_divides():
    # numpy float64 blend with (hi - lo) = 0: inf / NaN smooth, never selected (no band); the factor applied to
    # the float32 table frequency in float64, then stored as float32
    plain = how_inv_freq("pow64-recip32", PLAIN)
    want = np.where(LONG, (plain / 16).astype(np.float32), plain.astype(np.float32)).astype(np.float64)
    np.testing.assert_array_equal(how_inv_freq("pow64-recip32", SCOUT), want)


def test_ggml_factors_are_the_converters():
    from referees import need
    from referees._ggml_model import converter_llama3_factors

    need("torch")
    text = json.loads((DATA / "llama-4-scout-17b-16e-instruct.json").read_text())["text_config"]
    ff = converter_llama3_factors(text)
    assert np.array_equal(ff, np.where(LONG, 16.0, 1.0).astype(np.float32))
    np.testing.assert_array_equal(angle_maker("repeated-product", SCOUT).freq_factors, ff)


@pytest.mark.parametrize("name", sorted(n for n, s in STACKS.items() if "llama3" in s.rope_types))
def test_every_llama3_stack_builds_finite_scout_frequencies(name):
    from precision_audit.rope.recipes import stored_inv_freq

    inv = stored_inv_freq(stack(name, "bf16", SCOUT), SCOUT)
    if not isinstance(inv, np.ndarray):  # ggml: an AngleMaker (theta_scale and the converter's factors)
        inv = np.asarray(inv.freq_factors, dtype=np.float64)
    assert np.all(np.isfinite(inv)) and inv.shape == (64,)
