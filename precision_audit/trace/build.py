"""What the shell names, made ready to trace: the user's own file or module, a class built with inferred
arguments, and the inputs ``--input NAME=SHAPE[:DTYPE]`` describes.

* :func:`import_attribute`: ``FILE.py:NAME`` or ``package.module:NAME`` (the current folder importable, as
  ``python -m``, pytest and uvicorn make it), ``NAME`` dotted for a nested attribute.
* :func:`infer_arguments`: the arguments a constructor or function needs, from its defaults or, for a required
  argument, from its name (a dim -> 64, a base -> 10000, a length -> the trace's length).
* :func:`parse_input` / :func:`make_input`: ``SHAPE[:DTYPE]`` -> a tensor filled deterministically: positions
  ``0..n-1`` along the last dimension for an integer dtype or a position name, ones for a mask or any other input.

>>> parse_input("x=1x8192x8x64:bfloat16")
('x', (1, 8192, 8, 64), 'bfloat16')
>>> infer_arguments(lambda dim, base=500000.0, max_seq_len=None: None, length=4096)
{'dim': 64, 'base': 500000.0, 'max_seq_len': None}
>>> make_input("position_ids", (1, 5), "int64").tolist()
[[0, 1, 2, 3, 4]]
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from ..checks import describe

__all__ = ["DIM", "INT_DTYPES", "MAX_INPUT_VALUES", "POSITION_NAMES", "import_attribute", "infer_arguments", "is_position_name",
           "importable", "make_input", "package_path", "parse_arg", "parse_input"]

DIM = 64
"""The value a required dim-style argument gets (even and a multiple of 4: 1-D and 2-D RoPE both split it)."""
_BASE = 10000.0
_INFERRED: tuple[tuple[str, str], ...] = (  # (regex on the argument's name, what it gets), first match wins
    (r"(^|_)(max_?)?(seq|sequence|context|ctx|block)(_?len(gth)?|_size)?$|^(max_)?(len|length)$|^n_?ctx$"
     r"|^(max_|num_|n_)?positions?(_embeddings)?$|^max_?(seq_?)?len(gth)?$|^seq_?len$", "length"),
    (r"(^|_)(theta|base|rope_theta|base_freq|freq_base)$", "base"),
    (r"(^|_)(n_)?(dim|dims|head_dim|d_head|dim_head|d_model|hidden_size|embed_dim|n_embd|n_elem|rotary_dim|"
     r"feature_dim|rope_dim|d_k)$|^d$", "dim"),
)
POSITION_NAMES = ("position_ids", "positions", "position", "pos", "cache_position", "attention_mask", "mask",
                  "seq_idx", "t")
"""Input names read as position inputs (a trace follows them): ids, a cache position, a mask whose cumsum gives
positions; an integer input is one whatever its name."""
MAX_INPUT_VALUES = 2**26
"""The most values one ``--input`` may hold (a query 1 x 131072 x 4 x 128; its derived tensors' float64 shadows
take 8 bytes a value each)."""
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
"""The integer dtypes an ``--input`` may have."""
_SHAPE_RE = re.compile(r"^\s*[0-9]+(\s*[xX*,]\s*[0-9]+)*\s*$")


def is_position_name(name: str) -> bool:
    """Whether an input of that name holds positions (or a mask that gives them).

    >>> is_position_name("position_ids"), is_position_name("attention_mask"), is_position_name("x")
    (True, True, False)
    """
    return name in POSITION_NAMES or name.endswith(("position_ids", "_positions", "_mask"))


def parse_input(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """``NAME=SHAPE[:DTYPE]`` -> (name, shape, dtype or None); SHAPE is dimensions joined by ``x``; ValueError
    naming ``--input`` and what is wrong.

    >>> parse_input("position_ids=1x8192:int64"), parse_input("t=16")
    (('position_ids', (1, 8192), 'int64'), ('t', (16,), None))
    >>> parse_input("x=1x0x8")
    Traceback (most recent call last):
    ...
    ValueError: --input 'x=1x0x8': SHAPE must be positive whole numbers joined by x (e.g. x=1x8192x8x64:bfloat16)
    """
    name, eq, rest = str(text).partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise ValueError(f"--input {text!r} must be NAME=SHAPE[:DTYPE] with NAME an argument name (e.g. "
                         "x=1x8192x8x64:bfloat16, position_ids=1x8192:int64)")
    shape_text, _, dtype = rest.partition(":")
    if not _SHAPE_RE.match(shape_text):
        raise ValueError(f"--input {text!r}: SHAPE must be positive whole numbers joined by x (e.g. "
                         "x=1x8192x8x64:bfloat16)")
    shape = tuple(int(d) for d in re.split(r"\s*[xX*,]\s*", shape_text.strip()))
    if min(shape) < 1 or len(shape) > 8:
        raise ValueError(f"--input {text!r}: SHAPE must be positive whole numbers joined by x (e.g. "
                         "x=1x8192x8x64:bfloat16)")
    n = 1
    for d in shape:
        n *= d
    if n > MAX_INPUT_VALUES:
        raise ValueError(f"--input {text!r}: {n} values is more than a trace holds (2**26; every derived tensor "
                         "also has a float64 shadow)")
    return name, shape, _dtype_name(dtype.strip(), text) if dtype.strip() else None


def _dtype_name(dtype: str, text: str) -> str:
    """The canonical name of an input dtype: an integer dtype, or a float format torch has."""
    from ..formats import get_format

    low = dtype.lower()
    alias = {"long": "int64", "int": "int64", "uint8": "uint8", "byte": "uint8"}.get(low, low)
    if alias in INT_DTYPES:
        return alias
    try:
        fmt = get_format(dtype)
    except ValueError:
        fmt = None
    if fmt is None or fmt.torch_dtype is None:
        raise ValueError(f"--input {text!r}: unknown dtype {dtype!r}; valid: {', '.join(INT_DTYPES)} or a float "
                         "format torch has (float32, bfloat16, float16, float64, fp32, bf16, fp16)")
    return fmt.name


def make_input(name: str, shape: tuple[int, ...], dtype: str) -> Any:
    """A tensor of ``shape`` and ``dtype``: ``0..n-1`` along the last dimension (every row alike) for an integer
    dtype or a position name (a position input), ones for a mask or any other input (a query, a vector: every
    pair (1, 1), so a rotation shows whole).

    >>> make_input("attention_mask", (1, 3), "int64").tolist(), make_input("x", (2,), "bfloat16").tolist()
    ([[1, 1, 1]], [1.0, 1.0])
    """
    import torch

    dt = getattr(torch, dtype) if dtype in INT_DTYPES else _torch_dtype(dtype)
    if "mask" in name or not (dtype in INT_DTYPES or is_position_name(name)):
        return torch.ones(shape, dtype=dt)
    n = shape[-1]
    if dtype in INT_DTYPES and n - 1 > torch.iinfo(dt).max:
        raise ValueError(f"--input {name}: positions 0..{n - 1} do not fit {dtype}")
    return torch.arange(n, dtype=torch.int64).to(dt).expand(shape).contiguous()


def _torch_dtype(name: str) -> Any:
    from ..formats import get_format

    return get_format(name).torch_dtype


def parse_arg(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` (a Python literal: 64, 1e4, True, None, 'rope'; anything else is a string) -> (name, value).

    >>> parse_arg("dim=128"), parse_arg("base=5e5"), parse_arg("mode=yarn")
    (('dim', 128), ('base', 500000.0), ('mode', 'yarn'))
    """
    name, eq, value = str(text).partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise ValueError(f"--arg {text!r} must be NAME=VALUE with NAME an argument name (e.g. dim=128)")
    try:
        return name, ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return name, value.strip()


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _guess(name: str, length: int) -> Any:
    """What a required argument called ``name`` gets (``_INFERRED``), or ``inspect.Parameter.empty``."""
    low = name.lower()
    for pattern, kind in _INFERRED:
        if re.search(pattern, low):
            return {"length": length, "base": _BASE, "dim": DIM}[kind]
    return inspect.Parameter.empty


