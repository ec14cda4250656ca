"""The inverse frequencies of every rope type, one written formula per type (:data:`ROPE_TYPES`).

Each formula takes the schedule ``s`` (a :class:`~precision_audit.rope.schedules.RopeSchedule`: this module
reads its fields and sits below it), an arithmetic context ``o`` (:mod:`.arithmetic`: every operation correctly
rounded to a format, or torch's kernels) and the length ``seq_len`` (``dynamic`` and ``longrope`` only), and
returns ``theta_i``; :meth:`~precision_audit.rope.schedules.RopeSchedule.inv_freq` and
:meth:`~precision_audit.rope.schedules.RopeSchedule.inv_freq_in` run it.

The formulas are the published ones: RoPE (Su et al. 2021,
``theta_i = base ** (-2i/d)``); position interpolation (Chen et al. 2023,
``linear``); dynamic NTK (bloc97/emozilla 2023: the base grows to
``base * (s L / L0 - (s - 1)) ** (d / (d - 2))``); YaRN (Peng et al. 2023:
per-frequency ramp between interpolation and extrapolation by the number of
rotations over the pretraining context, attention factor ``0.1 ln s + 1``);
Llama 3 (Meta 2024: wavelength bands); LongRoPE (Ding et al. 2024:
per-frequency rescale factors, short and long sets, attention factor
``sqrt(1 + ln s / ln L0)``); proportional partial rotary (Gemma: the rotated
frequencies keep the full head_dim's exponents, the rest do not rotate).
Their parameter names are those of transformers' ``rope_parameters``; tests
compare every type with transformers' ``ROPE_INIT_FUNCTIONS``.

Operation order.  A formula does not fix the order of its floating-point
operations, and a float32 result is bit-exact only in the order the real code
uses.  ``_llama3``, ``_yarn`` and ``yarn_bounds`` therefore take theirs from
transformers' ``src/transformers/modeling_rope_utils.py``
(``_compute_llama3_parameters``; ``_compute_yarn_parameters`` with its
``find_correction_range`` and ``linear_ramp_factor``; read at transformers
5.23): Llama 3's wavelength ``2 pi / theta`` and blend
``(1 - w) * scaled / factor + w * scaled``; YaRN's correction dims
``d ln(L0 / (2 pi r)) / (2 ln base)``, the ``+ 0.001`` that widens a
zero-width ramp, and the ramp complemented twice (the extrapolation weight
``1 - ramp``, the blend ``interpolated * (1 - weight) + extrapolated *
weight``).  No code is copied; the order of operations is credited to that
file: Copyright 2024 The HuggingFace Team, licensed under the Apache License,
Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).

>>> ROPE_TYPES
('default', 'linear', 'dynamic', 'yarn', 'longrope', 'llama3', 'proportional')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["ROPE_TYPES", "yarn_bounds"]

Schedule = Any
"""A :class:`~precision_audit.rope.schedules.RopeSchedule` (schedules.py imports this module, so it is not
imported here): the formulas read its fields only."""


def _default(s: Schedule, o: Any, seq_len: int | None, base: Any = None) -> Any:
    """theta_i = 1 / base ** (2i / d) over the rotated dims (Su et al.)."""
    d = s.rotary
    return o.div(1.0, o.pow(s.base if base is None else base, o.div(o.arange(0, d, 2), d)))


def _linear(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """Position interpolation: every frequency divided by the factor."""
    return o.div(_default(s, o, seq_len), s.factor)


def _dynamic(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """Dynamic NTK: above the pretraining context L0 the base grows with the length L.

    base' = base * (s L / L0 - (s - 1)) ** (d / (d - 2)).  At or below L0 the
    module keeps the plain frequencies; above it, it recomputes them with L
    taken from the position ids (a tensor), so base' is itself float32 math.
    """
    L0, d = s.original_max_position_embeddings, s.rotary
    if seq_len is None or seq_len <= L0:
        return _default(s, o, seq_len)
    ratio = o.div(o.mul(s.factor, o.integer(seq_len)), L0)
    grown = o.mul(s.base, o.pow(o.sub(ratio, s.factor - 1), d / (d - 2)))
    return _default(s, o, seq_len, base=grown)


def yarn_bounds(s: Schedule) -> tuple[float, float]:
    """YaRN's ramp ends (in float64): the dims whose wavelength fits beta_fast / beta_slow rotations in L0,
    rounded to whole dims (floor / ceil) when the schedule says ``truncate``.

    Operation order (and the ``+ 0.001``) from transformers' ``find_correction_range`` /
    ``linear_ramp_factor`` (Apache-2.0; see the module docstring).

    >>> from precision_audit.rope.schedules import RopeSchedule
    >>> gpt_oss = dict(head_dim=64, base=150000.0, scaling="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0,
    ...                original_max_position_embeddings=4096)
    >>> [round(b, 4) for b in yarn_bounds(RopeSchedule(**gpt_oss, truncate=False))]
    [8.0928, 17.398]
    >>> yarn_bounds(RopeSchedule(**gpt_oss, truncate=True))
    (8, 18)
    """
    d, L0 = s.rotary, s.original_max_position_embeddings

    def dim_for(rotations: float) -> float:  # d ln(L0 / (2 pi r)) / (2 ln base)
        return d * math.log(L0 / (rotations * 2 * math.pi)) / (2 * math.log(s.base))

    low, high = dim_for(s.beta_fast), dim_for(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    return low, high


def _yarn(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """YaRN: interpolate (theta / s) below the ramp, extrapolate (theta) above it, blend between.

    Operation order (the ramp complemented twice) from transformers' ``_compute_yarn_parameters``
    (Apache-2.0; see the module docstring): bit-exact in float32 only in that order.
    """
    d = s.rotary
    powers = o.pow(s.base, o.div(o.arange(0, d, 2), d))
    extrapolated = o.div(1.0, powers)
    interpolated = o.div(1.0, o.mul(s.factor, powers))
    low, high = yarn_bounds(s)
    ramp = o.clamp(o.div(o.sub(o.arange(0, d // 2), low), high - low), 0.0, 1.0)
    keep = o.sub(1, ramp)  # weight of the extrapolated frequency
    return o.add(o.mul(interpolated, o.sub(1, keep)), o.mul(extrapolated, keep))


def _longrope(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """LongRoPE: theta_i / lambda_i with the short factors up to L0, the long ones beyond."""
    d = s.rotary
    long = seq_len is not None and seq_len > s.original_max_position_embeddings
    lam = o.array(s.long_factor if long else s.short_factor)  # type: ignore[arg-type]
    return o.div(1.0, o.mul(lam, o.pow(s.base, o.div(o.arange(0, d, 2), d))))


def _llama3(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """Llama 3: keep short wavelengths, divide long ones by the factor, blend the band between.

    Bands by wavelength w = 2 pi / theta against L0 / high_freq_factor and
    L0 / low_freq_factor; in the band the weight is
    (L0 / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
    Operation order from transformers' ``_compute_llama3_parameters`` (Apache-2.0; see the module
    docstring): bit-exact in float32 only in that order.  Equal band factors (Llama 4 Scout: both 1) leave
    the band empty: the weight divides by zero (inf, or NaN where the wavelength is exactly L0 / low), and
    the blend is used only for a wavelength exactly on the edge, as in transformers' code.
    """
    L0 = s.original_max_position_embeddings
    theta = _default(s, o, seq_len)
    wavelength = o.div(2 * math.pi, theta)
    short_edge, long_edge = L0 / s.high_freq_factor, L0 / s.low_freq_factor
    scaled = o.where(o.gt(wavelength, long_edge), o.div(theta, s.factor), theta)
    w = o.div(o.sub(o.div(L0, wavelength), s.low_freq_factor), s.high_freq_factor - s.low_freq_factor)
    blended = o.add(o.div(o.mul(o.sub(1, w), scaled), s.factor), o.mul(w, scaled))
    band = ~o.lt(wavelength, short_edge) & ~o.gt(wavelength, long_edge)
    return o.where(band, blended, scaled)


def _proportional(s: Schedule, o: Any, seq_len: int | None) -> Any:
    """Proportional partial rotary: the rotated pairs keep head_dim's exponents 2i / head_dim,
    the other pairs get frequency 0 (no rotation); all divided by the factor."""
    d, rotated = s.head_dim, s.rotary // 2
    theta = o.div(1.0, o.pow(s.base, o.div(o.arange(0, 2 * rotated, 2), d)))
    if d // 2 > rotated:
        theta = o.cat(theta, o.zeros(d // 2 - rotated))
    return o.div(theta, s.factor)


_FORMULAS: dict[str, Callable[[Schedule, Any, int | None], Any]] = {
    "default": lambda s, o, n: _default(s, o, n),
    "linear": _linear,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
    "proportional": _proportional,
}
ROPE_TYPES: tuple[str, ...] = tuple(_FORMULAS)
# "su": LongRoPE's name in early Phi-3 configs; "mrope": Qwen2-VL / Qwen2.5-VL (transformers' Qwen2VLConfig maps it
# to "default": the sections only choose which of the (temporal, height, width) ids feeds each frequency)
_TYPE_ALIASES = {"none": "default", "su": "longrope", "mrope": "default"}
