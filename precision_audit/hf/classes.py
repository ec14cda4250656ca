"""A model type's transformers rotary classes: found in ``transformers.models``, built from the default config (or
a ``config.json``) without weights, optionally ``.to(dtype)`` as ``model.to(dtype)`` does, and audited
(:func:`audit_model_type`); a model type's default config as the tool's model description
(:func:`default_model_config`).  transformers is imported when a function needs it."""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..checks import ArgumentTypeError, describe, unknown_name
from ..config import ModelConfig, load_config_dict, rope_layer_types, schedule_from_config
from ._transformers import _quiet, require_transformers
from .modules import ModuleRow, _torch_dtype, audit_rope_module

__all__ = ["MODEL_TYPES_HINT", "audit_model_type", "build_model_type_module", "build_rotary_module", "default_model_config", "find_rotary_classes",
           "unknown_model_type"]

_NON_TEXT = ("vision", "visual", "audio", "image", "video", "patch", "speech", "2d", "3d", "pixel", "encoder")


def _text_first(name: str) -> tuple[int, str]:
    return (int(any(w in name.lower() for w in _NON_TEXT)), name)


def _classes_in(module: Any) -> list[Any]:
    found = [obj for n, obj in vars(module).items()
             if n.endswith("RotaryEmbedding") and inspect.isclass(obj) and obj.__module__ == module.__name__]
    return sorted(found, key=lambda c: _text_first(c.__name__))


def _config_classes(cls: Any) -> list[Any]:
    """Candidate config classes for a rotary class: its ``config`` annotation, the module's models'
    ``config_class``, the package's model type in ``CONFIG_MAPPING``."""
    from transformers import PreTrainedConfig, PreTrainedModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    mod = importlib.import_module(cls.__module__)
    out: list[Any] = []
    try:
        ann = inspect.signature(cls.__init__).parameters["config"].annotation
    except (KeyError, ValueError, TypeError):
        ann = inspect.Parameter.empty
    if isinstance(ann, str):
        ann = getattr(mod, ann.strip("'\""), None)
    if inspect.isclass(ann) and issubclass(ann, PreTrainedConfig):
        out.append(ann)
    for obj in vars(mod).values():
        if inspect.isclass(obj) and issubclass(obj, PreTrainedModel) and obj.__module__ == mod.__name__:
            cc = getattr(obj, "config_class", None)
            if inspect.isclass(cc) and cc not in out:
                out.append(cc)
    pkg = cls.__module__.split(".")[2]
    with contextlib.suppress(KeyError):
        if CONFIG_MAPPING[pkg] not in out:
            out.append(CONFIG_MAPPING[pkg])
    return out


def _sub_configs(config: Any) -> list[Any]:
    """The config and its text sub-config (multimodal configs hold the text model's config)."""
    out = [config]
    with contextlib.suppress(Exception):
        t = config.get_text_config()
        if t is not None and t is not config:
            out.append(t)
    return out


def _forward_kind(cls: Any) -> str:
    """``"plain"`` for forward(x, position_ids), ``"layer_type"`` for forward(x, position_ids, layer_type)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        raise ValueError("forward has no inspectable signature") from None
    names = [p.name for p in params]
    if len(params) < 2 or names[1] != "position_ids":
        raise ValueError(f"forward({', '.join(names)}) is not the rotary protocol forward(x, position_ids)")
    required = [p.name for p in params[2:] if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if "layer_type" in names:
        return "layer_type"
    if required:
        raise ValueError(f"forward({', '.join(names)}) needs more than (x, position_ids)")
    return "plain"


def build_rotary_module(cls: Any, config: Any | None = None) -> tuple[Any, Any]:
    """Build a rotary class from ``config`` (default: its model's default config); returns (module, config).

    The config class comes from the ``config`` annotation of ``__init__``,
    else the ``config_class`` of the module's models, else ``CONFIG_MAPPING``;
    a multimodal config is tried with its text sub-config too.  No weights,
    no downloads.
    """
    require_transformers()
    errors: list[str] = []
    candidates = [config] if config is not None else []
    with _quiet():
        if config is None:
            for cc in _config_classes(cls):
                try:
                    candidates.append(cc())
                except Exception as e:
                    errors.append(f"{cc.__name__}() failed: {e!r}")
        for cfg in candidates:
            for c in _sub_configs(cfg):
                try:
                    return cls(c), c
                except Exception as e:
                    errors.append(f"{cls.__name__}({type(c).__name__}) failed: {e!r}")
    raise ValueError("; ".join(errors) or f"no config class found for {cls.__name__}")


def _layer_types(module: Any, config: Any) -> list[str | None]:
    """The layer types to audit: those with rope parameters of their own (per-layer-type configs), else [None].

    The module's ``layer_types`` (else the config's) in sorted order, each
    kept when :func:`~precision_audit.config.rope_layer_types` says the
    config gives it rope parameters.
    """
    with_params = rope_layer_types(config)
    if with_params is None:
        return [None]
    lts = getattr(module, "layer_types", None) or with_params
    return [lt for lt in sorted(set(lts)) if lt in with_params]


MODEL_TYPES_HINT = "`precision-audit hf-scan --list` lists those with a rotary class"


def unknown_model_type(model_type: str) -> str:
    """The error for a model type transformers does not know: close matches, the count, where to look."""
    transformers = require_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return unknown_name("model type", model_type, CONFIG_MAPPING.keys(),
                        where=f"for transformers {transformers.__version__}", hint=MODEL_TYPES_HINT)


def _model_type_module(model_type: str) -> Any:
    require_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, model_type_to_module_name

    if model_type not in CONFIG_MAPPING:
        raise ValueError(unknown_model_type(model_type))
    pkg = model_type_to_module_name(model_type)
    try:
        with _quiet():
            return importlib.import_module(f"transformers.models.{pkg}.modeling_{pkg}")
    except ImportError as e:
        raise ValueError(f"model type {model_type!r}: cannot import its modeling module ({e})") from None


def find_rotary_classes(model_type: str) -> list[Any]:
    """The ``*RotaryEmbedding`` classes of a model type's modeling module, text classes first.

    E.g. ``find_rotary_classes("llama")`` gives ``[LlamaRotaryEmbedding]``
    (tests/test_hf.py runs it).
    """
    mod = _model_type_module(model_type)
    found = _classes_in(mod)
    if not found:
        raise ValueError(f"model type {model_type!r} has no *RotaryEmbedding class in {mod.__name__}")
    return found


def _config_from_dict(cls: Any, model_type: str, data: Mapping[str, Any]) -> Any:
    """A config object for ``cls`` from a config.json dict (never executes code)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    declared = data.get("model_type", model_type)
    with _quiet():
        for cc in _config_classes(cls):
            if getattr(cc, "model_type", None) == declared:
                return cc.from_dict(dict(data))
        if declared not in CONFIG_MAPPING:
            raise ValueError(f"config model_type {declared!r} is unknown to this transformers")
        return CONFIG_MAPPING[declared].from_dict(dict(data))