def infer_arguments(obj: Any, length: int, given: Mapping[str, Any] | None = None,
                    skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword arguments for ``obj`` (a class: its constructor; a function): ``given`` first, then each
    parameter's default, then a value guessed from a required parameter's name (a dim -> :data:`DIM`, a base or
    theta -> 10000, a maximum or sequence length -> ``length``); ``skip``: parameters supplied otherwise.  A
    required parameter none of these covers, or a ``given`` name it does not take: ValueError naming it.

    >>> class Rope:
    ...     def __init__(self, head_dim, rope_theta, max_position_embeddings=2048, scale=None): pass
    >>> infer_arguments(Rope, 8192)
    {'head_dim': 64, 'rope_theta': 10000.0, 'max_position_embeddings': 2048, 'scale': None}
    >>> infer_arguments(Rope, 8192, {"head_dim": 128, "window": 4})
    Traceback (most recent call last):
    ...
    ValueError: --arg window: Rope(head_dim, rope_theta, max_position_embeddings=2048, scale=None) takes no argument 'window'
    """
    given = dict(given or {})
    sig = _signature(obj)
    label = getattr(obj, "__qualname__", None) or describe(obj)
    if sig is None:
        if given:
            raise ValueError(f"--arg {', '.join(given)}: {label} has no signature to read")
        return {}
    params = [p for p in sig.parameters.values() if p.name not in skip]
    shown = f"{label}({', '.join(str(p) for p in sig.parameters.values()).replace(' = ', '=')})"
    free = any(p.kind is p.VAR_KEYWORD for p in params)
    names = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    unknown = [k for k in given if k not in names and not free]
    if unknown:
        raise ValueError(f"--arg {unknown[0]}: {shown} takes no argument {unknown[0]!r}")
    out: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in given:
            out[p.name] = given.pop(p.name)
        elif p.default is not p.empty:
            out[p.name] = p.default
        else:
            value = _guess(p.name, length)
            if value is p.empty:
                raise ValueError(f"{shown}: cannot infer the required argument {p.name!r} (a dim, base or length "
                                 f"is inferred by name): give it with --arg {p.name}=VALUE, or a factory")
            out[p.name] = value
    out.update(given)  # **kwargs takes the rest
    return out


@contextlib.contextmanager
def importable(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` while the block runs (the user's own modules import from it, as ``python
    -m`` from there finds them), removed after: nothing is left on the path to shadow other packages."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def package_path(path: str) -> tuple[str, list[str]]:
    """The folder that ``path``'s outermost package sits in, and the file's dotted name's parts from there: a
    file inside package folders (each with an ``__init__.py``) is the module ``package.module``; a file outside
    one is just its stem.

    >>> package_path(os.path.join(os.path.dirname(__file__), "build.py"))[1]
    ['precision_audit', 'trace', 'build']
    """
    full = os.path.abspath(path)
    root, parts = os.path.dirname(full), [os.path.splitext(os.path.basename(full))[0]]
    while os.path.isfile(os.path.join(root, "__init__.py")) and os.path.basename(root).isidentifier():
        parts.insert(0, os.path.basename(root))
        root = os.path.dirname(root)
    return root, parts


def _module_from_file(path: str, spec: str) -> Any:
    """Import the file ``path`` as a module named after it (its folder importable while it loads)."""
    if not os.path.isfile(path):
        raise ValueError(f"TARGET {spec}: no file {path}")
    full = os.path.abspath(path)
    stem = os.path.splitext(os.path.basename(full))[0]
    root, parts = package_path(full)
    if len(parts) > 1 and stem.isidentifier():
        try:
            with importable(root):
                return importlib.import_module(".".join(parts))
        except Exception as e:
            raise ValueError(f"TARGET {spec}: cannot import {path} as {'.'.join(parts)} ({_why(e)})") from None
    name = stem if stem.isidentifier() else "_user_module"
    have = sys.modules.get(name)
    if have is not None and os.path.abspath(getattr(have, "__file__", "") or "") != full:
        name = f"_precision_audit_user_{abs(hash(full))}_{name}"
    loader_spec = importlib.util.spec_from_file_location(name, full)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"TARGET {spec}: cannot import {path} (not a Python source file)")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        with importable(os.path.dirname(full)):
            loader_spec.loader.exec_module(module)
    except BaseException as e:
        sys.modules.pop(name, None)
        if not isinstance(e, Exception):
            raise
        raise ValueError(f"TARGET {spec}: cannot import {path} ({_why(e)})") from None
    return module


def _why(e: BaseException) -> str:
    """An exception in one line: its type, message and, for a syntax error, where."""
    if isinstance(e, SyntaxError):
        where = f" ({os.path.basename(e.filename or '?')}, line {e.lineno})" if e.lineno else ""
        return f"SyntaxError: {e.msg}{where}"
    return f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"


def import_attribute(spec: str) -> tuple[Any, str]:
    """``FILE.py:NAME`` or ``package.module:NAME`` -> (the attribute, its module's name).  The current folder is
    importable while the module loads (``python -m``, pytest and uvicorn make it so); ``NAME`` may be dotted.
    ValueError naming ``spec``: a missing file, a module that does not import (a syntax error: its line), no such
    attribute.

    >>> import_attribute("precision_audit.verdicts:worst")[0](["safe", "broken"])
    'broken'
    """
    where, colon, attr = str(spec).rpartition(":")
    if not colon or not where or not attr:
        raise ValueError(f"TARGET {spec!r} is neither a config.json nor package.module:factory (nor FILE.py:NAME, "
                         "module:CLASS, module:FUNCTION)")
    if where.endswith(".py") or os.sep in where or "/" in where:
        module = _module_from_file(where, spec)
    else:
        try:
            with importable(os.getcwd()):
                module = importlib.import_module(where)
        except Exception as e:
            raise ValueError(f"TARGET {spec}: cannot import {where} ({_why(e)})") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"TARGET {spec}: {where} has no callable {attr!r}")
    if not callable(obj):
        raise ValueError(f"TARGET {spec}: {where} has no callable {attr!r}")
    return obj, getattr(module, "__name__", where)
