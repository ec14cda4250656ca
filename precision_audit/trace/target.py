"""What ``trace`` runs: a config.json (the transformers rotary module built from it), ``FILE.py:NAME`` or
``package.module:NAME`` (a factory, a class built with inferred arguments, a function), or a module / callable
given directly, optionally one of its methods; and how it is called (the rotary protocol, or ``x`` alone).

>>> calling_convention(lambda x, position_ids: None)
'rotary'
>>> calling_convention(lambda x: None)
'x'
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ..checks import ArgumentTypeError, describe

__all__ = ["Target", "calling_convention", "check_inputs", "load_target", "takes_layer_type"]


@dataclass
class Target:
    """A callable to trace: ``fn``, its label, the config it was built from (None: use ``fn.config`` if any),
    the layer types its forward takes (``[None]``: none), and ``args``: arguments by name for a function traced
    itself (the rest inferred when it is called)."""

    fn: Any
    label: str
    config: Any = None
    layer_types: tuple[str | None, ...] = (None,)
    args: dict[str, Any] = field(default_factory=dict)  # a traced function's arguments by name (--arg)


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
        raise ValueError(f"inputs {_inputs_text(inputs)} do not fit {_shown(fn)}({', '.join(params)}): "
                         f"{'; '.join(why)}")


def _inputs_text(inputs: dict[str, Any]) -> str:
    """``inputs`` in a message: a tensor as its shape and dtype, anything else as :func:`describe` shows it."""
    def one(v: Any) -> str:
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if shape is not None and dtype is not None and hasattr(v, "numel"):
            return f"<tensor {'x'.join(map(str, shape)) or 'scalar'} {str(dtype).removeprefix('torch.')}>"
        return describe(v)

    return "{" + ", ".join(f"{k!r}: {one(v)}" for k, v in inputs.items()) + "}"


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


def _build_class(cls: Any, spec: str, length: int, args: dict[str, Any]) -> Any:
    """An instance of ``cls`` with its constructor's arguments inferred (:func:`~.build.infer_arguments`)."""
    from .build import infer_arguments

    kwargs = infer_arguments(cls, length, args)
    try:
        return cls(**kwargs)
    except Exception as e:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"TARGET {spec}: {cls.__name__}({shown}) raised {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:300]}") from None


def _takes(cls: Any, args: dict[str, Any]) -> set[str]:
    """The names in ``args`` that ``cls``'s constructor takes (every one, with ``**kwargs``)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return set(args)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return set(args)
    return {k for k in args if k in {p.name for p in params}}


def _required(fn: Any) -> list[str]:
    """The parameters ``fn`` cannot be called without (none when it has no signature to read)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _from_factory(spec: str, length: int = 8192, args: dict[str, Any] | None = None) -> Target:
    """``FILE.py:NAME`` or ``package.module:NAME``: a class (built with inferred arguments), a factory (a function
    called with no argument that returns a module or callable), or a function traced itself (it needs arguments:
    the call infers them, or ``inputs=`` gives them)."""
    from .build import import_attribute

    args = dict(args or {})
    obj, _ = import_attribute(spec)
    if inspect.isclass(obj):
        mine = _takes(obj, args)  # the others are the traced method's (--call) or forward's
        made = _build_class(obj, spec, length, {k: v for k, v in args.items() if k in mine})
        if not callable(made):
            raise ValueError(f"TARGET {spec}: {obj.__name__}() is not callable; name a method with --call")
        return Target(made, spec, getattr(made, "config", None), args={k: v for k, v in args.items()
                                                                        if k not in mine})
    elif _required(obj) or args:
        return Target(obj, spec, getattr(obj, "config", None), args=args)
    else:
        try:
            made = obj()
        except Exception as e:
            raise ValueError(f"TARGET {spec}: the factory raised {type(e).__name__}: "
                             f"{' '.join(str(e).split())[:300]}") from None
    if not callable(made):
        raise ValueError(f"TARGET {spec}: the factory returned {describe(made)}, not a module or callable")
    return Target(made, spec, getattr(made, "config", None))


def _bind(t: Target, call: str) -> None:
    """``t.fn`` becomes its method ``call`` (``--call``); ValueError naming it when there is none."""
    if not isinstance(call, str) or not call.isidentifier():
        raise ValueError(f"--call {call!r} must be a method name (e.g. get_embed)")
    if inspect.isfunction(t.fn) or inspect.ismethod(t.fn) or inspect.isbuiltin(t.fn):
        raise ValueError(f"--call {call}: {t.label} is a function, not an object with methods")
    method = getattr(t.fn, call, None)
    if not callable(method) or call.startswith("__"):
        public = sorted(n for n in dir(type(t.fn)) if not n.startswith("_") and callable(getattr(t.fn, n, None)))
        own = [n for n in public if n in vars(type(t.fn)) or n == "forward"]
        raise ValueError(f"--call {call}: {type(t.fn).__name__} has no method {call!r} (its own: "
                         f"{', '.join(own) or 'none'})")
    t.fn = method
    t.label += f".{call}"


def load_target(target: Any, cast: str | None = None, *, call: str | None = None, length: int = 8192,
                args: dict[str, Any] | None = None) -> Target:
    """A :class:`Target` from a config.json path, ``FILE.py:NAME`` / ``package.module:NAME`` (a factory, a class
    built with inferred arguments, or a function) or a module / callable; ``cast``: a torch dtype name applied
    with ``.to(dtype)`` (as ``model.to(dtype)`` does); ``call``: trace this method instead of ``forward``;
    ``length``: the value a length-style constructor argument gets; ``args``: constructor (or function)
    arguments by name, over the inferred ones."""
    if isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        if text.endswith(".json") or os.path.isfile(text):
            if text.endswith(".py"):
                raise ValueError(f"TARGET {text}: name what to trace in it: {text}:FACTORY, {text}:CLASS or "
                                 f"{text}:FUNCTION")
            if args:
                raise ValueError(f"--arg {', '.join(args)}: a config.json target is built from the config")
            t = _from_config(text, cast)
        else:
            t = _from_factory(text, length, args)
    elif callable(target):
        t = Target(target, _name(target), getattr(target, "config", None), args=dict(args or {}))
    else:
        raise ValueError(f"target {describe(target)} is not a config.json path, package.module:factory, "
                         "module or callable")
    if cast is not None:
        if not hasattr(t.fn, "to"):
            raise ValueError(f"--cast {cast}: {t.label} is not a torch module (it has no .to)")
        from ..formats import get_format

        t.fn = t.fn.to(get_format(cast).torch_dtype)
        t.label += f" .to({get_format(cast).name})"
    if call is not None and call != "forward":
        _bind(t, call)
    return t
