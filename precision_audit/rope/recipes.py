"""The RoPE recipe vocabulary: stages, how each stage's value is made, and the named presets.

A :class:`Recipe` is one number format per stage of the computation
(:data:`STAGES`: positions -> inv_freq -> angle -> trig -> cache) plus the
fields that say how a value is made where real code differs (``inv_freq_from``:
the formula evaluated in a format, or the exact value rounded once; ``apply``
and ``apply_mode``: how q/k are rotated).  A preset is one row of
:data:`PRESETS`: those fields, with :data:`DTYPE` standing for the target
dtype, and the code path it stands for.  :func:`parse_stages` builds a custom
recipe, :func:`stored_inv_freq` and :func:`effective_recipe` say what a
recipe's code holds and runs for a given schedule and pass.

>>> preset("lowp", "fp16").how["angle"], parse_stages("angle=bf16").how["angle"]
('product rounded to float16', 'product rounded to bfloat16')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..checks import check_choice
from ..formats import Format, get_format, round_to
from .schedules import ROPE_TYPES, RopeSchedule
from .formulas import ANGLE_HOWS, INV_FREQ_HOWS, AngleMaker, angle_maker, how_inv_freq, scaled_product_maker
from .oracle import F64

__all__ = [
    "APPLY_MODES",
    "DTYPE",
    "PRESETS",
    "SCALINGS",
    "STAGES",
    "Preset",
    "Recipe",
    "effective_recipe",
    "parse_stages",
    "preset",
    "stored_inv_freq",
]

FAST_MATH: tuple[str, ...] = ("powf", "sincosf")  # CUDA fast-math intrinsics a recipe may name (:mod:`.cuda` bounds them)

STAGES: tuple[str, ...] = ("positions", "inv_freq", "angle", "trig", "cache")
# the rotation of q/k by the stored cos/sin (measured by precision_audit.rope.attention, not by the cache audit)
APPLY_MODES: tuple[str, ...] = ("elementwise", "fp32-then-cast", "fused")
SCALINGS: tuple[str, ...] = ROPE_TYPES


_HOW_TEXT = {
    "exp-log": "exp(-i * ln(base)/(d/2)) in float32, MLX's CPU exp polynomial",
    "exp2-log2": "exp2(-(i/(d/2)) * log2(base)) in float32",
    "repeated-product": "float32: theta = p, then theta *= powf(base, -2/d) per pair; / freq factor, "
                        "* freq_scale, YaRN mix (ggml CPU)",
    "power-product": "float32: p * powf(powf(base, -2/d), i); / freq factor, * freq_scale, YaRN mix (ggml CUDA)",
    "mlx-lm": "1.0f / mlx-lm's float32 freqs (SuScaledRoPE: long factors; YarnRoPE: its blend, rounded ramp "
              "bounds; ProportionalRoPE)",
    "pow64-recip32": "fl32(scale / fl32(base ** (2i/d) in float64)) (numpy float32 table; llama3 bands in float64)",
    "rcp-pow": "powf(fl32(1/base), fl32(2j/d)) in float32 (FlashInfer's on-the-fly kernel)",
    "position-over-timescale": "float32: p / (base ** (2i/d) [* linear factor]), a division (MaxText, TensorRT-LLM's "
                               "on-the-fly kernel)",
    "scaled-product": "float32: fl32(p * fl32(1/factor)) * inv_freq, the positions scaled before the product "
                      "(MLX's scale, TransformerEngine's seq *= 1/factor)",
}


def _opmath(fmt: str) -> str:
    """The format torch does a float op in: float64 for float64, float32 otherwise."""
    return "float64" if fmt == "float64" else "float32"


@dataclass(frozen=True)
class Recipe:
    """One number format per stage (positions, inv_freq, angle, trig, cache) and how inv_freq is made.

    ``inv_freq_from`` is a format G: the schedule's formula evaluated in G
    (every operation rounded to G), then stored in the ``inv_freq`` format;
    ``"exact"``: the exact value rounded once to the ``inv_freq`` format.
    The default is what real code does: the formula in float32 (float64 for a
    float64 stage), e.g. a float32 buffer that ``module.to(bf16)`` casts.
    ``apply`` is the format q/k are rotated in (default: the cache format, as
    a model in that dtype runs ``q*cos + rotate_half(q)*sin``); ``apply_mode``
    ``"elementwise"`` rounds every product and sum to it, ``"fp32-then-cast"``
    computes the rotation in float32 and casts the result (vLLM's, MLX's and
    flash-attention's kernels), ``"fused"`` rounds one product to it and fuses the other into the sum
    (triton's multiply-add contraction in liger's and unsloth's kernels).
    ``overrides``: schedule fields the code computes its frequencies with in
    place of the declared ones (a stack that always rounds YaRN's ramp bounds:
    ``(("truncate", True),)``); errors stay measured against the declared
    schedule, so the difference shows as error (see :meth:`runs_on`).
    ``fast_math``: the float32 functions the device code runs as CUDA
    fast-math intrinsics (``"powf"``, ``"sincosf"``): correctly rounded ones
    stand in and the rows are widened into bounds (:mod:`.cuda`).

    >>> r = preset("fp32", "bf16")
    >>> r.stages
    {'positions': 'float32', 'inv_freq': 'float32', 'angle': 'float32', 'trig': 'float32', 'cache': 'bfloat16'}
    >>> r.how["inv_freq"], preset("lowp-inv-freq", "bf16").how["inv_freq"]
    ('formula in float32', 'formula in float32, stored in bfloat16')
    >>> Recipe("x", "bf16", "fp32", "fp32", "fp32", "fp9")
    Traceback (most recent call last):
    ...
    ValueError: recipe 'x' stage cache: unknown dtype 'fp9'; valid names: float64, float32, float16, bfloat16, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn, tf32, tf32-rz (aliases: bf16, double, e2m1, e4m3, e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, f16, f32, f64, float, fp16, fp32, fp4, fp64, fp6_e2m3, fp6_e3m2, fp8_e4m3, fp8_e5m2, half, single, tensorfloat32, tf32_rz)
    """

    name: str
    positions: str
    inv_freq: str
    angle: str
    trig: str
    cache: str
    inv_freq_from: str | None = None
    apply: str | None = None
    apply_mode: str = "elementwise"
    angle_from: str = "product"
    stack: str | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    fast_math: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"recipe name {self.name!r} must be a non-empty string")
        fields = RopeSchedule.__dataclass_fields__
        bad = [k for k, _ in self.overrides if k not in fields]
        if bad:
            raise ValueError(f"recipe {self.name!r}: override {bad[0]!r} is not a schedule field")
        for stage in STAGES:
            try:
                fmt = get_format(getattr(self, stage))
            except ValueError as e:
                raise ValueError(f"recipe {self.name!r} stage {stage}: {e}") from None
            object.__setattr__(self, stage, fmt.name)
        src = self.inv_freq_from
        if src is None:
            src = _opmath(self.inv_freq)
        elif src != "exact" and src not in INV_FREQ_HOWS:
            try:
                src = get_format(src).name
            except ValueError as e:
                raise ValueError(f"recipe {self.name!r} inv_freq_from: {e} (or 'exact', "
                                 f"{', '.join(INV_FREQ_HOWS)})") from None
        object.__setattr__(self, "inv_freq_from", src)
        if self.angle_from not in ANGLE_HOWS:
            raise ValueError(f"recipe {self.name!r}: unknown angle how {self.angle_from!r}; "
                             f"valid: {', '.join(ANGLE_HOWS)}")
        try:
            object.__setattr__(self, "apply", get_format(self.cache if self.apply is None else self.apply).name)
        except ValueError as e:
            raise ValueError(f"recipe {self.name!r} stage apply: {e}") from None
        if self.apply_mode not in APPLY_MODES:
            raise ValueError(f"recipe {self.name!r}: unknown apply mode {self.apply_mode!r}; "
                             f"valid: {', '.join(APPLY_MODES)}")
        self._check_fast_math()

    def _check_fast_math(self) -> None:
        """The intrinsics named must be modelled (:data:`FAST_MATH`) for float32 values made on the device."""
        object.__setattr__(self, "fast_math", tuple(self.fast_math))
        bad = [f for f in self.fast_math if f not in FAST_MATH]
        if bad:
            raise ValueError(f"recipe {self.name!r}: unknown fast-math function {bad[0]!r}; "
                             f"valid: {', '.join(FAST_MATH)}")
        if self.fast_math and (self.trig, self.cache, self.angle) != ("float32",) * 3:
            raise ValueError(f"recipe {self.name!r}: fast-math bounds are modelled for float32 angles and cos/sin "
                             f"made on the device, not angle {self.angle}, trig {self.trig}, cache {self.cache}")
        if "powf" in self.fast_math and not (self.angle_from == "power-product" or self.inv_freq_from == "rcp-pow"):
            raise ValueError(f"recipe {self.name!r}: fast-math powf needs a power computed on the device "
                             f"(angle_from 'power-product' or inv_freq_from 'rcp-pow')")

    @property
    def stages(self) -> dict[str, str]:
        """Stage name -> canonical format name."""
        return {s: getattr(self, s) for s in STAGES}

    @property
    def how(self) -> dict[str, str]:
        """Stage name -> how its value is made (in words)."""
        out = {s: f"rounded to {getattr(self, s)}" for s in STAGES}
        out["positions"] = f"integers rounded to {self.positions}"
        if self.inv_freq_from == "exact":
            out["inv_freq"] = f"exact value rounded to {self.inv_freq}"
        elif self.inv_freq_from in INV_FREQ_HOWS:
            out["inv_freq"] = f"{_HOW_TEXT[self.inv_freq_from]}, stored in {self.inv_freq}"
        elif self.inv_freq_from == self.inv_freq:
            out["inv_freq"] = f"formula in {self.inv_freq}"
        else:
            out["inv_freq"] = f"formula in {self.inv_freq_from}, stored in {self.inv_freq}"
        out["angle"] = (f"product rounded to {self.angle}" if self.angle_from == "product"
                        else _HOW_TEXT[self.angle_from])
        out["trig"] = (f"cos/sin rounded to {self.trig}" if "sincosf" not in self.fast_math
                       else f"__sincosf in {self.trig} (CUDA fast math: a bound)")
        out["cache"] = f"stored in {self.cache}"
        out["apply"] = {"elementwise": f"q*cos + rotate_half(q)*sin, each operation in {self.apply}",
                        "fused": f"q*cos + rotate_half(q)*sin in {self.apply}, x1's product fused into the sum",
                        }.get(self.apply_mode, f"rotation in float32, cast to {self.apply}")
        return out

    def runs_on(self, schedule: RopeSchedule) -> RopeSchedule:
        """The schedule this recipe's code computes its frequencies from: ``schedule`` with :attr:`overrides`.

        >>> oss = RopeSchedule(head_dim=64, base=150000.0, scaling="yarn", factor=32.0, truncate=False,
        ...                    original_max_position_embeddings=4096)
        >>> replace(preset("fp32"), overrides=(("truncate", True),)).runs_on(oss).truncate
        True
        """
        return replace(schedule, **dict(self.overrides)) if self.overrides else schedule

    def with_exact(self, stage: str) -> "Recipe":
        """The same recipe with one stage made exact (float64), for the error budget."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; valid: {', '.join(STAGES)}")
        extra = {"inv_freq_from": "exact"} if stage == "inv_freq" else {}
        return replace(self, name=f"{self.name}/exact-{stage}", **{stage: "float64"}, **extra)


DTYPE = "dtype"  # in a preset row: the target dtype the preset is built for


@dataclass(frozen=True)
class Preset:
    """A named code path as data: :class:`Recipe`'s fields with :data:`DTYPE` for the target dtype.

    ``code`` names the real code the preset stands for.  Called with a
    canonical dtype name, a preset gives its five stage formats.

    >>> PRESETS["lowp-inv-freq"]("bfloat16")
    ('float32', 'bfloat16', 'float32', 'float32', 'bfloat16')
    """

    positions: str
    inv_freq: str
    angle: str
    trig: str
    cache: str
    inv_freq_from: str
    code: str
    apply: str | None = None
    apply_mode: str = "elementwise"
    angle_from: str = "product"
    overrides: tuple[tuple[str, Any], ...] = ()
    fast_math: tuple[str, ...] = ()
    label: str = ""  # how the bottom line names it
    fix: str | None = None  # what the bottom line tells its users to do (None: nothing to fix)

    def __post_init__(self) -> None:
        self.recipe("preset", "float32")  # a bad format or mode fails here, with Recipe's message

    def __call__(self, dtype: str) -> tuple[str, ...]:
        return tuple(_fill(getattr(self, s), dtype) for s in STAGES)

    def recipe(self, name: str, dtype: str) -> Recipe:
        """The preset as a :class:`Recipe` named ``name`` for the canonical dtype name ``dtype``."""
        return Recipe(name, *self(dtype), inv_freq_from=_fill(self.inv_freq_from, dtype),
                      apply=_fill(self.apply, dtype), apply_mode=self.apply_mode, angle_from=self.angle_from,
                      overrides=self.overrides, fast_math=self.fast_math)


def _fill(fmt: str | None, dtype: str) -> str | None:
    return dtype if fmt == DTYPE else fmt


_D, _F32, _F64 = DTYPE, "float32", "float64"

# One row per preset; inv_freq is the schedule's formula evaluated in float32 (float64 for fp64), as model
# code computes its buffer at init.
PRESETS: dict[str, Preset] = {
    #                        positions inv_freq angle trig cache inv_freq formula in
    "lowp": Preset(_D, _D, _D, _D, _D, _F32,
                   "everything in the target dtype, positions built in it (old Llama/NeoX caches)",
                   label="positions and angles in the model dtype (lowp)",
                   fix="build positions, inv_freq and angles in float32; cast only cos/sin"),
    "lowp-inv-freq": Preset(_F32, _D, _F32, _F32, _D, _F32,
                            "buffer downcast by .to(dtype), then used in fp32 (transformers 5)",
                            label="inv_freq buffer downcast (lowp-inv-freq)",
                            fix="call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)"),
    "fp32": Preset(_F32, _F32, _F32, _F32, _D, _F32, "the fix: fp32 until the cache",
                   label="float32 angles, cache in the dtype (fp32)",
                   fix="compute the angle in float64 (see the fp64 recipe)"),
    "fp64": Preset(_F64, _F64, _F64, _F64, _D, _F64, "beyond fp32: float64 angle and cos/sin, cache in dtype",
                   label="float64 angles, cache in the dtype (fp64)"),
}


def preset(name: str, dtype: str | Format = "bfloat16") -> Recipe:
    """A named recipe for a target dtype: ``lowp``, ``lowp-inv-freq``, ``fp32``, ``fp64``.

    >>> preset("lowp-inv-freq", "fp16").stages["inv_freq"]
    'float16'
    >>> preset("fp16x")
    Traceback (most recent call last):
    ...
    ValueError: unknown recipe 'fp16x'; valid: lowp, lowp-inv-freq, fp32, fp64
    """
    row = PRESETS[check_choice(name, "recipe", tuple(PRESETS))]
    return row.recipe(name, get_format(dtype).name)


def parse_stages(text: str, dtype: str | Format = "bfloat16", name: str | None = None) -> Recipe:
    """A custom recipe from ``"positions=bf16,inv_freq=fp32,..."``.

    Stages not given keep the ``fp32`` preset's format (cache: ``dtype``).
    ``inv_freq=F`` is the formula in float32 (float64 if F is) stored in F;
    ``inv_freq=F@G`` the formula evaluated in G, stored in F;
    ``inv_freq=F@exact`` the exact value rounded once to F.  ``apply=F``
    rotates q/k in F (default: the cache format), ``apply=F@fp32`` in float32
    with the result cast to F, ``apply=F@fused`` in F with one product of each
    output fused into the sum (the ``fused`` apply mode: triton's contraction).

    >>> parse_stages("positions=bf16").stages["positions"], parse_stages("positions=bf16").name
    ('bfloat16', 'positions=bf16')
    >>> parse_stages("inv_freq=bf16@bf16").how["inv_freq"]
    'formula in bfloat16'
    >>> parse_stages("apply=bf16@fused").apply_mode
    'fused'
    >>> parse_stages("angles=bf16")
    Traceback (most recent call last):
    ...
    ValueError: unknown stage 'angles' in 'angles=bf16'; valid: positions, inv_freq, angle, trig, cache, apply
    """
    base: dict[str, Any] = dict(preset("fp32", dtype).stages)
    source: str | None = None
    apply: dict[str, str] = {}
    for item in str(text).split(","):
        if not item.strip():
            continue
        stage, eq, fmt = item.partition("=")
        stage = stage.strip()
        if not eq:
            raise ValueError(f"stage item {item.strip()!r} in {text!r} is not STAGE=DTYPE")
        if stage == "apply":
            f, at, src = fmt.partition("@")
            src = src.strip()
            try:
                if not at:
                    mode = "elementwise"
                elif src.lower() == "fused":
                    mode = "fused"
                elif src and get_format(src).name == "float32":
                    mode = "fp32-then-cast"
                else:
                    raise ValueError("the @ forms are apply=F@fp32 (rotation in float32, then cast to F) and "
                                     "apply=F@fused (one product per output fused into the sum)")
                apply = {"apply": get_format(f.strip()).name, "apply_mode": mode}
            except ValueError as e:
                raise ValueError(f"stage apply in {text!r}: {e}") from None
            continue
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r} in {text!r}; valid: {', '.join(STAGES)}, apply")
        fmt, at, src = fmt.partition("@")
        if at and stage != "inv_freq":
            raise ValueError(f"stage {stage} in {text!r}: only inv_freq takes @FORMAT or @exact")
        try:
            base[stage] = get_format(fmt.strip()).name
            if at:
                source = "exact" if src.strip().lower() == "exact" else get_format(src.strip()).name
        except ValueError as e:
            raise ValueError(f"stage {stage} in {text!r}: {e}") from None
    return Recipe(name or str(text).replace(" ", ""), **base, inv_freq_from=source, **apply)


