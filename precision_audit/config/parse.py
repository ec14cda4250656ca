"""Reading model configs: a ``config.json`` dict or a transformers config object -> :class:`ModelConfig`.

The rules are in :func:`load_config_dict` (a model's description) and
:func:`schedule_from_config` (one rotary module's config); both read fields
through one accessor (a dict by key, a config object by attribute, as
transformers reads it) and build each layer type's schedule with the same
code.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..checks import ArgumentTypeError, check_path, describe
from ..rope.schedules import IGNORED_KEYS, PARAM_KEYS, RopeSchedule, schedule_from_rope_parameters
from .layers import LayerFacts, layer_facts, legacy_layer_params
from .vision import mrope_facts

__all__ = [
    "CONTEXT_KEYS",
    "KINDS",
    "ModelConfig",
    "load_config",
    "load_config_dict",
    "load_model",
    "rope_layer_types",
    "schedule_from_config",
]

# Context-length keys, in the order they are looked up (newer names first).
CONTEXT_KEYS: tuple[str, ...] = ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length",
                                 "max_seq_len", "model_max_length")
_HEADS_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
_PARTIAL_KEYS = ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction")
_BASE_KEYS = ("rope_theta", "rotary_emb_base", "rope_base")
# rope_parameters keys that do not change the frequencies of text positions (dropped with a note).
_NOT_FREQUENCY_KEYS = {
    "mrope_section": "multimodal RoPE sections: text tokens get the same position on every section",
    "mrope_interleaved": "multimodal RoPE layout: text tokens get the same position on every section",
    "llama_4_scaling_beta": "a query scaling by position, not a frequency",
}
# Families whose configs may omit rope_theta (transformers' default 10000 then applies).
_ROPE_FAMILIES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
    "gemma4_text", "phi", "phi3", "phimoe", "gpt_neox", "gptj", "falcon", "deepseek_v2", "deepseek_v3", "gpt_oss",
    "internlm", "internlm2", "baichuan", "starcoder2", "stablelm", "olmo", "olmo2", "cohere", "granite", "yi",
})
_ALIBI_FAMILIES = frozenset({"bloom"})
# Families with learned absolute position embeddings (a table indexed by integer ids) and with relative encodings.
_LEARNED_FAMILIES = frozenset({
    "gpt2", "gpt_neo", "gpt_bigcode", "bert", "roberta", "xlm-roberta", "camembert", "distilbert", "electra",
    "albert", "ernie", "megatron-bert", "opt", "bart", "mbart", "biogpt", "whisper", "deberta",
})
_T5_FAMILIES = frozenset({"t5", "mt5", "umt5", "longt5", "switch_transformers"})
_OFFSET_FAMILIES = {"opt": 2, "bart": 2, "mbart": 2}  # OPTLearnedPositionalEmbedding / BART: ids + 2
KINDS: tuple[str, ...] = ("rope", "alibi", "relative", "learned")


def _fail(source: str, problem: str) -> ValueError:
    return ValueError(f"{source}: {problem}" if source else problem)


@dataclass(frozen=True)
class ModelConfig:
    """What a ``config.json`` says about a model's position encoding.

    ``kind`` is ``"rope"`` (``rope`` holds one ``(layer_type, schedule)`` pair
    per attention layer type; ``"all"`` when every layer shares one),
    ``"alibi"`` (``num_heads`` heads, the reference slopes), ``"relative"``
    (``scheme`` ``t5`` / ``deberta`` buckets or ``xlnet`` relative sinusoids,
    ``scheme_params`` their settings) or ``"learned"`` (absolute positions
    looked up in a table: GPT-2, BERT, OPT; ``scheme_params`` may hold OPT's
    ``offset``).
    ``max_position_embeddings`` is the context length the config declares
    (``context_key`` names the key it came from; None if it declares none),
    ``torch_dtype`` the dtype it was saved in, ``notes`` what the parser
    assumed or ignored, ``origin`` what it was read from (``config.json``,
    ``gguf`` or ``hub``), ``alibi_bias_max`` MPT's ``attn_config.alibi_bias_max``
    (its slopes' exponent range; None when not given).

    >>> ModelConfig(name="x", model_type="bloom", kind="alibi")
    Traceback (most recent call last):
    ...
    ValueError: ModelConfig x: kind 'alibi' needs num_heads
    >>> load_config_dict({"model_type": "t5", "relative_attention_num_buckets": 32}).describe()
    'model (model_type t5): relative position buckets (t5: num_buckets=32, max_distance=128); no context length in the config'
    """

    name: str
    model_type: str
    kind: str
    rope: tuple[tuple[str, RopeSchedule], ...] = ()
    num_heads: int | None = None
    max_position_embeddings: int | None = None
    context_key: str | None = None
    torch_dtype: str | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    alibi_bias_max: float | None = None
    origin: str = "config.json"
    scheme: str | None = None
    scheme_params: tuple[tuple[str, Any], ...] = ()
    layers: LayerFacts | None = None
    mrope: tuple[tuple[str, Any], ...] = ()  # M-RoPE facts (:func:`.vision.mrope_facts`), () for 1-D RoPE

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ModelConfig {self.name}: kind {self.kind!r} must be one of {', '.join(KINDS)}")
        if self.kind == "relative" and self.scheme not in ("t5", "deberta", "xlnet"):
            raise ValueError(f"ModelConfig {self.name}: kind 'relative' needs scheme t5, deberta or xlnet, "
                             f"got {self.scheme!r}")
        if self.kind == "rope" and not self.rope:
            raise ValueError(f"ModelConfig {self.name}: kind 'rope' needs at least one schedule")
        if self.kind == "alibi" and not (isinstance(self.num_heads, int) and self.num_heads >= 1):
            raise ValueError(f"ModelConfig {self.name}: kind 'alibi' needs num_heads")
        L = self.max_position_embeddings
        if L is not None and (isinstance(L, bool) or not isinstance(L, int) or L < 1):
            raise ValueError(f"ModelConfig {self.name}: max_position_embeddings {L!r} must be an integer >= 1")

    @property
    def schedule(self) -> RopeSchedule:
        """The RoPE schedule when all layers share one (ValueError otherwise)."""
        if self.kind != "rope":
            raise ValueError(f"{self.name} uses {self.kind}, not RoPE")
        if len(self.rope) != 1:
            raise ValueError(f"{self.name} has one RoPE schedule per layer type "
                             f"({', '.join(t for t, _ in self.rope)}); pick one with layer_type=")
        return self.rope[0][1]

    def schedule_for(self, layer_type: str | None = None) -> RopeSchedule:
        """The schedule of one layer type (``None``: the only one)."""
        if layer_type is None:
            return self.schedule
        for t, s in self.rope:
            if t == layer_type:
                return s
        raise ValueError(f"{self.name} has no layer type {layer_type!r}; valid: {', '.join(t for t, _ in self.rope)}")

    def alibi_slopes(self) -> tuple[float, ...] | None:
        """The ALiBi slopes the model uses, None for the reference rule (:func:`~precision_audit.alibi.
        alibi_slopes`): MPT's own (:func:`~precision_audit.alibi.mpt_slopes`, its ``alibi_bias_max``).

        >>> m = ModelConfig("m", "mpt", "alibi", num_heads=4, alibi_bias_max=16.0)
        >>> m.alibi_slopes()[:2]
        (0.0625, 0.00390625)
        """
        if self.kind != "alibi" or self.model_type != "mpt":
            return None
        from ..alibi.slopes import mpt_slopes

        bias_max = 8.0 if self.alibi_bias_max is None else float(self.alibi_bias_max)
        return tuple(mpt_slopes(int(self.num_heads or 1), bias_max).tolist())

    def describe(self) -> str:
        """A few lines: kind, schedules or heads, context."""
        ctx = (f"context {self.max_position_embeddings} ({self.context_key})" if self.max_position_embeddings
               else "no context length in the config")
        head = f"{self.name} (model_type {self.model_type}): "
        if self.kind == "alibi":
            return head + f"ALiBi, {self.num_heads} heads; {ctx}"
        if self.kind in ("relative", "learned"):
            what = {"t5": "relative position buckets", "deberta": "relative log buckets",
                    "xlnet": "relative sinusoids", None: "learned absolute positions (a table lookup)"}[self.scheme]
            params = ", ".join(f"{k}={v}" for k, v in self.scheme_params)
            return head + what + (f" ({self.scheme or 'ids'}: {params})" if params else "") + f"; {ctx}"
        lines = [head + f"RoPE; {ctx}"]
        if self.layers is not None and not self.layers.empty:
            lines.append(f"  layers: {self.layers.describe()}")
        lines += [f"  {t}: {s.describe()}" for t, s in self.rope]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (schedules as their fields plus ``describe``)."""
        from ..rows import plain

        rope = []
        for t, s in self.rope:
            d = {k: getattr(s, k) for k in s.__dataclass_fields__}
            rope.append({"layer_type": t, **d, "attention_factor": s.cos_sin_scale, "describe": s.describe()})
        return plain({
            "name": self.name, "model_type": self.model_type, "kind": self.kind, "rope": rope,
            "num_heads": self.num_heads, "max_position_embeddings": self.max_position_embeddings,
            "context_key": self.context_key, "torch_dtype": self.torch_dtype, "source": self.source,
            "notes": list(self.notes), "origin": self.origin, "scheme": self.scheme,
            "scheme_params": dict(self.scheme_params),
            "layers": None if self.layers is None else {**{k: getattr(self.layers, k) for k in (
                "num_layers", "nope_layers", "interleaved", "chunk_size", "layer_types", "sliding_window",
                "sliding_reach")}, "temperature": None if
                self.layers.temperature is None else vars(self.layers.temperature), "describe": self.layers.describe()},
        })


# --------------------------------------------------------------------------- parsing


def load_config(path: str | os.PathLike[str]) -> ModelConfig:
    """Read a ``config.json`` (a file, or a directory holding one) as JSON and parse it.

    Malformed or missing files raise ValueError naming the file and the problem.

    >>> load_config("no/such/config.json")
    Traceback (most recent call last):
    ...
    ValueError: no/such/config.json: cannot read: No such file or directory
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        p = os.path.join(p, "config.json")
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise _fail(p, f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise _fail(p, "not UTF-8 text (a config.json is JSON text)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(p, f"not valid JSON ({e})") from None
    name = os.path.basename(os.path.dirname(os.path.abspath(p))) if os.path.basename(p) == "config.json" \
        else os.path.splitext(os.path.basename(p))[0]
    return load_config_dict(data, name=name, source=p)


_GGUF_MAGIC = b"GGUF"


def _is_gguf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == _GGUF_MAGIC
    except OSError:
        return False


def load_model(model: str | os.PathLike[str], *, online: bool = False) -> ModelConfig:
    """A model's description from what a user names it by: a ``config.json`` (or a directory holding one), a
    llama.cpp ``.gguf`` file (its metadata, never its weights), or a Hugging Face Hub id ``ORG/NAME[@REVISION]``
    (its ``config.json`` only, from the local cache; fetched from the Hub only with ``online=True``; see
    :mod:`precision_audit.config.hub`).

    >>> load_model("tests/data/qwen2-7b.json").origin, load_model("tests/data/qwen2-7b.json").name
    ('config.json', 'qwen2-7b')
    >>> load_model("no/such/config.json")
    Traceback (most recent call last):
    ...
    ValueError: no/such/config.json: cannot read: No such file or directory
    """
    from .hub import resolve_model

    if not isinstance(model, (str, os.PathLike)):
        raise ArgumentTypeError(f"model {describe(model)} must be a config.json path, a .gguf file or a Hub id")
    text = os.fspath(check_path(model, "model", "path or Hub id"))
    if not isinstance(text, str):
        raise ArgumentTypeError(f"model {describe(model)} must name a path as text, not bytes")
    path = resolve_model(text, online=online)
    if _is_gguf(path):
        from .gguf import read_gguf_metadata

        mc = load_config_dict(read_gguf_metadata(path), name=os.path.splitext(os.path.basename(path))[0],
                              source=path)
        return replace(mc, origin="gguf")
    mc = load_config(path)
    if path != text:  # a Hub id: name the model by it
        mc = replace(mc, name=text, source=f"{text} (Hub config.json: {path})", origin="hub")
    return mc


class _Fields:
    """One level of a config, read as transformers reads it: a ``config.json`` dict by key, a transformers config
    object by attribute (not through ``to_dict()``, which drops values the model's code reads, e.g. Gemma 4's
    ``global_head_dim``, kept only in the object's ``per_layer_config``)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @property
    def is_dict(self) -> bool:
        return isinstance(self.raw, Mapping)

    def get(self, key: str) -> Any:
        return self.raw.get(key) if self.is_dict else getattr(self.raw, key, None)

    def first(self, keys: Sequence[str]) -> tuple[str | None, Any]:
        """The first of ``keys`` whose value is not None: ``(key, value)``, or ``(None, None)``."""
        for k in keys:
            v = self.get(k)
            if v is not None:
                return k, v
        return None, None


def _fields(value: Any) -> _Fields | None:
    """A dict, or a config object (anything with a ``to_dict`` method, as transformers' configs), else None."""
    if isinstance(value, Mapping) or callable(getattr(value, "to_dict", None)):
        return _Fields(value)
    return None


def _int(source: str, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() \
            or value < minimum:
        raise _fail(source, f"{key} {value!r} must be an integer >= {minimum}")
    return int(value)


def _is_per_layer(params: Any) -> bool:
    """transformers 5 style ``{"sliding_attention": {...}, "full_attention": {...}}``; a layer type whose
    parameters are null has no rotary embedding."""
    return isinstance(params, Mapping) and bool(params) and all(v is None or isinstance(v, Mapping)
                                                                for v in params.values())


def _alibi_flag(cfg: _Fields) -> bool | None:
    """True/False when the config says whether it uses ALiBi, None when it does not say."""
    attn = _fields(cfg.get("attn_config"))
    if attn is not None and attn.get("alibi") is not None:  # MPT
        return bool(attn.get("alibi"))
    pet = cfg.get("position_embedding_type")
    if isinstance(pet, str):
        return pet.lower() == "alibi"
    if cfg.get("alibi") is not None:  # Falcon / RefinedWeb
        return bool(cfg.get("alibi"))
    if cfg.get("use_alibi") is not None:
        return bool(cfg.get("use_alibi"))
    return None


def _relative_or_learned(cfg: _Fields, model_type: str, notes: list[str]) -> tuple[str, str | None,
                                                                                   tuple[tuple[str, Any], ...]] | None:
    """``("relative", scheme, params)`` or ``("learned", None, params)`` when the config says so (its fields,
    then its family), else None.  Field names and defaults are transformers' config classes' (T5Config,
    DebertaV2Config, XLNetConfig, BertConfig)."""
    pet = cfg.get("position_embedding_type")
    if model_type in _T5_FAMILIES or cfg.get("relative_attention_num_buckets") is not None:
        nb = cfg.get("relative_attention_num_buckets") or 32
        md = cfg.get("relative_attention_max_distance") or 128
        return "relative", "t5", (("num_buckets", int(nb)), ("max_distance", int(md)))
    if model_type == "deberta-v2" or (cfg.get("position_buckets") or 0) > 0:
        if cfg.get("relative_attention") and (cfg.get("position_buckets") or 0) > 0:
            mr = cfg.get("max_relative_positions")
            if mr is None or mr < 1:
                mr = cfg.get("max_position_embeddings") or 512
                notes.append(f"max_relative_positions < 1: the max_position_embeddings {mr} (as transformers)")
            return "relative", "deberta", (("num_buckets", int(cfg.get("position_buckets"))),
                                           ("max_distance", int(mr)))
        notes.append("relative positions without log buckets: integer distances, exact in every dtype")
        return "learned", None, ()
    if model_type in ("xlnet", "transfo-xl"):
        d = cfg.get("d_model") or cfg.get("d_embed") or 1024
        attn = cfg.get("attn_type") or ("bi" if model_type == "xlnet" else "uni")
        return "relative", "xlnet", (("d_model", int(d)), ("attn_type", str(attn)))
    if isinstance(pet, str) and pet.lower() in ("absolute", "relative_key", "relative_key_query"):
        if pet.lower() != "absolute":
            notes.append(f"position_embedding_type {pet}: learned embeddings of integer distances, exact")
        return "learned", None, _offset(model_type)
    if model_type in _LEARNED_FAMILIES:
        return "learned", None, _offset(model_type)
    return None


def _offset(model_type: str) -> tuple[tuple[str, Any], ...]:
    return (("offset", _OFFSET_FAMILIES[model_type]),) if model_type in _OFFSET_FAMILIES else ()


def _position_kind(cfg: _Fields, model_type: str, source: str) -> str:
    """``"alibi"`` or ``"rope"`` from explicit fields, then the family (rules in :func:`load_config_dict`)."""
    flag = _alibi_flag(cfg)
    if flag is not None:
        return "alibi" if flag else "rope"
    if model_type in _ALIBI_FAMILIES:
        return "alibi"
    if model_type == "baichuan":  # 13B (ALiBi) declares model_max_length, 7B (RoPE) max_position_embeddings
        return "rope" if cfg.get("max_position_embeddings") is not None else "alibi"
    rope_keys = ("rope_parameters", "rope_scaling", *_BASE_KEYS, *_PARTIAL_KEYS, "rotary_dim", "qk_rope_head_dim")
    if model_type in _ROPE_FAMILIES or any(cfg.get(k) is not None for k in rope_keys):
        return "rope"
    raise _fail(source, f"cannot tell the position encoding of model_type {model_type!r}: no rope_theta, "
                        "rope_parameters, rope_scaling or partial rotary field, no alibi field, and no "
                        "position_embedding_type or relative-attention field")


def _context(cfg: _Fields, top: _Fields, source: str) -> tuple[str | None, int | None]:
    """The context length: the first of :data:`CONTEXT_KEYS` (the text config's, then the top level's)."""
    ck, max_pos = cfg.first(CONTEXT_KEYS)
    if max_pos is None and cfg is not top:
        ck, max_pos = top.first(CONTEXT_KEYS)
    if max_pos is not None:
        max_pos = _int(source, str(ck), max_pos)
    if _fields(cfg.get("attn_config")) is not None and max_pos is None and cfg.get("max_seq_len") is not None:
        ck, max_pos = "max_seq_len", _int(source, "max_seq_len", cfg.get("max_seq_len"))  # MPT
    return ck, max_pos


def _head_dim(cfg: _Fields, source: str, partial: bool = False, floor: bool = False) -> tuple[int, str]:
    # transformers' rule: a partial rotary factor applies to head_dim (Mistral 4 rotates 0.5 x 128 = its
    # qk_rope_head_dim); without one, qk_rope_head_dim is DeepSeek MLA's rotated part of a wider head.
    # floor: hidden_size // num_attention_heads even when not divisible, as transformers' code computes it
    for key in ("head_dim",) if partial else ("qk_rope_head_dim", "head_dim"):
        if cfg.get(key) is not None:
            return _int(source, key, cfg.get(key)), key
    hk, hidden = cfg.first(_HIDDEN_KEYS)
    nk, heads = cfg.first(_HEADS_KEYS)
    if hidden is None or heads is None:
        raise _fail(source, "no head_dim, and no hidden_size with num_attention_heads to derive it from")
    hidden, heads = _int(source, str(hk), hidden), _int(source, str(nk), heads)
    if hidden % heads and not floor:
        raise _fail(source, f"{hk} {hidden} is not divisible by {nk} {heads}")
    return hidden // heads, f"{hk} // {nk}"


def _layer_fields(cfg: _Fields, layer_type: str, source: str) -> _Fields:
    """The config as the layers of one type see it: transformers' ``per_layer_config`` overrides (Gemma 4's
    full-attention ``head_dim``).  A config object gives them as ``per_layer_config[layer_type]``; its JSON form
    (``to_dict()``) maps layer indices to overrides, which must agree across the layers of that type."""
    per_layer = cfg.get("per_layer_config")
    if per_layer is None:
        return cfg
    if not cfg.is_dict:
        with contextlib.suppress(KeyError, TypeError):
            found = per_layer[layer_type]
            return cfg if found is cfg.raw else _Fields(found)
        return cfg
    types = cfg.get("layer_types")
    if not isinstance(per_layer, Mapping) or not isinstance(types, list) or layer_type not in types:
        return cfg
    by_index = {int(k): v for k, v in per_layer.items() if str(k).strip().isdigit()}  # keys "05" or 5
    overrides = [by_index.get(i) or {} for i, t in enumerate(types) if t == layer_type]
    if any(o != overrides[0] for o in overrides):
        raise _fail(source, f"per_layer_config: the {layer_type} layers differ; one schedule per layer type "
                            "needs the same overrides on each")
    return _Fields({**cfg.raw, **overrides[0]}) if overrides[0] else cfg


def _rope_params(cfg: _Fields, source: str) -> Mapping[str, Any] | None:
    """The config's rope parameters; legacy per-layer fields (Gemma 3's ``rope_local_base_freq``) give one set
    per layer type, as transformers' config class builds them (:func:`.layers.legacy_layer_params`)."""
    params = cfg.get("rope_parameters")
    if params is None:
        params = cfg.get("rope_scaling")
    if params is not None and not isinstance(params, Mapping):
        raise _fail(source, f"rope_parameters/rope_scaling {params!r} must be an object or null")
    if not _is_per_layer(params):
        return legacy_layer_params(cfg.get, params) or params
    return params


def _ignored_keys(cfg: _Fields) -> dict[str, str]:
    """rope parameter keys that do not change the frequencies: ours, and those transformers ignores at rope
    validation (e.g. Ministral 3's ``llama_4_scaling_beta``) unless the schedule reads them."""
    known = {*PARAM_KEYS, *IGNORED_KEYS}
    theirs = {k: "transformers ignores it at rope validation" for k in cfg.get("ignore_keys_at_rope_validation") or ()
              if isinstance(k, str) and k not in known}
    return {**theirs, **_NOT_FREQUENCY_KEYS}


@dataclass(frozen=True)
class _Shared:
    """What every layer type's schedule reads from the config's top level."""

    base: float | None
    prf: Any  # partial rotary factor
    orig: int | None  # original_max_position_embeddings (Phi-3 keeps it at the top level)
    max_pos: int | None
    rotary_dim: Any  # GPT-J: the number of rotated dims


def _group_schedule(cfg: _Fields, layer_type: str, params: Mapping[str, Any] | None, top: _Shared,
                    source: str, notes: list[str], module: bool = False) -> RopeSchedule:
    """One layer type's schedule (``"all"``: the config's one set of parameters).

    ``module``: read as transformers' rotary code does (see :func:`schedule_from_config`).
    """
    lf = _layer_fields(cfg, layer_type, source) if layer_type != "all" else cfg
    p = dict(params or {})
    if module and "mrope_section" in p:
        raise _fail(source, "multimodal rope (mrope_section): 3-D position ids, not the 1-D rotary protocol")
    if p.get("rope_type", p.get("type")) == "axial":
        raise _fail(source, "axial (2-D vision) rope: positions are (row, column) pairs, not the 1-D rotary protocol")
    ignored = _ignored_keys(cfg)
    for k in [k for k in p if k in ignored]:
        notes.append(f"ignored {k}: {ignored[k]}")
        del p[k]
    max_pos = top.max_pos
    inner = p.pop("max_position_embeddings", None)  # a copy of the top-level value (Mistral 4)
    if inner is not None and max_pos is None:
        max_pos = _int(source, "rope_parameters max_position_embeddings", inner)
    elif inner is not None and inner != max_pos:
        notes.append(f"ignored rope_parameters max_position_embeddings {inner!r}: the config's is {max_pos}")
    prf = top.prf
    partial = (p.get("partial_rotary_factor", prf) or 1.0) != 1.0
    hd, how = _head_dim(lf, source, partial, floor=module)
    if lf is not cfg and cfg.is_dict:  # (a config object may refuse to give a per-layer value globally)
        with contextlib.suppress(ValueError):
            how = how if _head_dim(cfg, source, partial)[0] == hd else f"per_layer_config ({how})"
    if f"head_dim {hd} from {how}" not in notes:
        notes.append(f"head_dim {hd} from {how}")
    if layer_type == "full_attention" and cfg.get("global_head_dim") is not None:  # Gemma 4's config.json
        hd = _int(source, "global_head_dim", cfg.get("global_head_dim"))
        notes.append(f"{layer_type}: head_dim {hd} from global_head_dim")
    where = source + (f" rope_parameters[{layer_type!r}]" if source and layer_type != "all" else "")
    try:
        s = schedule_from_rope_parameters(p, head_dim=hd, base=top.base, max_position_embeddings=max_pos,
                                          original_max_position_embeddings=top.orig, partial_rotary_factor=prf)
        if top.rotary_dim is not None and not module and s.scaling != "proportional" \
                and "partial_rotary_factor" not in p and prf is None:
            s = replace(s, rotary_dim=_int(source, "rotary_dim", top.rotary_dim))
    except ValueError as e:
        raise _fail(where, str(e)) from None
    return s


def _rope_schedules(cfg: _Fields, source: str, max_pos: int | None, notes: list[str], only: str | None = None,
                    module: bool = False) -> tuple[tuple[str, RopeSchedule], ...]:
    """Each layer type's schedule (``"all"`` when every layer shares one), or only the layer type ``only``;
    layer types with null parameters have no rotary embedding and are left out, with a note."""
    params = _rope_params(cfg, source)
    groups = dict(params) if _is_per_layer(params) else {"all": params}  # type: ignore[arg-type]
    if cfg.get("rope_local_base_freq") is not None and cfg.get("rope_parameters") is None:
        notes.append("rope_local_base_freq: the sliding_attention layers' base (transformers builds one schedule "
                     "per layer type)")
    base_key, base = cfg.first(_BASE_KEYS)
    pk, prf = cfg.first(_PARTIAL_KEYS)
    orig = cfg.get("original_max_position_embeddings")
    if orig is not None:
        orig = _int(source, "original_max_position_embeddings", orig)
    rotary = {t: g for t, g in groups.items() if g is not None or t == "all"}
    if base is None and not all("rope_theta" in (g or {}) for g in rotary.values()):
        base = 10000.0
        notes.append("rope_theta not in the config: transformers' default 10000")
    elif base_key is not None and base_key != "rope_theta":
        notes.append(f"base from {base_key}")
    top = _Shared(base=base, prf=prf, orig=orig, max_pos=max_pos, rotary_dim=cfg.get("rotary_dim"))
    notes += [f"{t}: no rope parameters (no rotary embedding)" for t in groups if t not in rotary]
    if not rotary:
        raise _fail(source, f"no layer type has rope parameters ({', '.join(groups)} are null)")
    out = tuple((t, _group_schedule(cfg, t, g, top, source, notes, module)) for t, g in rotary.items()
                if only is None or t == only)
    if prf is not None and pk != "partial_rotary_factor":
        notes.append(f"partial rotary factor from {pk}")
    return out


def rope_layer_types(config: Any) -> tuple[str, ...] | None:
    """The layer types a config gives rope parameters of their own (null ones left out), or None when every
    layer shares one set.  ``config``: a ``config.json`` dict or a transformers config object.

    >>> rope_layer_types({"rope_parameters": {"full_attention": {"rope_theta": 1e6}, "sliding_attention": None}})
    ('full_attention',)
    >>> rope_layer_types({"rope_theta": 1e4}) is None
    True
    """
    params = _rope_params(_need_fields(config, ""), "")
    if not _is_per_layer(params):
        return None
    return tuple(t for t, g in params.items() if g is not None)  # type: ignore[union-attr]


def _need_fields(config: Any, source: str) -> _Fields:
    f = _fields(config)
    if f is None:
        raise _fail(source, f"the top level must be a JSON object, got {type(config).__name__}")
    return f


def schedule_from_config(config: Any, layer_type: str | None = None) -> RopeSchedule:
    """The RoPE schedule a rotary module built from ``config`` implements (per layer type: ``layer_type``'s).

    ``config`` is a ``config.json`` dict or a transformers config object (read
    by attribute, as transformers' own code reads it: ``per_layer_config``
    gives Gemma 4's full-attention layers their ``head_dim``).  The rules are
    :func:`load_config_dict`'s, except where a module's code, not the model's
    description, decides: the config is read as given (a ``text_config`` is
    not entered), ALiBi is not asked about, ``rotary_dim`` is not read and
    ``hidden_size // num_attention_heads`` is floored (transformers' rotary
    code does neither check), and multimodal rope (``mrope_section``) is
    refused: such a module takes 3-D position ids, not the 1-D rotary
    protocol.  Only ``layer_type``'s schedule is built.  Errors carry no file
    name.

    >>> s = schedule_from_config({"hidden_size": 4096, "num_attention_heads": 32,
    ...                           "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}})
    >>> s.head_dim, s.base
    (128, 500000.0)
    >>> cfg = {"head_dim": 256, "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
    ...        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}
    >>> schedule_from_config(cfg, "sliding_attention").base
    10000.0
    >>> schedule_from_config(cfg)
    Traceback (most recent call last):
    ...
    ValueError: the config has rope parameters per layer type (full_attention, sliding_attention); pass a layer type
    """
    f = _need_fields(config, "")
    params = _rope_params(f, "")
    if _is_per_layer(params):
        assert params is not None
        if layer_type is None:
            raise ValueError(f"the config has rope parameters per layer type ({', '.join(params)}); pass a layer type")
        if layer_type not in params:
            raise ValueError(f"unknown layer type {layer_type!r}; the config has {', '.join(params)}")
        if params[layer_type] is None:
            raise ValueError(f"layer type {layer_type!r} has no rope parameters (no rotary embedding)")
    elif layer_type is not None:
        raise ValueError(f"layer type {layer_type!r} given, but the config has one set of rope parameters")
    _, max_pos = _context(f, f, "")
    ((_, s),) = _rope_schedules(f, "", max_pos, [], only=layer_type or "all", module=True)
    return s


def load_config_dict(data: Any, *, name: str = "model", source: str = "config") -> ModelConfig:
    """Parse a ``config.json`` already read as a dict (see :func:`load_config`), or a transformers config object.

    A config object is read by attribute, as transformers' own code reads it
    (its ``to_dict()`` drops values such as Gemma 4's ``global_head_dim``).
    Rules: a ``text_config`` (multimodal configs) is used in place of
    the top level.  ALiBi when the config says so (``attn_config.alibi`` (MPT),
    ``alibi`` (Falcon), ``position_embedding_type: "alibi"``, ``use_alibi``),
    for Bloom, and for Baichuan configs without ``max_position_embeddings``
    (Baichuan-13B and Baichuan2-13B use ALiBi and declare
    ``model_max_length``; the 7B models use RoPE and declare
    ``max_position_embeddings``); heads from ``num_attention_heads`` /
    ``n_head`` / ``n_heads``.  RoPE otherwise, when a RoPE field or a RoPE
    family is present: base ``rope_theta`` (or ``rotary_emb_base``; 10000 when
    absent, as transformers defaults), head dim ``qk_rope_head_dim`` (MLA) or
    ``head_dim`` or ``hidden_size // num_attention_heads``, partial rotary
    from ``partial_rotary_factor`` / ``rotary_pct`` / ``rotary_emb_fraction``
    (or ``rotary_dim``), the schedule from ``rope_parameters`` (per layer type
    when it maps layer types to objects, e.g. Gemma's ``sliding_attention`` /
    ``full_attention``; a layer type mapped to null has no rotary embedding;
    ``per_layer_config`` overrides, and ``full_attention`` uses
    ``global_head_dim`` when given) or the legacy ``rope_scaling`` (``type``
    or ``rope_type``), with a top-level ``original_max_position_embeddings``
    (Phi-3).  Context from the first of :data:`CONTEXT_KEYS` present.

    >>> m = load_config_dict({"model_type": "bloom", "n_head": 32, "hidden_size": 4096})
    >>> m.kind, m.num_heads, m.max_position_embeddings
    ('alibi', 32, None)
    >>> load_config_dict([1, 2], source="x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: the top level must be a JSON object, got list
    """
    for arg, value in (("name", name), ("source", source)):
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{arg} {describe(value)} must be a string")
    top = _need_fields(data, source)
    if top.is_dict and top.get("_class_name") is not None:
        raise _fail(source, f"a diffusers config (_class_name {top.get('_class_name')!r}), not a transformers one: "
                            "`precision-audit config FILE --image WxH` audits its position encoding "
                            "(precision_audit.config.diffusion)")
    cfg = top
    notes: list[str] = []
    if _fields(top.get("text_config")) is not None:
        cfg = _Fields(top.get("text_config"))
        notes.append("read text_config (multimodal config)")
    model_type = cfg.get("model_type") or top.get("model_type") or "unknown"
    if not isinstance(model_type, str):
        raise _fail(source, f"model_type {model_type!r} must be a string")
    ck, max_pos = _context(cfg, top, source)
    dkeys = ("torch_dtype", "dtype") if top.is_dict else ("dtype",)  # a config object's torch_dtype is deprecated
    dtype = cfg.first(dkeys)[1] or top.first(dkeys)[1]
    dtype = None if dtype is None else str(dtype).removeprefix("torch.")
    nm = top.get("_name_or_path") or name
    other = None if _alibi_flag(cfg) else _relative_or_learned(cfg, model_type, notes)
    if other is not None:
        kind, scheme, params = other
        return ModelConfig(name=str(nm), model_type=model_type, kind=kind, scheme=scheme, scheme_params=params,
                           max_position_embeddings=max_pos, context_key=ck, torch_dtype=dtype, source=source,
                           notes=tuple(notes))
    kind = _position_kind(cfg, model_type, source)
    common: dict[str, Any] = dict(name=str(nm), model_type=model_type, max_position_embeddings=max_pos,
                                  context_key=ck, torch_dtype=dtype, source=source)
    if kind == "alibi":
        hk, heads = cfg.first(_HEADS_KEYS)
        if heads is None:
            raise _fail(source, "ALiBi model without num_attention_heads / n_head / n_heads")
        attn = _fields(cfg.get("attn_config"))
        bias_max = None if attn is None else attn.get("alibi_bias_max")
        return ModelConfig(kind="alibi", num_heads=_int(source, str(hk), heads), alibi_bias_max=bias_max,
                           notes=tuple(notes), **common)
    rope = _rope_schedules(cfg, source, max_pos, notes)
    layers = layer_facts(cfg.raw, source, get=cfg.get)
    return ModelConfig(kind="rope", rope=rope, notes=tuple(notes), layers=None if layers.empty else layers,
                       mrope=mrope_facts(top.get, cfg.get), **common)
