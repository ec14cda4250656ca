"""Small shared pieces: context-length parsing and validation, unknown-name messages, result rows."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable
from typing import Any

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
    """
    if isinstance(text, bool):
        raise ValueError(f"length {text!r} is not an integer")
    if isinstance(text, (int, np.integer)):
        return check_length(int(text))
    m = _LENGTH_RE.match(str(text))
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


def _plain(value: Any) -> Any:
    """Make a value JSON-safe: numpy scalars to Python, non-finite floats to None."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Row:
    """Mixin for frozen result dataclasses: ``to_dict()`` gives plain JSON data."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(dataclasses.asdict(self))  # type: ignore[call-overload]