def stored_inv_freq(recipe: Recipe, schedule: RopeSchedule, seq_len: int | None = None,
                    engine: str = "numpy") -> F64 | AngleMaker:
    """The inverse frequencies a recipe's code holds for a pass over ``seq_len`` positions.

    The formula evaluated in ``recipe.inv_freq_from`` (numpy: correctly
    rounded; torch: this machine's kernels), rounded to the ``inv_freq``
    format.  ``dynamic`` above ``max_position_embeddings``: the module rebuilds
    the buffer in float32 from the formula, so a downcast buffer no longer
    matters (see :func:`effective_recipe`).  A recipe whose angle is not
    ``position * inv_freq`` (``angle_from``) gets the :class:`AngleMaker`
    that computes its angles.

    >>> s = RopeSchedule(head_dim=8)
    >>> stored_inv_freq(preset("lowp-inv-freq", "bf16"), s).tolist()
    [1.0, 0.10009765625, 0.010009765625, 0.00099945068359375]
    """
    r = effective_recipe(recipe, schedule, seq_len)
    schedule = r.runs_on(schedule)
    if r.angle_from != "product":
        if engine != "numpy":
            raise ValueError(f"recipe {r.name!r} makes its angles by {r.angle_from!r}: the numpy engine only")
        if r.angle_from == "scaled-product":  # the unscaled frequencies, the positions scaled before the product
            unscaled = replace(schedule, scaling="default", factor=1.0)
            return scaled_product_maker(stored_inv_freq(replace(r, angle_from="product"), unscaled, seq_len),
                                        schedule)
        return angle_maker(r.angle_from, schedule)
    if r.inv_freq_from == "exact":
        theta = schedule.inv_freq(seq_len)
    elif r.inv_freq_from in INV_FREQ_HOWS:
        if engine != "numpy":
            raise ValueError(f"recipe {r.name!r} makes inv_freq by {r.inv_freq_from!r}: the numpy engine only")
        theta = how_inv_freq(r.inv_freq_from, schedule)
    else:
        theta = schedule.inv_freq_in(r.inv_freq_from, seq_len, engine=engine)  # type: ignore[arg-type]
    return round_to(theta, r.inv_freq)


def effective_recipe(recipe: Recipe, schedule: RopeSchedule, seq_len: int | None) -> Recipe:
    """The recipe the code really runs for a pass over ``seq_len`` positions.

    A ``dynamic`` module rebuilds ``inv_freq`` in float32 when the positions
    exceed ``max_position_embeddings`` (transformers' dynamic update): a buffer
    that ``.to(dtype)`` had downcast is replaced by float32 values.

    >>> dyn = RopeSchedule(head_dim=8, scaling="dynamic", factor=2.0, original_max_position_embeddings=4096)
    >>> effective_recipe(preset("lowp-inv-freq", "bf16"), dyn, 8192).how["inv_freq"]
    'formula in float32'
    """
    if (schedule.scaling == "dynamic" and seq_len is not None and seq_len > schedule.original_max_position_embeddings
            and recipe.inv_freq_from not in ("exact", recipe.inv_freq)):
        return replace(recipe, inv_freq="float32", inv_freq_from="float32")
    return recipe
