"""The catalog of public incidents of this bug class, as data, and one runner.

Each :class:`Incident` names a public report (repository, issue/PR number,
year), the code path it is about as a recipe (one format per stage, see
:mod:`precision_audit.rope`) with its settings, the figures the report states
(``published``, quoted as numbers with their meaning) and a measurement that
runs the same code path through the tool (``measured``, same keys where they
correspond).  :func:`reproduce` runs one entry and judges each stated figure:
the verdict is ``reproduced`` when every check holds, ``differs`` otherwise,
with the reason in numbers.

>>> sorted(CATALOG)[:3]
['baichuan', 'cactus-688', 'candle-3520']
>>> r = reproduce("gpt-neox-1003")
>>> r.verdict, r.measured["angle_fp16_1857_1"], r.published["angle_fp16_1857_1"]
('reproduced', 1045.0, 1045.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._common import Row, check_length
from .attention import apply_errors, attention_errors
from .formats import get_format, round_to, spacing
from .rope import Recipe, RopeSchedule, audit, exact_angles, preset, run_recipe, wrap

__all__ = [
    "CATALOG",
    "AngleOverflow",
    "Incident",
    "IncidentResult",
    "angle_overflow",
    "incident_names",
    "reproduce",
]

Figures = dict[str, Any]
# a check looks at (published, measured) and returns None when the figure holds, else the reason in numbers
Check = Callable[[Mapping[str, Any], Mapping[str, Any]], "str | None"]


# --------------------------------------------------------------------------- the fp16 angle overflow


@dataclass(frozen=True)
class AngleOverflow(Row):
    """Non-finite angles of a recipe over positions 0..length-1.

    ``non_finite``: (position, frequency) angles that are inf/NaN (an fp16
    angle stage overflows at 65520; cos/sin of inf is NaN: the phase is lost,
    and :mod:`precision_audit.rope` counts it as error pi).
    ``first_overflow``: per frequency index, the first position whose angle
    is not finite, or None.
    """

    recipe: str
    length: int
    non_finite: int
    first_overflow: tuple[int | None, ...]


def angle_overflow(schedule: RopeSchedule, recipe: Recipe, length: int, *, chunk: int = 2**16) -> AngleOverflow:
    """Count the non-finite angles (cos/sin argument) a recipe makes over 0..length-1.

    >>> o = angle_overflow(RopeSchedule(head_dim=4), preset("lowp", "fp16"), 70000)
    >>> o.first_overflow, o.non_finite
    ((65520, 65520), 8960)
    """
    L = check_length(length)
    theta = schedule.inv_freq(L)
    first: list[int | None] = [None] * theta.size
    count = 0
    for start in range(0, L, chunk):
        m = np.arange(start, min(L, start + chunk), dtype=np.float64)
        bad = ~np.isfinite(run_recipe(recipe, schedule, m, L)["angle"])
        count += int(np.count_nonzero(bad))
        for i in np.flatnonzero(bad.any(axis=0)):
            if first[i] is None:
                first[i] = int(m[np.argmax(bad[:, i])])
    return AngleOverflow(recipe=recipe.name, length=L, non_finite=count, first_overflow=tuple(first))


# --------------------------------------------------------------------------- checks (data helpers)


def close(key: str, tol: float) -> Check:
    """The published number ``key`` agrees with the measured one within ``tol`` (absolute)."""

    def check(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
        p, m = pub[key], mea[key]
        if abs(p - m) <= tol:
            return None
        return f"{key}: published {p:g}, measured {m:.6g} (|diff| {abs(p - m):.3g} > {tol:g})"

    return check


def claim(key: str, holds: Callable[[Mapping[str, Any]], bool], numbers: str) -> Check:
    """A stated claim (published[key], text) that the measurement confirms when ``holds(measured)``.

    ``numbers`` is a format string over the measured figures: the reason shown when it fails.
    """

    def check(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
        if holds(mea):
            return None
        return f"{key}: published {pub[key]!r}; measured " + numbers.format(**mea)

    return check


# --------------------------------------------------------------------------- the catalog


@dataclass(frozen=True)
class Incident:
    """One public report: where, what code path, what it states, and how to measure it."""

    name: str
    reference: str  # "owner/repo#number"
    year: int
    what: str
    code_path: str
    recipe: dict[str, str]
    settings: dict[str, Any]
    published: Figures
    published_source: str
    measure: Callable[[], Figures]
    checks: tuple[Check, ...]
    explanation: str

    def __post_init__(self) -> None:
        if not self.name or ("#" not in self.reference and self.name != "baichuan"):
            raise ValueError(f"incident {self.name!r}: reference {self.reference!r} must be owner/repo#number")
        if not 2000 < self.year < 2100:
            raise ValueError(f"incident {self.name!r}: year {self.year!r} out of range")

    @property
    def url(self) -> str:
        """The public address of the report (GitHub issue or pull request)."""
        repo, _, num = self.reference.partition("#")
        return f"https://github.com/{repo}/issues/{num}" if num else self.reference


@dataclass(frozen=True)
class IncidentResult(Row):
    """One catalog entry run: the report's figures next to the tool's, and the verdict."""

    name: str
    reference: str
    year: int
    what: str
    code_path: str
    recipe: dict[str, str]
    settings: dict[str, Any]
    published: Figures
    published_source: str
    measured: Figures
    verdict: str
    reasons: tuple[str, ...]
    explanation: str
    url: str = field(default="")

    def __post_init__(self) -> None:
        if self.verdict not in ("reproduced", "differs"):
            raise ValueError(f"verdict {self.verdict!r} must be 'reproduced' or 'differs'")


def _r(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _stages(recipe: Recipe) -> dict[str, str]:
    return dict(recipe.stages)


# ---- baichuan


def _measure_baichuan() -> Figures:
    from .positions import predict_positions

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
        "max_abs_cos_diff": _r(float(diff.max())),
        "max_abs_cos_diff_at": [int(pos), int(col)],
        "max_abs_cos_error_vs_exact": _r(float(np.abs(lo["cos"] - exact).max())),
        "bf16_max_abs_cos_diff": _r(float(np.abs(bf["cos"] - hi["cos"]).max())),
    }


# ---- transformers-25681

_LLAMA = RopeSchedule(head_dim=128, base=10000.0)


def _measure_25681() -> Figures:
    rows = {r.recipe + "/" + r.dtype: r for r in audit(
        _LLAMA, [preset("lowp", "bf16"), preset("lowp", "fp16"), preset("fp32", "bf16")], 2048)}
    b, h, f = rows["lowp/bfloat16"], rows["lowp/float16"], rows["fp32/bfloat16"]
    return {
        "bf16_max_rotation_error": _r(b.max_rotation_error),
        "bf16_mean_rotation_error": _r(b.mean_rotation_error),
        "bf16_colliding_positions": b.colliding_positions,
        "fp16_max_rotation_error": _r(h.max_rotation_error),
        "fp16_mean_rotation_error": _r(h.mean_rotation_error),
        "fix_fp32_max_rotation_error": _r(f.max_rotation_error),
        "bf16_cache_bound": _r(f.cache_bound),
    }


# ---- transformers-29285

_GEMMA = RopeSchedule(head_dim=256, base=10000.0)


def _measure_29285() -> Figures:
    recs = [preset("lowp", "bf16"), preset("lowp", "fp16"), preset("fp32", "bf16")]
    rows = {(r.recipe, r.dtype, r.length): r for r in audit(_GEMMA, recs, [1024, 2048, 8192])}
    return {
        "bf16_max_angle_error_1024": _r(rows["lowp", "bfloat16", 1024].max_angle_error),
        "bf16_max_angle_error_8192": _r(rows["lowp", "bfloat16", 8192].max_angle_error),
        "bf16_mean_angle_error_8192": _r(rows["lowp", "bfloat16", 8192].mean_angle_error),
        "bf16_colliding_positions_8192": rows["lowp", "bfloat16", 8192].colliding_positions,
        "fp16_max_angle_error_2048": _r(rows["lowp", "float16", 2048].max_angle_error),
        "fp16_max_angle_error_8192": _r(rows["lowp", "float16", 8192].max_angle_error),
        "fp16_mean_angle_error_8192": _r(rows["lowp", "float16", 8192].mean_angle_error),
        "fix_fp32_max_angle_error_8192": _r(rows["fp32", "bfloat16", 8192].max_angle_error),
    }


# ---- modded-nanogpt-39

_NANOGPT = RopeSchedule(head_dim=128, base=10000.0)
_NANOGPT_LENGTHS = (1024, 8192, 65536)


def _measure_nanogpt() -> Figures:
    bug = apply_errors(_NANOGPT, preset("fp32", "bf16"), _NANOGPT_LENGTHS, "bf16", "elementwise")
    fix = apply_errors(_NANOGPT, preset("fp32", "fp32"), _NANOGPT_LENGTHS, "bf16", "fp32-then-cast")
    cache = audit(_NANOGPT, preset("fp32", "bf16"), [1024, 65536])
    att_bug = attention_errors(_NANOGPT, preset("fp32", "bf16"), 65536, [1, 1024, 65535], apply="bf16")
    att_fix = attention_errors(_NANOGPT, preset("fp32", "fp32"), 65536, [1, 1024, 65535], apply="bf16",
                               mode="fp32-then-cast")
    out: Figures = {}
    for name, rows in (("bf16_cache", bug), ("fp32_cache", fix)):
        for r in rows:
            out[f"{name}_max_rel_error_{r.band_start}_{r.band_stop}"] = _r(r.max_rel_error, 4)
    out["bf16_cache_max_rotation_error_1024"] = _r(cache[0].max_rotation_error, 4)
    out["bf16_cache_max_rotation_error_65536"] = _r(cache[1].max_rotation_error, 4)
    out["bf16_cache_bound"] = _r(cache[0].cache_bound, 4)
    out["fp32_cache_max_rotation_error_65536"] = _r(audit(_NANOGPT, preset("fp32", "fp32"), 65536)[0].max_rotation_error, 4)
    out["bf16_cache_max_logit_error_65536"] = _r(max(r.max_logit_error for r in att_bug), 4)
    out["fp32_cache_max_logit_error_65536"] = _r(max(r.max_logit_error for r in att_fix), 4)
    out["bf16_cache_spread_65536"] = _r(max(r.score_spread for r in att_bug), 4)
    out["fp32_cache_spread_65536"] = _r(max(r.score_spread for r in att_fix), 4)
    return out


def _nanogpt_no_growth(m: Mapping[str, Any]) -> bool:
    first = m["bf16_cache_max_rel_error_0_1024"]
    last = m["bf16_cache_max_rel_error_8192_65536"]
    return bool(last > 2 * first)


# ---- candle-3520

_QWEN25 = RopeSchedule(head_dim=128, base=1000000.0)


def _measure_candle() -> Figures:
    p = 15962.0
    v = float(round_to([p], "bf16")[0])
    step = float(spacing([p], "bf16")[0])
    theta = _QWEN25.inv_freq()
    st = run_recipe(preset("lowp", "bf16"), _QWEN25, [15962])
    rows = audit(_QWEN25, [preset("lowp", "bf16"), preset("fp32", "bf16")], [16384, 32768])
    at = {(r.recipe, r.length): r for r in rows}
    return {
        "bf16_value_of_15962": v,
        "bf16_neighbours_of_15962": [v, v + step] if v < p else [v - step, v],
        "bf16_spacing_at_15962": step,
        "frequency_index_with_inv_freq_1": int(np.flatnonzero(theta == 1.0)[0]),
        "wavelength_tokens_of_that_frequency": _r(2 * math.pi / float(theta[0])),
        "cos_15962": _r(math.cos(15962.0), 4),
        "cos_15968": _r(math.cos(15968.0), 4),
        "cos_15936": _r(math.cos(15936.0), 4),
        "stored_bf16_cos_15962_freq0": float(st["cos"][0, 0]),
        "angle_error_15962_freq0": _r(abs(float(wrap(v - 15962.0))), 4),
        "bf16_max_rotation_error_16384": _r(at["lowp", 16384].max_rotation_error, 4),
        "bf16_colliding_positions_32768": at["lowp", 32768].colliding_positions,
        "fix_fp32_max_rotation_error_32768": _r(at["fp32", 32768].max_rotation_error, 4),
    }


def _candle_rounding(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
    v, nb = mea["bf16_value_of_15962"], mea["bf16_neighbours_of_15962"]
    stated = list(pub["bf16_value_of_15962"])
    if sorted(stated) == sorted(nb):
        return None
    missing = [x for x in stated if float(round_to([x], "bf16")[0]) != x]
    return (f"bf16_value_of_15962: published {' or '.join(f'{x:g}' for x in stated)}; measured {v:g} "
            f"(round to nearest even; neighbours {nb[0]:g} and {nb[1]:g})"
            + (f"; {', '.join(f'{x:g}' for x in missing)} is not a bfloat16 value" if missing else ""))


# ---- cactus-688

_QWEN3 = RopeSchedule(head_dim=128, base=1000000.0)
_CACTUS_BUG = preset("lowp", "fp16")
_CACTUS_FIX = preset("fp64", "fp16")


def _measure_cactus() -> Figures:
    theta, m = _QWEN3.inv_freq(), np.arange(16384)
    st = run_recipe(_CACTUS_BUG, _QWEN3, m)
    p1 = m[:, None] * theta[None, :]  # float64 product: within 2**-53 relative of m*theta, far below 1e-6 rad
    unwrapped = np.abs(st["angle"] - p1).max(axis=1)
    wrapped = np.abs(wrap(st["angle"] - exact_angles(m, theta))).max(axis=1)
    rows = {(r.recipe, r.length): r for r in audit(_QWEN3, [_CACTUS_BUG, _CACTUS_FIX], [2048, 4096, 6144, 16384])}
    ov = angle_overflow(_QWEN3, _CACTUS_BUG, 131072)
    firsts = {x for x in ov.first_overflow}
    return {
        "fp16_exact_positions_up_to": get_format("fp16").max_exact_integer,
        "max_angle_error_6144": _r(rows["lowp", 6144].max_angle_error, 4),
        "max_angle_error_2048": _r(rows["lowp", 2048].max_angle_error, 4),
        "max_angle_error_4096": _r(rows["lowp", 4096].max_angle_error, 4),
        "max_angle_error_16384": _r(rows["lowp", 16384].max_angle_error, 4),
        "max_unwrapped_angle_error_6144": _r(float(unwrapped[:6144].max()), 4),
        "max_unwrapped_angle_error_16384": _r(float(unwrapped.max()), 4),
        "first_position_angle_error_over_1_rad": int(np.argmax(wrapped > 1.0)),
        "first_position_angle_error_over_2_rad": int(np.argmax(wrapped > 2.0)),
        "non_finite_angles_131072": ov.non_finite,
        "first_overflow_position": sorted(firsts, key=lambda x: (x is None, x))[0],
        "frequencies_overflowing": sum(x is not None for x in ov.first_overflow),
        "fix_max_rotation_error_16384": _r(rows["fp64", 16384].max_rotation_error, 4),
        "fp16_cache_bound": _r(rows["fp64", 16384].cache_bound, 4),
    }


# ---- mlx-lm-1076

_QWEN3_NEXT = RopeSchedule(head_dim=256, rotary_dim=64, base=10000000.0)
_MLX_BANDS = (2048, 262144, 393216)


def _measure_mlx() -> Figures:
    f32 = preset("fp32", "fp32")
    kernel = apply_errors(_QWEN3_NEXT, f32, _MLX_BANDS, "fp16", "fp32-then-cast")
    eager = apply_errors(_QWEN3_NEXT, preset("fp32", "fp16"), _MLX_BANDS, "fp16", "elementwise")
    exact_angle = apply_errors(_QWEN3_NEXT, preset("fp64", "float64"), _MLX_BANDS, "fp16", "fp32-then-cast")
    ang = audit(_QWEN3_NEXT, f32, [262144, 393216])
    theta = _QWEN3_NEXT.inv_freq()
    out: Figures = {
        "fp16_epsilon": math.ldexp(1.0, -10),
        "fp16_smallest_subnormal": math.ldexp(1.0, -24),
        "fp32_unit_roundoff": math.ldexp(1.0, -24),
        "highest_frequency_change_per_token": _r(2 * math.sin(float(theta[0]) / 2)),
        "lowest_frequency_change_per_token": _r(2 * math.sin(float(theta[-1]) / 2)),
        "fp32_max_angle_error_262144": _r(ang[0].max_angle_error, 4),
        "fp32_max_angle_error_393216": _r(ang[1].max_angle_error, 4),
    }
    for name, rows in (("kernel", kernel), ("eager", eager), ("exact_angle", exact_angle)):
        for r in rows:
            band = f"{r.band_start}_{r.band_stop}"
            out[f"{name}_identical_neighbours_{band}"] = r.identical_neighbours
            out[f"{name}_identical_components_{band}"] = _r(r.identical_components, 4)
            out[f"{name}_max_rel_error_{band}"] = _r(r.max_rel_error, 4)
    out["adjacent_identical_beyond_262144"] = out["kernel_identical_neighbours_262144_393216"]
    return out


_FP16_Q = "q/k in float16"

CATALOG: dict[str, Incident] = {
    i.name: i
    for i in (
        Incident(
            name="baichuan",
            reference="baichuan-inc (WeChat article, 2023)",
            year=2023,
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
            what="RotaryEmbedding cos/sin tables built in fp16 (inv_freq.half())",
            code_path="inv_freq.half(); t = arange(seqlen).type_as(inv_freq); freqs = einsum('i,j->ij', t, "
                      "inv_freq) in fp16; emb.cos() in fp16; compared with the same code in fp32",
            recipe=_stages(_NEOX_FP16),
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
            what="Llama rotary cache wrong after casting the model to fp16/bf16",
            code_path="LlamaRotaryEmbedding._set_cos_sin_cache(dtype=torch.get_default_dtype()): t = arange(seq, "
                      "dtype=dtype); einsum(t, inv_freq.to(dtype)); emb.cos().to(dtype): every stage in the model "
                      "dtype when the model is built or recomputed in bf16/fp16",
            recipe=_stages(preset("lowp", "bf16")),
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
        ),
        Incident(
            name="transformers-29285",
            reference="huggingface/transformers#29285",
            year=2024,
            what="RoPE angles computed in bf16 under autocast (Llama/Gemma)",
            code_path="inv_freq_expanded.float() @ position_ids_expanded.float() inside torch.autocast(bf16): the "
                      "matmul casts both to bf16 and returns bf16; emb.cos()/sin() in bf16",
            recipe=_stages(preset("lowp", "bf16")),
            settings={"head_dim": 256, "base": 10000.0, "length": 8192, "model": "Gemma"},
            published={"bf16": "positional encodings lose precision dramatically, especially for very large "
                               "context lengths",
                       "fp16": "on float16 this issue does not occur (training loss curves match)"},
            published_source="PR description (danielhanchen, 2024-02-26); figures there are plots, no numbers",
            measure=_measure_29285,
            checks=(claim("bf16", lambda m: m["bf16_max_angle_error_8192"] > 1.0
                          and m["bf16_max_angle_error_8192"] > m["bf16_max_angle_error_1024"],
                          "bf16 max angle error {bf16_max_angle_error_1024} rad at 1024, "
                          "{bf16_max_angle_error_8192} rad at 8192"),
                    claim("fp16", lambda m: m["fp16_max_angle_error_8192"] < 10 * m["fix_fp32_max_angle_error_8192"],
                          "the same path in fp16 has max angle error {fp16_max_angle_error_2048} rad at 2048 and "
                          "{fp16_max_angle_error_8192} rad at 8192 (mean {fp16_mean_angle_error_8192}); fp32 fix "
                          "{fix_fp32_max_angle_error_8192} rad")),
            explanation="Under bf16 autocast positions above 256 collide and the product keeps 8 bits, so angles "
                        "are off by up to pi at 8K. The fp16 claim does not hold for RoPE itself: fp16 positions are "
                        "exact only to 2048 and the fp16 product rounds the angle to a spacing of 4 near 8K; the "
                        "matching loss curves say the damage did not show in that training run, not that fp16 "
                        "angles are accurate.",
        ),
        Incident(
            name="modded-nanogpt-39",
            reference="KellerJordan/modded-nanogpt#39",
            year=2024,
            what="cos/sin cache stored in bf16, rotation applied in bf16",
            code_path="fp32 inv_freq, positions, outer product and cos/sin; cos_cached = freqs.cos().bfloat16(); "
                      "apply: y1 = x1*cos + x2*sin on bf16 q/k (each op rounded to bf16). Fix: .float() cache, so the "
                      "apply runs in fp32 and .type_as(x) casts the result",
            recipe={**_stages(preset("fp32", "bf16")), "apply": "bfloat16 (elementwise)"},
            settings={"head_dim": 128, "base": 10000.0, "lengths": list(_NANOGPT_LENGTHS)},
            published={"claim": "significant precision issues; numerical errors accumulate in long context",
                       "val_loss_fp32_cache": 3.2783, "val_loss_bf16_cache": "3.28... (cut off in the stored copy)"},
            published_source="issue text (banyan-god, 2024-11-29) and comment with step 1750/1750 val_loss; the "
                             "context length used is not stated (settings here: 1K and the 64K speedrun context)",
            measure=_measure_nanogpt,
            checks=(claim("claim", _nanogpt_no_growth,
                          "max relative error of the rotated q with the bf16 cache {bf16_cache_max_rel_error_0_1024} "
                          "in [0, 1024) and {bf16_cache_max_rel_error_8192_65536} in [8192, 65536) (fp32 cache: "
                          "{fp32_cache_max_rel_error_0_1024} and {fp32_cache_max_rel_error_8192_65536}); cache "
                          "rotation error {bf16_cache_max_rotation_error_1024} rad at 1K, "
                          "{bf16_cache_max_rotation_error_65536} rad at 64K (bound {bf16_cache_bound})"),),
            explanation="Storing cos/sin in bf16 costs one bf16 rounding per entry (<= 2.8e-3 rad of rotation) and "
                        "the bf16 elementwise apply a few more; both are the same at every position, so the relative "
                        "error of the rotated q does not grow with context length. The rotation error that does grow "
                        "(to 5.9e-3 rad at 64K) is the fp32 angle's, shared by the fix. The fp32 cache with a cast result halves the relative "
                        "error of the rotated q; the val_loss difference (3.2783 vs 3.28..) is the only evidence "
                        "of an effect and the tool cannot measure it.",
        ),
        Incident(
            name="candle-3520",
            reference="huggingface/candle#3520",
            year=2026,
            what="qwen2 rotary table built in bf16 (inv_freq and positions cast before the matmul)",
            code_path="RotaryEmbedding::new in candle-transformers qwen2.rs: inv_freq.to_dtype(bf16), "
                      "arange(0, max_seq_len).to_dtype(bf16), t.matmul(inv_freq) and sin()/cos() in bf16",
            recipe=_stages(preset("lowp", "bf16")),
            settings={"head_dim": 128, "base": 1000000.0, "lengths": [16384, 32768], "model": "Qwen2.5-VL (Jina v4)"},
            published={"bf16_value_of_15962": [15936.0, 15968.0], "bf16_spacing_at_15962": 16.0,
                       "cos_15962": -0.547, "cos_15968": -0.882,
                       "frequency": "low-frequency dims where inv_freq[0] = 1.0"},
            published_source="PR description (toddwbucy, 2026-05-07): 'position 15962 rounds to neighbouring bf16 "
                             "values 15936 or 15968 (16-step granularity)', 'cos(15962) ~ -0.547 vs cos(15968) ~ "
                             "-0.882'",
            measure=_measure_candle,
            checks=(_candle_rounding, close("bf16_spacing_at_15962", 0.0), close("cos_15962", 5e-4),
                    close("cos_15968", 5e-4),
                    claim("frequency", lambda m: m["wavelength_tokens_of_that_frequency"] > 1000,
                          "inv_freq = 1 is frequency index {frequency_index_with_inv_freq_1}, the highest frequency "
                          "(wavelength {wavelength_tokens_of_that_frequency} tokens)")),
            explanation="bf16 spacing in [8192, 16384) is 64, not 16: 15962 rounds to 15936 (its neighbours are "
                        "15936 and 16000; 15968 is not a bf16 value). cos(15962) = -0.908 and cos(15968) = -0.755, "
                        "not -0.547 / -0.882; the stored angle 15936 gives cos -0.268, 0.87 rad off. inv_freq = 1 "
                        "is the fastest-turning pair. The report's conclusion (the bf16 table is noise at 16K) holds; "
                        "its numbers do not.",
        ),
        Incident(
            name="cactus-688",
            reference="cactus-compute/cactus#688",
            year=2026,
            what="RoPE angle position * inv_freq computed in fp16 (transpiled graph)",
            code_path="fp16 graph: position ids and inv_freq in fp16, angle = position * inv_freq in fp16, cos/sin "
                      "in fp16. Fix: cos/sin tables precomputed in fp64, stored in fp16, gathered by position",
            recipe=_stages(_CACTUS_BUG),
            settings={"head_dim": 128, "base": 1000000.0, "lengths": [2048, 4096, 6144, 16384, 131072],
                      "model": "Qwen3"},
            published={"fp16_exact_positions_up_to": 2048, "max_angle_error_6144": "several radians",
                       "fix": "matches MLX through 16k"},
            published_source="PR description (ncylich, 2026-06-04): 'cannot represent absolute positions > 2048 "
                             "exactly. Past ~6k context the angle error reaches several radians'",
            measure=_measure_cactus,
            checks=(close("fp16_exact_positions_up_to", 0),
                    claim("max_angle_error_6144", lambda m: m["max_unwrapped_angle_error_6144"] >= 2.0,
                          "max angle error {max_unwrapped_angle_error_6144} rad by 6144 (unwrapped)"),
                    claim("fix", lambda m: m["fix_max_rotation_error_16384"] <= m["fp16_cache_bound"],
                          "fp64->fp16 table rotation error {fix_max_rotation_error_16384} rad > bound "
                          "{fp16_cache_bound}")),
            explanation="fp16 integers are exact to 2048; from 4096 to 8192 the spacing is 4, so the position alone "
                        "is up to 2 off and the fp16 product adds more: by 6144 angles are up to ~4 rad off "
                        "(unwrapped), i.e. random phases, but errors above 1 rad start right after 2048. From "
                        "position 65520 every angle is inf (cos/sin NaN). The fp64-built fp16 table is exact to the "
                        "fp16 rounding bound at every length.",
        ),
        Incident(
            name="mlx-lm-1076",
            reference="ml-explore/mlx-lm#1076",
            year=2026,
            what="fp32 angles, rotation applied to fp16 q/k (Qwen3-Next / Qwen3.5)",
            code_path="nn.RoPE -> mx.fast.rope on fp16 q/k: angle = position * inv_freq in fp32, cos/sin in fp32; "
                      "the Metal and CUDA kernels rotate x1*cos - x2*sin in fp32 and cast the result to fp16 once "
                      "(fp32-then-cast: the kernel_* figures), while MLX's CPU path casts cos/sin to fp16 and "
                      "rotates op by op in fp16 (elementwise, as the PR models it: the eager_* figures). The PR "
                      "casts q/k to fp32 around rope",
            recipe={**_stages(preset("fp32", "fp32")), "apply": "float16 (fp32-then-cast)"},
            settings={"head_dim": 256, "rotary_dim": 64, "base": 10000000.0, "bands": [0, *_MLX_BANDS]},
            published={"fp16_epsilon": 6e-8, "adjacent_identical_beyond_262144": "adjacent token positions become "
                       "numerically identical beyond 262K",
                       "claim": "the delta between high-frequency components falls below fp16 epsilon"},
            published_source="PR description (Thump604, 2026-03-31): 'beyond 262K, the delta between high-frequency "
                             "embedding components falls below FP16 epsilon (~6e-8)'",
            measure=_measure_mlx,
            checks=(close("fp16_epsilon", 1e-9),
                    claim("adjacent_identical_beyond_262144", lambda m: m["adjacent_identical_beyond_262144"] > 0,
                          "{kernel_identical_neighbours_262144_393216} of the sampled positions in [262144, 393216) "
                          "rotate q exactly like the next position (also {kernel_identical_neighbours_0_2048} in "
                          "[0, 2048)); the share of single components equal to the next position's is "
                          "{kernel_identical_components_0_2048} in [0, 2048) and "
                          "{kernel_identical_components_262144_393216} beyond 262K"),
                    claim("claim", lambda m: m["highest_frequency_change_per_token"] < m["fp16_epsilon"],
                          "the highest frequency moves a unit pair by {highest_frequency_change_per_token} per "
                          "token; only the slowest pairs move less than fp16 resolution "
                          "({lowest_frequency_change_per_token} per token), at every position")),
            explanation="fp16 machine epsilon is 2**-10 = 9.8e-4; 6e-8 is 2**-24, fp16's smallest subnormal (and "
                        "fp32's unit roundoff). High-frequency pairs turn up to 1 rad per token, so neighbours never "
                        "coincide; the slow pairs (theta down to 1.6e-7 rad/token) round to the same fp16 value for "
                        "neighbouring positions at 1K as at 384K: nothing changes at 262K. What does grow is the fp32 "
                        "angle: up to ~0.015 rad at 384K, which dominates the fp16 rounding of the result "
                        "(relative error ~3e-4 with exact angles) and which the PR's fp32 cast of q/k does not touch.",
        ),
    )
}


def incident_names() -> list[str]:
    """The catalog's names, in catalog order.

    >>> incident_names()[:2]
    ['baichuan', 'gpt-neox-1003']
    """
    return list(CATALOG)


def reproduce(name: str) -> IncidentResult:
    """Run one catalog entry: measure its code path and judge each published figure.

    >>> reproduce("candle-3520").measured["bf16_value_of_15962"]
    15936.0
    >>> reproduce("nope")
    Traceback (most recent call last):
    ...
    ValueError: unknown incident 'nope'; valid: baichuan, gpt-neox-1003, transformers-25681, transformers-29285, modded-nanogpt-39, candle-3520, cactus-688, mlx-lm-1076
    """
    try:
        inc = CATALOG[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown incident {name!r}; valid: {', '.join(CATALOG)}") from None
    measured = inc.measure()
    reasons = tuple(r for r in (c(inc.published, measured) for c in inc.checks) if r is not None)
    return IncidentResult(
        name=inc.name,
        reference=inc.reference,
        year=inc.year,
        what=inc.what,
        code_path=inc.code_path,
        recipe=dict(inc.recipe),
        settings=dict(inc.settings),
        published=dict(inc.published),
        published_source=inc.published_source,
        measured=measured,
        verdict="differs" if reasons else "reproduced",
        reasons=reasons,
        explanation=inc.explanation,
        url=inc.url,
    )
