"""Argument checks shared by every public function: context-length parsing and validation, validators, unknown-name messages.

The ``check_*`` validators give every public function the same errors: a
wrong type raises :class:`ArgumentTypeError` (a TypeError that is also a
ValueError, so callers that turn bad input into usage errors by catching
ValueError, as the CLI does, keep working), a wrong value raises ValueError;
both messages name the argument and show the value.

>>> check_int(0, "chunk", minimum=1)
Traceback (most recent call last):
...
ValueError: chunk 0 must be at least 1
>>> check_choice(["numpy"], "engine", ("numpy", "torch"))
Traceback (most recent call last):
...
precision_audit.checks.ArgumentTypeError: engine ['numpy'] must be a string, one of numpy, torch
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np

MAX_LENGTH = 2**53  # beyond this float64 itself cannot hold every position exactly

_SUFFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
_LENGTH_RE = re.compile(r"^\s*([0-9]+)\s*([kKmMgG]?)\s*$")


def parse_length(text: str | int) -> int:
    """Parse a context length: ``8192``, ``8k``, ``32K``, ``1M`` (k = 1024).

    >>> [parse_length(s) for s in ("8192", "8k", "32K", "1M")]
    [8192, 8192, 32768, 1048576]
    >>> parse_length("1.5k")
    Traceback (most recent call last):
    ...
    ValueError: length '1.5k' is not a whole number of tokens (use e.g. 8192, 8k, 32K, 1M)
    >>> parse_length("-5")  # a negative length reads as one, like 0
    Traceback (most recent call last):
    ...
    ValueError: length -5 must be at least 1
    """
    if isinstance(text, bool):
        raise ValueError(f"length {text!r} is not an integer")
    if isinstance(text, (int, np.integer)):
        return check_length(int(text))
    m = _LENGTH_RE.match(str(text))
    negative = _LENGTH_RE.match(str(text).strip()[1:]) if str(text).strip().startswith("-") else None
    if negative:
        raise ValueError(f"length {str(text).strip()} must be at least 1")
    if not m:
        raise ValueError(
            f"length {text!r} is not a whole number of tokens (use e.g. 8192, 8k, 32K, 1M)"
        )
    return check_length(int(m.group(1)) * _SUFFIX[m.group(2).lower()])


def check_length(length: Any) -> int:
    """Validate one context length: an integer with 1 <= length <= 2**53.

    >>> check_length(0)
    Traceback (most recent call last):
    ...
    ValueError: length 0 must be at least 1
    """
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)):
        if isinstance(length, (float, np.floating)) and float(length).is_integer():
            length = int(length)
        else:
            raise ValueError(f"length {length!r} is not an integer")
    length = int(length)
    if length < 1:
        raise ValueError(f"length {length} must be at least 1")
    if length > MAX_LENGTH:
        raise ValueError(f"length {length} exceeds 2**53 = {MAX_LENGTH}")
    return length


def check_lengths(lengths: int | Iterable[int], *, limit: int = MAX_LENGTH, why: str = "") -> tuple[int, ...]:
    """One length or many -> a sorted tuple of distinct validated lengths.

    ``limit`` caps the lengths an auditor accepts (``why`` says why).

    >>> check_lengths([8192, 1024, 8192])
    (1024, 8192)
    >>> check_lengths(2**30, limit=2**26, why="the ALiBi audit streams L x heads biases")
    Traceback (most recent call last):
    ...
    ValueError: length 1073741824 exceeds 2**26 = 67108864 (the ALiBi audit streams L x heads biases)
    """
    if isinstance(lengths, (str, bytes)):
        raise ValueError(f"length {lengths!r} is not an integer (parse text with parse_length)")
    if not isinstance(lengths, Iterable):
        lengths = [lengths]
    out = sorted({check_length(n) for n in lengths})  # type: ignore[union-attr]
    if not out:
        raise ValueError("no context length given")
    if out[-1] > limit:
        raise ValueError(f"length {out[-1]} exceeds 2**{limit.bit_length() - 1} = {limit}" + (f" ({why})" if why else ""))
    return tuple(out)


# --------------------------------------------------------------------------- argument validators

T = TypeVar("T")


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type.

    A TypeError, and also a ValueError so that code catching bad input as
    ValueError (the CLI turns it into a usage error) catches it too, as
    ``numpy.exceptions.AxisError`` is both a ValueError and an IndexError.
    """


