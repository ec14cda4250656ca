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

from ..checks import ArgumentTypeError, describe

__all__ = ["Target", "calling_convention", "check_inputs", "load_target", "takes_layer_type"]


@dataclass
class Target:
    """A callable to trace: ``fn``, its label, the config it was built from (None: use ``fn.config`` if any),
    the layer types its forward takes (``[None]``: none)."""

    fn: Any
    label: str
    config: Any = None
    layer_types: tuple[str | None, ...] = (None,)


def calling_convention(fn: Any, name: str = "target") -> str:
    """``"rotary"`` for ``forward(x, position_ids[, layer_type])``, ``"x"`` for ``forward(x)``; else ValueError
    naming ``name`` (a callable with no position input).

    >>> calling_convention(print)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: target <built-in function print> takes no position input: trace needs forward(x, position_ids) ...
    """
    params = _positional(fn, name)
    names = [p.name for p in params]
    if len(names) >= 2 and names[1] in ("position_ids", "positions", "pos"):
        return "rotary"
    required = [p for p in params if p.default is inspect.Parameter.empty]
    if len(required) == 1 and len(names) >= 1:
        return "x"
    shown = f"{type(fn).__name__}.forward({', '.join(names)})" if hasattr(fn, "forward") else describe(fn)
    raise ValueError(f"{name} {shown} takes no position input: trace needs forward(x, position_ids) or "
                     "forward(x) (positions made inside), or inputs= and positions=")


def _signature(fn: Any) -> inspect.Signature | None:
    """The signature of ``fn``'s forward (or of ``fn``); None when it has none to read."""
    try:
        return inspect.signature(getattr(fn, "forward", fn))
    except (TypeError, ValueError):
        return None


def _positional(fn: Any, name: str) -> list[inspect.Parameter]:
    sig = _signature(fn)
    if sig is None:
        raise ValueError(f"{name} {describe(fn)} has no inspectable signature: pass inputs= and positions=")
    return [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _shown(fn: Any) -> str:
    return f"{type(fn).__name__}.forward" if hasattr(fn, "forward") else _name(fn)


def takes_layer_type(fn: Any) -> bool:
    """Whether ``fn(x, position_ids, layer_type)`` fits its signature (True when there is none to read).

    >>> takes_layer_type(lambda x, position_ids: None), takes_layer_type(lambda x, position_ids, layer_type: None)
    (False, True)
    """
    sig = _signature(fn)
    if sig is None:
        return True
    params = sig.parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in params)


def check_inputs(fn: Any, inputs: dict[str, Any]) -> None:
    """ValueError naming ``inputs`` when ``fn(**inputs)`` does not fit ``fn``'s signature (a key it has no
    parameter for, a required parameter missing); nothing when there is no signature to read.

    >>> check_inputs(lambda x, position_ids: None, {"x": 0})
    Traceback (most recent call last):
    ...
    ValueError: inputs {'x': 0} do not fit <lambda>(x, position_ids): position_ids missing
    """
    bad = [k for k in inputs if not isinstance(k, str)]
    if bad:
        raise ArgumentTypeError(f"inputs {describe(inputs)}: keys must be parameter names (strings), not "
                                f"{describe(bad[0])}")
    sig = _signature(fn)
    if sig is None:
        return
    params = sig.parameters
    by_name = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    free = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unknown = [] if free else [k for k in inputs if k not in by_name]
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and (n not in inputs or n not in by_name)]
    if unknown or missing:
        why = [f"no parameter {', '.join(map(repr, unknown))}"] if unknown else []
        why += [f"{', '.join(missing)} missing"] if missing else []
        raise ValueError(f"inputs {describe(inputs)} do not fit {_shown(fn)}({', '.join(params)}): {'; '.join(why)}")


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _from_config(path: str, cast: str | None) -> Target:
    from ..hf import build_model_type_module

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path, bad UTF-8, bad JSON
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
