"""What ``trace`` runs: a config.json (the transformers rotary module built from it), ``package.module:factory``,
or a module / callable given directly; and how it is called (the rotary protocol, or ``x`` alone).

>>> calling_convention(lambda x, position_ids: None)
'rotary'
>>> calling_convention(lambda x: None)
'x'
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from dataclasses import dataclass
from typing import Any

from ..checks import describe

__all__ = ["Target", "calling_convention", "load_target"]


@dataclass
class Target:
    """A callable to trace: ``fn``, its label, the config it was built from (None: use ``fn.config`` if any),
    the layer types its forward takes (``[None]``: none)."""

    fn: Any
    label: str
    config: Any = None
    layer_types: tuple[str | None, ...] = (None,)


def calling_convention(fn: Any) -> str:
    """``"rotary"`` for ``forward(x, position_ids[, layer_type])``, ``"x"`` for ``forward(x)``; else ValueError
    (a callable with no position input)."""
    target = getattr(fn, "forward", fn)
    try:
        params = [p for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        raise ValueError(f"{_name(fn)} has no inspectable signature: pass inputs= and positions=") from None
    names = [p.name for p in params]
    if len(names) >= 2 and names[1] in ("position_ids", "positions", "pos"):
        return "rotary"
    required = [p for p in params if p.default is inspect.Parameter.empty]
    if len(required) == 1 and len(names) >= 1:
        return "x"
    shown = f"{type(fn).__name__}.forward" if hasattr(fn, "forward") else _name(fn)
    raise ValueError(f"{shown}({', '.join(names)}) takes no position input: trace needs forward(x, "
                     "position_ids) or forward(x) (positions made inside), or inputs= and positions=")


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _from_config(path: str, cast: str | None) -> Target:
    from ..hf import build_model_type_module

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"TARGET {path}: cannot read a config.json ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ValueError(f"TARGET {path}: a config.json with a model_type string is needed")
    try:
        module, cfg, lts = build_model_type_module(data["model_type"], data)
    except ValueError as e:
        raise ValueError(f"TARGET {path}: {e}") from None
    return Target(module, f"{type(module).__name__} from {os.path.basename(path)}", cfg, tuple(lts))


def _from_factory(spec: str) -> Target:
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise ValueError(f"TARGET {spec!r} is neither a config.json nor package.module:factory")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:
        raise ValueError(f"TARGET {spec}: cannot import {mod_name} ({type(e).__name__}: {e})") from None
    factory = getattr(mod, attr, None)
    if not callable(factory):
        raise ValueError(f"TARGET {spec}: {mod_name} has no callable {attr!r}")
    try:
        made = factory()
    except Exception as e:
        raise ValueError(f"TARGET {spec}: the factory raised {type(e).__name__}: {e}") from None
    if not callable(made):
        raise ValueError(f"TARGET {spec}: the factory returned {describe(made)}, not a module or callable")
    return Target(made, spec, getattr(made, "config", None))


def load_target(target: Any, cast: str | None = None) -> Target:
    """A :class:`Target` from a config.json path, ``package.module:factory`` or a module / callable;
    ``cast``: a torch dtype name applied with ``.to(dtype)`` (as ``model.to(dtype)`` does)."""
    if isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        t = _from_config(text, cast) if text.endswith(".json") or os.path.isfile(text) else _from_factory(text)
    elif callable(target):
        t = Target(target, _name(target), getattr(target, "config", None))
    else:
        raise ValueError(f"target {describe(target)} is not a config.json path, package.module:factory, "
                         "module or callable")
    if cast is not None:
        if not hasattr(t.fn, "to"):
            raise ValueError(f"--cast {cast}: {t.label} is not a torch module (it has no .to)")
        from ..formats import get_format

        t.fn = t.fn.to(get_format(cast).torch_dtype)
        t.label += f" .to({get_format(cast).name})"
    return t