def describe(value: Any, width: int = 60) -> str:
    """A short ``repr`` of a value for an error message.

    >>> describe("x" * 80)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (not a bool) within ``minimum..maximum``, as a Python int.

    >>> check_int(2.0, "chunk")
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: chunk 2.0 must be an integer
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"{name} {describe(value)} must be an integer")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} {v} must be at least {minimum}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} {v} must be at most {maximum}")
    return v


def check_number(value: Any, name: str, *, positive: bool = False, finite: bool = True) -> float:
    """A real number (not a bool) as a float: never nan; finite unless ``finite=False``; > 0 if ``positive``.

    >>> check_number(float("nan"), "tolerance", positive=True)
    Traceback (most recent call last):
    ...
    ValueError: tolerance nan must be a finite number > 0
    >>> check_number(2**1100, "tolerance")
    Traceback (most recent call last):
    ...
    ValueError: tolerance 2**1100 is beyond float64's range
    """
    want = ("a finite number" if finite else "a number") + (" > 0" if positive else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} {describe(value)} must be {want}")
    try:
        v = float(value)
    except OverflowError:
        shown = f"2**{math.log2(value):g}" if value > 0 and int(value) & (int(value) - 1) == 0 else describe(value)
        raise ValueError(f"{name} {shown} is beyond float64's range") from None
    if math.isnan(v) or (finite and math.isinf(v)) or (positive and not v > 0):
        raise ValueError(f"{name} {describe(value)} must be {want}")
    return v


def check_above(value: Any, name: str, low: float, *, want: str = "") -> float:
    """A finite number > ``low`` as a float, for fields whose errors say so in one wording.

    Every failure reads ``"{name} {value} must be {want}"`` (default ``a finite number > {low}``), a
    non-number as :class:`ArgumentTypeError`; only an integer beyond float64's range keeps
    :func:`check_number`'s message.

    >>> check_above(1, "base", 1)
    Traceback (most recent call last):
    ...
    ValueError: base 1 must be a finite number > 1
    >>> check_above(2**1100, "factor", 0)
    Traceback (most recent call last):
    ...
    ValueError: factor 2**1100 is beyond float64's range
    """
    bad = f"{name} {describe(value)} must be {want or f'a finite number > {low:g}'}"
    try:
        v = check_number(value, name)
    except ArgumentTypeError:
        raise ArgumentTypeError(bad) from None
    except ValueError:
        if isinstance(value, numbers.Integral):  # beyond float64's range: say so
            raise
        raise ValueError(bad) from None
    if not v > low:
        raise ValueError(bad)
    return v


def check_flag(value: Any, name: str) -> bool:
    """True or False (numpy's bool too), nothing merely truthy.

    >>> check_flag("no", "exact")
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: exact 'no' must be True or False
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{name} {describe(value)} must be True or False")
    return bool(value)


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (a string).

    >>> check_choice("cuda", "engine", ("numpy", "torch"))
    Traceback (most recent call last):
    ...
    ValueError: unknown engine 'cuda'; valid: numpy, torch
    """
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name} {describe(value)} must be a string, one of {', '.join(choices)}")
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(choices)}")
    return value


def check_path(path: Any, name: str, what: str = "path") -> Any:
    """A path the file system can be asked about (not empty, no NUL character); ``what`` names what it may be.

    >>> check_path("", "config")
    Traceback (most recent call last):
    ...
    ValueError: config '' is not a usable path (empty)
    """
    text = os.fspath(path)
    if not text or "\0" in str(text):
        raise ValueError(f"{name} {describe(path)} is not a usable {what}" + (" (empty)" if not text else " (NUL)"))
    return path


def check_callable(value: Any, name: str) -> Callable[..., Any] | None:
    """A callable or None (an optional callback such as ``progress``).

    >>> check_callable(1, "progress")
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: progress 1 must be callable (or None)
    """
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"{name} {describe(value)} must be callable (or None)")
    return value


def check_instance(value: Any, cls: type[T], name: str, hint: str = "") -> T:
    """``value`` if it is a ``cls``; else ArgumentTypeError naming ``name`` (and a ``hint``)."""
    if not isinstance(value, cls):
        raise ArgumentTypeError(f"{name} {describe(value)} must be a {cls.__name__}, not {type(value).__name__}"
                                + (f" ({hint})" if hint else ""))
    return value


def check_recipes(value: Any, cls: type[T], name: str = "recipes", hint: str = "") -> list[T]:
    """One ``cls`` or an iterable of them -> a non-empty list (text is not a recipe: ``hint`` says what is).

    >>> class Recipe: pass
    >>> check_recipes("fp32", Recipe, hint="preset('fp32', dtype) builds one")
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: recipes 'fp32' is text, not a Recipe or an iterable of Recipe (preset('fp32', dtype) builds one)
    >>> check_recipes([], Recipe)
    Traceback (most recent call last):
    ...
    ValueError: no recipe given (recipes [] is empty)
    """
    more = f" ({hint})" if hint else ""
    if isinstance(value, cls):
        return [value]
    what = f"a {cls.__name__} or an iterable of {cls.__name__}"
    if isinstance(value, (str, bytes)):
        raise ArgumentTypeError(f"{name} {describe(value)} is text, not {what}{more}")
    if not isinstance(value, Iterable) or isinstance(value, dict):
        raise ArgumentTypeError(f"{name} {describe(value)} is not {what}{more}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise ArgumentTypeError(f"{name}[{i}] {describe(item)} is not a {cls.__name__}{more}")
    if not items:
        raise ValueError(f"no recipe given ({name} {describe(value)} is empty)")
    return items


def check_names(value: Any, name: str, what: str, cls: type | tuple[type, ...] = (), *, empty: bool = False
                ) -> list[Any]:
    """One name (a string, or a ``cls``) or an iterable of them -> a list, non-empty unless ``empty``.

    >>> check_names("bf16", "dtypes", "format name")
    ['bf16']
    >>> check_names(None, "dtypes", "format name")
    Traceback (most recent call last):
    ...
    precision_audit.checks.ArgumentTypeError: dtypes None must be a format name or an iterable of them
    """
    if isinstance(value, str) or (cls and isinstance(value, cls)):
        return [value]
    if isinstance(value, bytes) or not isinstance(value, Iterable) or isinstance(value, dict):
        raise ArgumentTypeError(f"{name} {describe(value)} must be a {what} or an iterable of them")
    items = list(value)
    if not items and not empty:
        raise ValueError(f"no {what} given ({name} {describe(value)} is empty)")
    return items


def unknown_name(what: str, value: str, names: Iterable[str], *, where: str = "", hint: str = "") -> str:
    """A short error message for a name not in ``names``: close matches (difflib), the count, a hint.

    Long lists (804 transformers model types) are never printed whole; ``where``
    follows the value (e.g. "for transformers 5.23"), ``hint`` says where to
    see the names.

    >>> unknown_name("model type", "lama", ["llama", "gemma", "bert"], hint="see --list")
    "unknown model type 'lama'; did you mean: llama? (3 model types; see --list)"
    >>> unknown_name("package", "zzz", ["llama", "gemma"], where="in transformers.models")
    "unknown package 'zzz' in transformers.models (2 packages)"
    """
    import difflib

    pool = sorted(set(names))
    near = difflib.get_close_matches(value, pool, n=3)
    msg = f"unknown {what} {value!r}" + (f" {where}" if where else "")
    if near:
        msg += f"; did you mean: {', '.join(near)}?"
    return msg + f" ({len(pool)} {what}s" + (f"; {hint}" if hint else "") + ")"