def build_model_type_module(model_type: str, config: Mapping[str, Any] | None = None, *,
                            class_name: str | None = None) -> tuple[Any, Any, list[str | None]]:
    """A model type's rotary module, built as :func:`audit_model_type` and ``hf-scan`` build it:
    ``(module, config object, layer types)``.

    The first text ``*RotaryEmbedding`` class unless ``class_name`` names another, built from ``config`` (a
    config.json dict, parsed, never executed) or the model type's default config; the layer types are
    ``[None]`` for ``forward(x, position_ids)``, else those with rope parameters (Gemma 3).  No weights, no
    downloads.  E.g. ``build_model_type_module("llama")[0]`` is a ``LlamaRotaryEmbedding`` (tests/test_trace.py).
    """
    classes = find_rotary_classes(model_type)
    if class_name is not None:
        named = [c for c in classes if c.__name__ == class_name]
        if not named:
            raise ValueError(f"model type {model_type!r} has no class {class_name!r}; it has "
                             f"{', '.join(c.__name__ for c in classes)}")
        classes = named
    cls = classes[0]
    kind = _forward_kind(cls)
    cfg = None if config is None else _config_from_dict(cls, model_type, config)
    module, cfg = build_rotary_module(cls, cfg)
    return module, cfg, (_layer_types(module, cfg) if kind == "layer_type" else [None])


def audit_model_type(
    model_type: str,
    lengths: int | Iterable[int] = 8192,
    *,
    dtype: Any = "bfloat16",
    cast_module: bool = False,
    config: Mapping[str, Any] | None = None,
    layer_type: str | None = None,
    class_name: str | None = None,
    progress: Callable[[int], None] | None = None,
    distances: int | Iterable[int] | None = None,
) -> list[ModuleRow]:
    """Build a model type's rotary module (default config, or a config.json dict) and audit it.

    ``cast_module=True`` applies ``.to(dtype)`` first, as ``model.to(dtype)``
    does.  The first text ``*RotaryEmbedding`` class is used unless
    ``class_name`` names another; per-layer-type modules (Gemma) give one
    row set per layer type unless ``layer_type`` picks one.  ``distances`` as
    for :func:`audit_rope_module`.
    """
    name, tdt = _torch_dtype(dtype)
    module, cfg, lts = build_model_type_module(model_type, config, class_name=class_name)
    cls = type(module)
    if layer_type is not None:
        if layer_type not in lts:
            has = f"has layer types {', '.join(map(str, lts))}" if lts != [None] else "has no layer types"
            raise ValueError(f"unknown layer type {layer_type!r}: {cls.__name__} with this config {has}")
        lts = [layer_type]
    if cast_module:
        module = module.to(tdt)
    rows: list[ModuleRow] = []
    for lt in lts:
        sched = schedule_from_config(cfg, lt)
        rows += audit_rope_module(module, sched, lengths, dtype=name, layer_type=lt, model_type=model_type,
                                  cast_module=cast_module, progress=progress, distances=distances)
    return rows


def default_model_config(model_type: str) -> ModelConfig:
    """The description of transformers' default config for ``model_type`` (``AutoConfig.for_model``, read by
    attribute as transformers reads it: ``to_dict()`` drops e.g. Gemma 4's head dims; nothing downloaded).

    >>> m = default_model_config("llama")  # doctest: +SKIP
    >>> m.kind, m.rope[0][1].head_dim  # doctest: +SKIP
    ('rope', 128)
    """
    if not isinstance(model_type, str):
        raise ArgumentTypeError(f"model_type {describe(model_type)} must be a string")
    try:
        from transformers import AutoConfig
    except ImportError:
        raise ValueError("a model type needs transformers (pip install 'precision-audit[hf]' or transformers)") \
            from None
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise ValueError(unknown_model_type(model_type))
    try:
        cfg = AutoConfig.for_model(model_type)
    except (ValueError, KeyError) as e:
        raise ValueError(f"model type {model_type!r}: transformers cannot build its default config "
                         f"({str(e)[:200]})") from None
    return load_config_dict(cfg, name=f"{model_type} (transformers default config)")
