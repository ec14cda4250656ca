"""What a config says per layer beyond its rope schedules: NoPE layers, the rotation layout, chunked attention,
Llama 4's attention temperature, and legacy per-layer-type rope fields.

Field names and defaults are transformers' config classes' (read at transformers 5.24):
``Llama4TextConfig`` and ``SmolLM3Config`` (``no_rope_layers``: 1 = the layer rotates, 0 = it has no rotary
embedding; when absent, every ``no_rope_layer_interval``-th layer has none), ``Llama4TextConfig``'s
``attention_chunk_size``, ``attn_temperature_tuning``, ``floor_scale``, ``attn_scale``, and Gemma 3's
``rope_local_base_freq`` (``Gemma3TextConfig.convert_rope_params_to_dict`` turns it into the
``sliding_attention`` layers' own ``rope_theta``).  Llama 4's text model rotates adjacent pairs (a complex
multiply, ``apply_rotary_emb`` in ``modeling_llama4.py``): the frequencies and angles are those of the halves
layout, only the pairing of channels differs.

>>> f = layer_facts({"model_type": "smollm3", "num_hidden_layers": 8})
>>> f.nope_layers, f.describe()
((3, 7), 'RoPE in 6 of 8 layers (NoPE: 3, 7)')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import get_format, round_to

__all__ = ["AttnTemperature", "LayerFacts", "layer_facts", "legacy_layer_params", "temperature_audit",
           "temperature_lines"]

_NOPE_FAMILIES = frozenset({"llama4", "llama4_text", "smollm3"})  # no_rope_layer_interval defaults to 4 there
_INTERLEAVED_FAMILIES = frozenset({"llama4", "llama4_text"})
_LOCAL_BASE_KEYS = ("rope_local_base_freq",)  # Gemma 3 / 3n, T5Gemma 2: the sliding layers' own base


@dataclass(frozen=True)
class AttnTemperature:
    """Llama 4's query scale on NoPE layers: ``1 + attn_scale * log1p(floor((pos + 1) / floor_scale))``
    (``Llama4TextAttention.forward``: positions an int64 ``arange`` plus the cached length, ``.float()``, so the
    position term is float32 arithmetic).

    >>> [round(float(v), 5) for v in AttnTemperature(8192, 0.1).exact([8190, 8191, 10485759])]  # 1 + ln(1281) / 10
    [1.0, 1.06931, 1.71554]
    """

    floor_scale: float
    attn_scale: float

    def __post_init__(self) -> None:
        for name in ("floor_scale", "attn_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"attention temperature {name} {v!r} must be a finite number > 0")

    def exact(self, positions: Any) -> np.ndarray:
        """The scale from exact integer positions (float64; the floor is exact for positions below 2**53)."""
        p = np.asarray(positions, dtype=np.float64)
        return 1.0 + self.attn_scale * np.log1p(np.floor((p + 1.0) / self.floor_scale))

    def term_in(self, fmt: str, positions: Any) -> np.ndarray:
        """The floor term ``floor((pos + 1) / floor_scale)`` as code that holds positions in ``fmt`` computes it:
        the position rounded to ``fmt``, ``+ 1.0`` and ``/ floor_scale`` each rounded to it (float16 overflows
        to inf above 65504)."""
        f = get_format(fmt)
        p = round_to(np.asarray(positions, dtype=np.float64), f)
        with np.errstate(over="ignore"):
            q = round_to(round_to(p + 1.0, f) / float(round_to(np.float64(self.floor_scale), f)), f)
        return np.floor(q)

    def describe(self) -> str:
        return (f"1 + {self.attn_scale:g} * log1p(floor((pos + 1) / {self.floor_scale:g})) on the queries of NoPE "
                "layers")


def temperature_audit(t: AttnTemperature, fmt: str, length: int) -> dict[str, Any]:
    """How the position term of the attention temperature fares when positions are held in ``fmt``.

    Returns the positions (of ``0 .. length - 1``) whose floor term differs from the exact one, the first of
    them, the first position whose term is not finite, and the largest error of the scale itself.

    >>> r = temperature_audit(AttnTemperature(8192, 0.1), "bfloat16", 8192)
    >>> r["wrong"], r["first_wrong"], round(r["max_scale_error"], 4)  # 8176 .. 8190 round up to 8192
    (15, 8176, 0.0693)
    """
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length {length!r} must be an integer >= 1")
    wrong, first, inf_at, worst = 0, None, None, 0.0
    for start in range(0, length, 1 << 20):
        p = np.arange(start, min(length, start + (1 << 20)), dtype=np.float64)
        exact = np.floor((p + 1.0) / t.floor_scale)
        got = t.term_in(fmt, p)
        bad = got != exact
        wrong += int(bad.sum())
        if first is None and bad.any():
            first = int(p[np.argmax(bad)])
        nonfinite = ~np.isfinite(got)
        if inf_at is None and nonfinite.any():
            inf_at = int(p[np.argmax(nonfinite)])
        with np.errstate(invalid="ignore"):
            err = np.abs(t.attn_scale * (np.log1p(got) - np.log1p(exact)))
        worst = max(worst, float(np.nanmax(np.where(np.isfinite(err), err, np.inf))))
    return {"format": get_format(fmt).name, "length": length, "wrong": wrong, "first_wrong": first,
            "first_nonfinite": inf_at, "max_scale_error": worst}


@dataclass(frozen=True)
class LayerFacts:
    """Per-layer facts: ``nope_layers`` (indices without rotary embedding), ``num_layers``, ``interleaved``
    (adjacent pairs rotated, GPT-J style), ``chunk_size`` (the RoPE layers attend within chunks),
    ``temperature`` (Llama 4's NoPE-layer query scale, None when off)."""

    num_layers: int | None = None
    nope_layers: tuple[int, ...] = ()
    interleaved: bool = False
    chunk_size: int | None = None
    temperature: AttnTemperature | None = None
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    sliding_reach: int | None = None
    default_layers: bool = False  # num_hidden_layers left out: the config class's default count

    @property
    def empty(self) -> bool:
        return not (self.nope_layers or self.interleaved or self.chunk_size or self.temperature
                    or self.sliding_window)

    def max_distance(self, rope_layer_type: str = "all") -> int | None:
        """The longest distance the layers that use this rope layer type's schedule attend (``"all"``: the one
        schedule of every RoPE layer), or None when one of them sees every distance.

        A ``sliding_attention`` layer attends ``sliding_reach`` back (transformers' ``sliding_window_overlay``:
        keys with ``kv_idx > q_idx - sliding_window``, so ``sliding_window - 1``), a ``chunked_attention`` layer
        ``chunk_size - 1`` (keys in the query's chunk).

        >>> f = LayerFacts(num_layers=3, layer_types=("sliding_attention",) * 2 + ("full_attention",),
        ...                sliding_window=1024, sliding_reach=1023)
        >>> f.max_distance("sliding_attention"), f.max_distance("full_attention"), f.max_distance("all")
        (1023, None, None)
        """
        reach = {"sliding_attention": self.sliding_reach,
                 "chunked_attention": None if self.chunk_size is None else self.chunk_size - 1}
        if rope_layer_type != "all":
            return reach.get(rope_layer_type)
        nope = set(self.nope_layers)
        kinds = {t for i, t in enumerate(self.layer_types) if i not in nope}
        return reach.get(kinds.pop()) if len(kinds) == 1 else None

    def describe(self) -> str:
        """One line (empty when there is nothing to say)."""
        parts = []
        if self.nope_layers and self.num_layers:
            shown = ", ".join(str(i) for i in self.nope_layers[:12]) + (", ..." if len(self.nope_layers) > 12 else "")
            parts.append(f"RoPE in {self.num_layers - len(self.nope_layers)} of {self.num_layers} layers "
                         f"(NoPE: {shown})")
        if self.interleaved:
            parts.append("rotation of adjacent pairs (GPT-J style, a complex multiply; same angles)")
        if self.chunk_size:
            parts.append(f"RoPE layers attend within chunks of {self.chunk_size} tokens (up to {self.chunk_size - 1} "
                         "back)")
        if self.sliding_window is not None and self.sliding_reach is None:
            parts.append(f"sliding_window {self.sliding_window} declared, but which layers use it is not modelled "
                         "for this model_type: every distance judged")
        if self.sliding_reach is not None:
            n = self.layer_types.count("sliding_attention")
            count = (f"{len(self.layer_types)} (num_hidden_layers not given: the config class's default)"
                     if self.default_layers else f"{len(self.layer_types)}")
            parts.append(f"{n} of {count} layers attend a sliding window (sliding_window "
                         f"{self.sliding_window}: up to {self.sliding_reach} back)")
        if self.temperature is not None:
            parts.append("attention temperature " + self.temperature.describe())
        return "; ".join(parts)


def _int_list(value: Any, n: int | None, source: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(v in (0, 1) and not isinstance(v, float) for v in value):
        raise ValueError(f"{source}: no_rope_layers {value!r} must be a list of 0 / 1 flags (1: the layer rotates)")
    if n is not None and len(value) != n:
        raise ValueError(f"{source}: no_rope_layers has {len(value)} flags; num_hidden_layers is {n}")
    return [int(v) for v in value]


# How transformers' config classes (5.24) derive ``layer_types`` when a config.json has none.  Periodic families:
# one layer in every k is full attention, the last of each period (``"sliding_attention" if (i + 1) % k else
# "full_attention"``) or the first (``"full_attention" if i % k == 0``); k fixed, or read from a field
# (``sliding_window_pattern``, ``global_attn_every_n_layers``); Gemma 4 then makes the last layer full.  Any other
# model_type whose config.json gives an integer ``sliding_window_pattern`` follows the same rule (every class that
# reads that field: Gemma 3, Cohere 2, EXAONE 4, EmbeddingGemma 2).  Other rules: every layer sliding (the modeling
# code passes ``config.sliding_window`` to each layer), or Qwen's (layers from ``max_window_layers`` on, when
# ``use_sliding_window``).  tests/test_layers.py holds each to the config class.
_PERIODIC: dict[str, tuple[int, str | None, bool, bool]] = {  # family: (k, field read for k, full first, last full)
    "gemma2": (2, None, False, False), "t5gemma": (2, None, False, False), "vaultgemma": (2, None, False, False),
    "gpt_oss": (2, None, False, False), "gemma3": (6, "sliding_window_pattern", False, False),
    "gemma3_text": (6, "sliding_window_pattern", False, False), "cohere2": (4, "sliding_window_pattern", False, False),
    "olmo3": (4, None, False, False), "exaone4": (4, "sliding_window_pattern", False, False),
    "gemma3n": (5, None, False, False), "gemma3n_text": (5, None, False, False),
    "afmoe": (4, "global_attn_every_n_layers", False, False), "granite_swa": (4, None, True, False),
    "granitemoe_swa": (4, None, True, False), "cwm": (4, None, True, False), "gemma4": (6, None, False, True),
    "gemma4_text": (6, None, False, True)}
_ALL_SLIDING = frozenset({"mistral", "mixtral", "phi3", "starcoder2", "ministral"})
_QWEN_RULE = frozenset({"qwen2", "qwen3"})
_HALVED_WHEN_BIDIRECTIONAL = frozenset({"gemma3", "gemma3_text"})  # the config class keeps window // 2 + 1
# What the config class takes when config.json leaves a field out: (num_hidden_layers, sliding_window).
_CLASS_DEFAULTS: dict[str, tuple[int, int | None]] = {
    "gemma2": (26, 4096), "t5gemma": (26, 4096), "vaultgemma": (26, 4096), "gpt_oss": (36, 128),
    "gemma3": (26, 4096), "gemma3_text": (26, 4096), "cohere2": (40, 4096), "olmo3": (32, 4096),
    "exaone4": (32, 4096), "gemma3n": (35, 512), "gemma3n_text": (35, 512), "afmoe": (32, 1024),
    "granite_swa": (24, 128), "granitemoe_swa": (32, 128), "cwm": (64, 8192), "gemma4": (30, 512), "gemma4_text": (30, 512),
    "mistral": (32, 4096), "mixtral": (32, None), "phi3": (32, None), "starcoder2": (30, None),
    "ministral": (32, 4096), "qwen2": (32, 4096), "qwen3": (32, 4096)}


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _periodic(mt: str, read: Callable[[str], Any]) -> tuple[int, bool, bool] | None:
    """(k, full first, last layer full) of a periodic family, or of any config with an integer
    ``sliding_window_pattern``; None otherwise."""
    if mt in _PERIODIC:
        k, key, first, last = _PERIODIC[mt]
        return (_positive(read(key)) or k) if key else k, first, last
    k = _positive(read("sliding_window_pattern"))
    return (k, False, False) if k else None


def _layer_types(read: Callable[[str], Any], given: Callable[[str], bool], mt: str, n: int | None,
                 nope: tuple[int, ...], chunk: int | None,
                 source: str) -> tuple[tuple[str, ...], int | None, int | None]:
    """(each layer's attention type, ``sliding_window`` as the config class keeps it, how far back a sliding
    layer attends); empty types when the config does not say and the family's rule is not modelled."""
    window = _positive(read("sliding_window"))
    if not given("sliding_window"):
        window = _CLASS_DEFAULTS.get(mt, (0, None))[1]  # left out: the config class's default
    if read("use_sliding_window") is False or (mt in _QWEN_RULE and read("use_sliding_window") is not True):
        window = None  # Qwen2 / Qwen3 / SmolLM3: the window is declared but off (Qwen's default: off)
    declared = read("layer_types")
    rule = _periodic(mt, read)
    if declared is not None:
        if (not isinstance(declared, (list, tuple)) or not all(isinstance(t, str) for t in declared)
                or (n is not None and len(declared) != n)):
            raise ValueError(f"{source}: layer_types {declared!r} must be a list of {n or 'num_hidden_layers'} "
                             "layer type names")
        types = tuple(declared)
    elif n is None:
        types = ()
    elif rule is not None:
        k, first, last = rule
        types = tuple("full_attention" if (i % k == 0 if first else (i + 1) % k == 0) or (last and i == n - 1)
                      else "sliding_attention" for i in range(n))
    elif mt in _ALL_SLIDING and window is not None:
        types = ("sliding_attention",) * n
    elif mt in _QWEN_RULE and window is not None:
        first = read("max_window_layers")
        first = 28 if first is None else first
        types = tuple("sliding_attention" if i >= first else "full_attention" for i in range(n))
    elif mt in _INTERLEAVED_FAMILIES and chunk:  # Llama 4: the RoPE layers attend in chunks
        types = tuple("full_attention" if i in nope else "chunked_attention" for i in range(n))
    else:
        types = ()
    if window is None or "sliding_attention" not in types:
        return types, window if window is not None and not types else None, None
    if mt in _HALVED_WHEN_BIDIRECTIONAL and read("use_bidirectional_attention"):
        return types, window, window // 2 + 1  # |q - k| <= window // 2 + 1 (sliding_window_bidirectional_overlay)
    return types, window, window - 1


def layer_facts(cfg: Mapping[str, Any] | Any, source: str = "config",
                get: Callable[[str], Any] | None = None) -> LayerFacts:
    """The per-layer facts of a (text) config: a dict, or ``get`` reading a config object's fields."""
    read = get or (lambda k: cfg.get(k) if isinstance(cfg, Mapping) else getattr(cfg, k, None))
    mt = str(read("model_type") or "")
    n = read("num_hidden_layers")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    # a field left out of a config.json takes the config class's default (a config object has them all already)
    given: Callable[[str], bool] = (lambda k: k in cfg) if isinstance(cfg, Mapping) else (lambda k: True)
    defaulted = (n is None and not given("num_hidden_layers") and mt in _CLASS_DEFAULTS
                 and read("layer_types") is None)  # declared layer_types count the layers themselves
    if defaulted:  # left out: the config class builds its default count of layers
        n = _CLASS_DEFAULTS[mt][0]
    flags = read("no_rope_layers")
    nope: tuple[int, ...] = ()
    if flags:  # an empty list means "derive it" in transformers' configs
        nope = tuple(i for i, v in enumerate(_int_list(flags, n, source)) if v == 0)
    elif mt in _NOPE_FAMILIES or read("no_rope_layer_interval") is not None:
        k = read("no_rope_layer_interval")
        k = 4 if k is None else k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"{source}: no_rope_layer_interval {k!r} must be an integer >= 1")
        nope = tuple(i for i in range(n or 0) if (i + 1) % k == 0)
    llama4 = mt in _INTERLEAVED_FAMILIES
    chunk = read("attention_chunk_size") if llama4 else None
    temp = None
    if llama4 and read("attn_temperature_tuning") not in (None, False, 0) and nope:
        fs, sc = read("floor_scale"), read("attn_scale")
        try:
            temp = AttnTemperature(8192 if fs is None else fs, 0.1 if sc is None else sc)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
    chunk = _positive(chunk)
    types, window, reach = _layer_types(read, given, mt, n, nope, chunk, source)
    return LayerFacts(num_layers=n, nope_layers=nope, interleaved=llama4, chunk_size=chunk, temperature=temp,
                      layer_types=types, sliding_window=window, sliding_reach=reach,
                      default_layers=defaulted and bool(types))


def legacy_layer_params(read: Callable[[str], Any], params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Per-layer-type rope parameters from legacy fields, as transformers' config classes build them, or None.

    Gemma 3: ``rope_local_base_freq`` gives the ``sliding_attention`` layers default RoPE with that base; the
    ``full_attention`` layers take ``rope_scaling`` (if any) and ``rope_theta``.

    >>> legacy_layer_params({"rope_theta": 1e6, "rope_local_base_freq": 1e4}.get, {"rope_type": "linear", "factor": 8})
    {'sliding_attention': {'rope_type': 'default', 'rope_theta': 10000.0}, 'full_attention': {'rope_type': 'linear', 'factor': 8, 'rope_theta': 1000000.0}}
    """
    local = next((read(k) for k in _LOCAL_BASE_KEYS if read(k) is not None), None)
    if local is None:
        return None
    full = dict(params or {"rope_type": "default"})
    if read("rope_theta") is not None:
        full.setdefault("rope_theta", read("rope_theta"))
    return {"sliding_attention": {"rope_type": "default", "rope_theta": local}, "full_attention": full}  # its order


def temperature_lines(facts: LayerFacts | None, dtypes: Sequence[str], length: int) -> list[str]:
    """The text lines on the attention temperature's position term (none when the model has no temperature):
    transformers' float32 arithmetic, then positions held in each of ``dtypes`` up to ``length``.

    >>> facts = LayerFacts(num_layers=4, nope_layers=(3,), temperature=AttnTemperature(8192, 0.1))
    >>> print(temperature_lines(facts, ["bfloat16"], 16384)[1])
      positions in bfloat16: 46 of 16384 positions get another scale (first at 8176; scale off by up to 0.0693)
    """
    t = None if facts is None else facts.temperature
    if t is None:
        return []
    exact = "exact" if temperature_audit(t, "float32", length)["wrong"] == 0 else "NOT exact"
    lines = [f"attention temperature on NoPE layers ({t.describe().split(' on ')[0]}): transformers computes the "
             f"position term in float32 from int64 positions ({exact} to {length}; float32 integers are exact "
             "to 2**24)"]
    for fmt in dict.fromkeys(get_format(d).name for d in dtypes):
        if fmt == "float32":
            continue
        r = temperature_audit(t, fmt, length)
        if not r["wrong"]:
            lines.append(f"  positions in {fmt}: exact to {length}")
            continue
        inf = f"; the scale is inf from position {r['first_nonfinite']}" if r["first_nonfinite"] is not None else ""
        err = f"; scale off by up to {r['max_scale_error']:.3g}" if math.isfinite(r["max_scale_error"]) else ""
        lines.append(f"  positions in {fmt}: {r['wrong']} of {length} positions get another scale "
                     f"(first at {r['first_wrong']}{err}){inf}")
    return lines
