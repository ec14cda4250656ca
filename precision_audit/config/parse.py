"""Reading model configs: a ``config.json`` dict -> :class:`ModelConfig` (rules in :func:`load_config_dict`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..schedules import RopeSchedule, schedule_from_rope_parameters

__all__ = [
    "CONTEXT_KEYS",
    "ModelConfig",
    "load_config",
    "load_config_dict",
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


def _fail(source: str, problem: str) -> ValueError:
    return ValueError(f"{source}: {problem}")


@dataclass(frozen=True)
class ModelConfig:
    """What a ``config.json`` says about a model's position encoding.

    ``kind`` is ``"rope"`` (``rope`` holds one ``(layer_type, schedule)`` pair
    per attention layer type; ``"all"`` when every layer shares one) or
    ``"alibi"`` (``num_heads`` heads, the reference slopes).
    ``max_position_embeddings`` is the context length the config declares
    (``context_key`` names the key it came from; None if it declares none),
    ``torch_dtype`` the dtype it was saved in, ``notes`` what the parser
    assumed or ignored.

    >>> ModelConfig(name="x", model_type="bloom", kind="alibi")
    Traceback (most recent call last):
    ...
    ValueError: ModelConfig x: kind 'alibi' needs num_heads
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

    def __post_init__(self) -> None:
        if self.kind not in ("rope", "alibi"):
            raise ValueError(f"ModelConfig {self.name}: kind {self.kind!r} must be 'rope' or 'alibi'")
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

    def describe(self) -> str:
        """A few lines: kind, schedules or heads, context."""
        ctx = (f"context {self.max_position_embeddings} ({self.context_key})" if self.max_position_embeddings
               else "no context length in the config")
        head = f"{self.name} (model_type {self.model_type}): "
        if self.kind == "alibi":
            return head + f"ALiBi, {self.num_heads} heads; {ctx}"
        lines = [head + f"RoPE; {ctx}"]
        lines += [f"  {t}: {s.describe()}" for t, s in self.rope]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (schedules as their fields plus ``describe``)."""
        from .._common import _plain

        rope = []
        for t, s in self.rope:
            d = {k: getattr(s, k) for k in s.__dataclass_fields__}
            rope.append({"layer_type": t, **d, "attention_factor": s.cos_sin_scale, "describe": s.describe()})
        return _plain({
            "name": self.name, "model_type": self.model_type, "kind": self.kind, "rope": rope,
            "num_heads": self.num_heads, "max_position_embeddings": self.max_position_embeddings,
            "context_key": self.context_key, "torch_dtype": self.torch_dtype, "source": self.source,
            "notes": list(self.notes),
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


def _get(cfg: Mapping[str, Any], keys: Sequence[str]) -> tuple[str | None, Any]:
    for k in keys:
        if cfg.get(k) is not None:
            return k, cfg[k]
    return None, None


def _int(source: str, key: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() \
            or value < minimum:
        raise _fail(source, f"{key} {value!r} must be an integer >= {minimum}")
    return int(value)


def _is_per_layer(params: Any) -> bool:
    """transformers 5 style {"sliding_attention": {...}, "full_attention": {...}}."""
    return isinstance(params, Mapping) and bool(params) and all(isinstance(v, Mapping) for v in params.values())


def _alibi_flag(cfg: Mapping[str, Any]) -> bool | None:
    """True/False when the config says whether it uses ALiBi, None when it does not say."""
    attn = cfg.get("attn_config")
    if isinstance(attn, Mapping) and attn.get("alibi") is not None:  # MPT
        return bool(attn["alibi"])
    pet = cfg.get("position_embedding_type")
    if isinstance(pet, str):
        return pet.lower() == "alibi"
    if cfg.get("alibi") is not None:  # Falcon / RefinedWeb
        return bool(cfg["alibi"])
    if cfg.get("use_alibi") is not None:
        return bool(cfg["use_alibi"])
    return None


def _position_kind(cfg: Mapping[str, Any], model_type: str, source: str) -> str:
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
                        "rope_parameters, rope_scaling or partial rotary field, and no alibi field "
                        "(learned or relative positions are not audited)")


def _head_dim(cfg: Mapping[str, Any], source: str, partial: bool = False) -> tuple[int, str]:
    # transformers' rule: a partial rotary factor applies to head_dim (Mistral 4 rotates 0.5 x 128 = its
    # qk_rope_head_dim); without one, qk_rope_head_dim is DeepSeek MLA's rotated part of a wider head
    for key in ("head_dim",) if partial else ("qk_rope_head_dim", "head_dim"):
        if cfg.get(key) is not None:
            return _int(source, key, cfg[key]), key
    hk, hidden = _get(cfg, _HIDDEN_KEYS)
    nk, heads = _get(cfg, _HEADS_KEYS)
    if hidden is None or heads is None:
        raise _fail(source, "no head_dim, and no hidden_size with num_attention_heads to derive it from")
    hidden, heads = _int(source, str(hk), hidden), _int(source, str(nk), heads)
    if hidden % heads:
        raise _fail(source, f"{hk} {hidden} is not divisible by {nk} {heads}")
    return hidden // heads, f"{hk} // {nk}"


def _rope_schedules(cfg: Mapping[str, Any], source: str, max_pos: int | None,
                    notes: list[str]) -> tuple[tuple[str, RopeSchedule], ...]:
    base_key, base = _get(cfg, _BASE_KEYS)
    pk, prf = _get(cfg, _PARTIAL_KEYS)
    orig = cfg.get("original_max_position_embeddings")  # Phi-3 keeps it at the top level
    if orig is not None:
        orig = _int(source, "original_max_position_embeddings", orig)
    rotary_dim = cfg.get("rotary_dim")  # GPT-J: the number of rotated dims
    params: Any = cfg.get("rope_parameters")
    if params is None:
        params = cfg.get("rope_scaling")
    if params is not None and not isinstance(params, Mapping):
        raise _fail(source, f"rope_parameters/rope_scaling {params!r} must be an object or null")
    groups = dict(params) if _is_per_layer(params) else {"all": params or {}}
    if base is None and not all("rope_theta" in (g or {}) for g in groups.values()):
        base = 10000.0
        notes.append("rope_theta not in the config: transformers' default 10000")
    elif base_key is not None and base_key != "rope_theta":
        notes.append(f"base from {base_key}")
    out = []
    for layer_type, p in groups.items():
        p = dict(p or {})
        for k in [k for k in p if k in _NOT_FREQUENCY_KEYS]:
            notes.append(f"ignored {k}: {_NOT_FREQUENCY_KEYS[k]}")
            del p[k]
        if p.get("max_position_embeddings") is not None and max_pos is not None \
                and p["max_position_embeddings"] == max_pos:
            del p["max_position_embeddings"]  # a copy of the top-level value (Mistral 4)
        hd, how = _head_dim(cfg, source, partial=(p.get("partial_rotary_factor", prf) or 1.0) != 1.0)
        if f"head_dim {hd} from {how}" not in notes:
            notes.append(f"head_dim {hd} from {how}")
        if layer_type == "full_attention" and cfg.get("global_head_dim") is not None:  # Gemma 4
            hd = _int(source, "global_head_dim", cfg["global_head_dim"])
            notes.append(f"{layer_type}: head_dim {hd} from global_head_dim")
        where = source + (f" rope_parameters[{layer_type!r}]" if layer_type != "all" else "")
        try:
            s = schedule_from_rope_parameters(p, head_dim=hd, base=base, max_position_embeddings=max_pos,
                                              original_max_position_embeddings=orig,
                                              partial_rotary_factor=prf)
            if rotary_dim is not None and s.scaling != "proportional" and "partial_rotary_factor" not in p \
                    and prf is None:
                s = replace(s, rotary_dim=_int(source, "rotary_dim", rotary_dim))
        except ValueError as e:
            raise _fail(where, str(e)) from None
        out.append((layer_type, s))
    if prf is not None and pk != "partial_rotary_factor":
        notes.append(f"partial rotary factor from {pk}")
    return tuple(out)


def load_config_dict(data: Any, *, name: str = "model", source: str = "config") -> ModelConfig:
    """Parse a ``config.json`` already read as a dict (see :func:`load_config`).

    Rules: a ``text_config`` object (multimodal configs) is used in place of
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
    ``full_attention``; ``full_attention`` uses ``global_head_dim`` when
    given) or the legacy ``rope_scaling`` (``type`` or ``rope_type``), with a
    top-level ``original_max_position_embeddings`` (Phi-3).  Context from the
    first of :data:`CONTEXT_KEYS` present.

    >>> m = load_config_dict({"model_type": "bloom", "n_head": 32, "hidden_size": 4096})
    >>> m.kind, m.num_heads, m.max_position_embeddings
    ('alibi', 32, None)
    >>> load_config_dict([1, 2], source="x.json")
    Traceback (most recent call last):
    ...
    ValueError: x.json: the top level must be a JSON object, got list
    """
    if not isinstance(data, Mapping):
        raise _fail(source, f"the top level must be a JSON object, got {type(data).__name__}")
    top = data
    cfg: Mapping[str, Any] = data
    notes: list[str] = []
    if isinstance(data.get("text_config"), Mapping):
        cfg = data["text_config"]
        notes.append("read text_config (multimodal config)")
    model_type = cfg.get("model_type") or top.get("model_type") or "unknown"
    if not isinstance(model_type, str):
        raise _fail(source, f"model_type {model_type!r} must be a string")
    ck, max_pos = _get(cfg, CONTEXT_KEYS)
    if max_pos is None and cfg is not top:
        ck, max_pos = _get(top, CONTEXT_KEYS)
    if max_pos is not None:
        max_pos = _int(source, str(ck), max_pos)
    if isinstance(cfg.get("attn_config"), Mapping) and max_pos is None and cfg.get("max_seq_len") is not None:
        ck, max_pos = "max_seq_len", _int(source, "max_seq_len", cfg["max_seq_len"])
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or top.get("torch_dtype") or top.get("dtype")
    nm = top.get("_name_or_path") or name
    kind = _position_kind(cfg, model_type, source)
    if kind == "alibi":
        hk, heads = _get(cfg, _HEADS_KEYS)
        if heads is None:
            raise _fail(source, "ALiBi model without num_attention_heads / n_head / n_heads")
        heads = _int(source, str(hk), heads)
        return ModelConfig(name=str(nm), model_type=model_type, kind="alibi", num_heads=heads,
                           max_position_embeddings=max_pos, context_key=ck, torch_dtype=dtype, source=source,
                           notes=tuple(notes))
    rope = _rope_schedules(cfg, source, max_pos, notes)
    return ModelConfig(name=str(nm), model_type=model_type, kind="rope", rope=rope, max_position_embeddings=max_pos,
                       context_key=ck, torch_dtype=dtype, source=source, notes=tuple(notes))
