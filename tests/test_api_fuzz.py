"""The public API under bad arguments: a clear ValueError/TypeError or a right answer, nothing else.

Every callable of ``precision_audit.__all__``, ``precision_audit.testing`` and
``precision_audit.fix`` is called with small valid arguments, one of them
replaced by a bad type or value (None, text, nan, negative and huge numbers,
wrong array dtypes, empty and odd lists).  Allowed outcomes:

* a return value (the bad value was a valid spelling, e.g. ``8.0`` for a length);
* ValueError or TypeError whose message names the argument or shows the value
  and is not one of Python's own messages about an operation on the wrong
  type (which name neither, e.g. "'NoneType' object is not iterable");
* AssertionError from the ``assert_*`` helpers (their way of failing a check).

Anything else (AttributeError, OverflowError, IndexError, ZeroDivisionError,
KeyError, a call running longer than :data:`TIMEOUT`) fails.  Each argument
meets a fixed pool of values (every one, deterministically) and hypothesis
draws more (text, small and huge integers, floats, short lists).  Sizes stay
tiny (lengths <= 64) and draws avoid mid-sized integers, so every valid call
is fast.
"""

from __future__ import annotations

import math
import os
import re
import signal
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import precision_audit as pa
from precision_audit import fix, hf, testing
from precision_audit.rope import preset
from precision_audit.rope.schedules import RopeSchedule

TIMEOUT = 20  # seconds; a valid call here takes milliseconds


class Rotary(torch.nn.Module):
    """The rotary protocol (transformers' shape), float32 inv_freq buffer."""

    def __init__(self, dim: int = 8, base: float = 10000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, x, position_ids):
        f = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((f, f), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _kernel(q, k, positions):
    """An apply-style NeoX kernel (head_dim 8): float32 angles, the rotation in the data's dtype."""
    a = positions[:, None].float() * (1.0 / 10000.0 ** (torch.arange(0, 8, 2).float() / 8))
    cos, sin = torch.cat((a, a), -1).cos().to(q.dtype), torch.cat((a, a), -1).sin().to(q.dtype)
    half = lambda x: torch.cat((-x[:, 4:], x[:, :4]), -1)  # noqa: E731
    return q * cos + half(q) * sin, k * cos + half(k) * sin


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "max_position_embeddings": 64}

# name -> (callable, factory of valid keyword arguments); every argument is perturbed in turn
CASES: dict[str, tuple[Callable[..., Any], Callable[[], dict[str, Any]]]] = {
    "round_to": (pa.round_to, lambda: dict(x=[1.0, 257.0], fmt="bf16")),
    "spacing": (pa.spacing, lambda: dict(x=[1.0, 257.0], fmt="bf16")),
    "get_format": (pa.get_format, lambda: dict(name="bf16")),
    "format_names": (pa.format_names, lambda: dict(with_aliases=True)),
    "Format": (pa.Format, lambda: dict(name="f", numpy_type=np.float16, torch_name=None, significand_bits=11,
                                       min_exponent=-14, max_finite=65504.0, overflow="inf")),
    "PositionRow": (pa.PositionRow, lambda: pa.predict_positions(64, "bf16").__dict__.copy()),
    "predict_positions": (pa.predict_positions, lambda: dict(length=64, dtype="bf16")),
    "measure_positions": (pa.measure_positions, lambda: dict(lengths=[32, 64], dtype="bf16", engine="numpy",
                                                             chunk=16, progress=None)),
    "audit_positions": (pa.audit_positions, lambda: dict(lengths=[32, 64], dtypes=["bf16", "fp16"], method="auto",
                                                         engine="numpy", chunk=16, progress=None)),
    "alibi_slopes": (pa.alibi_slopes, lambda: dict(num_heads=4)),
    "audit_alibi": (pa.audit_alibi, lambda: dict(num_heads=4, recipes="cast-output", lengths=[32, 64], dtypes="bf16",
                                                 slopes=None, chunk=16, progress=None)),
    "RopeSchedule": (pa.RopeSchedule, lambda: dict(head_dim=8, base=10000.0, rotary_dim=None, scaling="yarn",
                                                   factor=2.0, original_max_position_embeddings=32,
                                                   low_freq_factor=1.0, high_freq_factor=4.0, beta_fast=32.0,
                                                   beta_slow=1.0, mscale=None, mscale_all_dim=None,
                                                   attention_factor=None, truncate=True, short_factor=None,
                                                   long_factor=None)),
    "rope_preset": (pa.rope_preset, lambda: dict(name="fp32", dtype="bf16")),
    "audit_rope": (pa.audit_rope, lambda: dict(schedule=RopeSchedule(head_dim=8), recipes=[preset("fp32", "bf16")],
                                               lengths=[32, 64], dtypes=None, budget=False, chunk=16, progress=None,
                                               engine="numpy", workers=1)),
    "attention_errors": (pa.attention_errors, lambda: dict(schedule=RopeSchedule(head_dim=8),
                                                           recipes=[preset("fp32", "bf16")], length=64,
                                                           distances=None, pairs=2, shifts=4, seed=0, apply=None,
                                                           mode=None)),
    "audit_sinusoidal": (pa.audit_sinusoidal, lambda: dict(dim=8, recipes=["fp32"], lengths=[16, 32], dtypes=["bf16"],
                                                           base=10000.0, nn_window=2, max_lag=2, chunk=16,
                                                           workers=1, progress=None)),
    "load_config_dict": (pa.load_config_dict, lambda: dict(data=dict(LLAMA), name="m", source="config")),
    "load_model": (pa.load_model, lambda: dict(model=str(Path(__file__).parent / "data" / "llama-2-7b-hf.json"))),
    "audit_config": (pa.audit_config, lambda: dict(model=pa.load_config_dict(dict(LLAMA)), lengths=[64], dtypes=["bf16"],
                                                   recipes=["fp32"], stacks=None, engine="numpy", tolerance=8.0,
                                                   positions=True, progress=None, distances=None)),
    "bottom_line": (pa.bottom_line, lambda: dict(rows=[dict(path="fp32", dtype="bfloat16", length=64, verdict="safe")],
                                                 key="path", kind="rope", notes=None)),
    "trace_code": (pa.trace_code, lambda: dict(target=Rotary(), length=64, dtype="bf16", cast=None, layer_type=None,
                                               schedule=RopeSchedule(head_dim=8), inputs=None, positions=None,
                                               rope=None, call=None, args=None)),
    "TraceResult": (pa.TraceResult, lambda: dict(target="t", length=64, dtype="bfloat16", lines=(), final_error=0.0,
                                                 ops=(), operands=())),
    "audit_rotary_kernel": (pa.audit_rotary_kernel, lambda: dict(
        apply=_kernel, schedule=RopeSchedule(head_dim=8), lengths=[32, 64], dtypes="bf16", layout="neox", cache=None,
        tensors="torch", measure="q", match=False, chunk=16, distances=None, progress=None)),
    "KernelRow": (pa.KernelRow, lambda: dict(kernel="k", layout="neox", measured="q", dtype="bfloat16", length=64,
                                             schedule="s", max_rotation_error=0.0, mean_rotation_error=0.0,
                                             colliding_positions=0, first_nonfinite=None, k_same_as_q=True,
                                             cache_bound=0.003, ratio=0.0, verdict="safe")),
    "testing.assert_rotary_kernel": (testing.assert_rotary_kernel, lambda: dict(
        apply=_kernel, schedule=RopeSchedule(head_dim=8), length=64, dtype="bf16", layout="neox", cache=None,
        tensors="torch", max_rotation_error=None, tolerance=8.0)),
    "keep_rotary_fp32": (pa.keep_rotary_fp32, lambda: dict(model=torch.nn.Sequential(torch.nn.Linear(2, 2),
                                                                                        Rotary()))),
    "release_rotary_fp32": (pa.release_rotary_fp32, lambda: dict(model=torch.nn.Sequential(Rotary()))),
    "testing.assert_positions": (testing.assert_positions, lambda: dict(length=64, dtype="fp16", exact=True,
                                                                        max_run=None)),
    "testing.assert_rope": (testing.assert_rope, lambda: dict(schedule=RopeSchedule(head_dim=8), recipe="fp32",
                                                              length=64, dtype="bf16", max_rotation_error=None,
                                                              tolerance=8.0)),
    "testing.assert_config": (testing.assert_config, lambda: dict(path=dict(LLAMA), length=64, dtype="bf16",
                                                                  recipe="fp32", max_rotation_error=None,
                                                                  tolerance=8.0)),
    "testing.assert_rope_module": (testing.assert_rope_module, lambda: dict(
        module=Rotary(), length=64, dtype="bf16", max_rotation_error=None, config=RopeSchedule(head_dim=8),
        layer_type=None, tolerance=8.0)),
    "hf.audit_rope_module": (hf.audit_rope_module, lambda: dict(
        module=Rotary(), schedule=RopeSchedule(head_dim=8), lengths=64, dtype="bf16", layer_type=None, match=False,
        model_type=None, cast_module=None, chunk=16, progress=None, distances=None)),
    "hf.reference_schedule": (hf.reference_schedule, lambda: dict(module=Rotary(), schedule=RopeSchedule(head_dim=8),
                                                                  layer_type=None)),
    "fix.buffer_kind": (fix.buffer_kind, lambda: dict(name="inv_freq")),
    "fix.ProtectedBuffer": (fix.ProtectedBuffer, lambda: dict(module="m", name="inv_freq", kind="rotary",
                                                              dtype="float32", restored=False, rotary_protocol=True,
                                                              shape=(4,), where="buffer")),
    "fix.ProtectionReport": (fix.ProtectionReport, lambda: dict(buffers=())),
    # scan: the docs' example file (a float32 rotary module), one mode, nothing located: a fast valid call
    "scan": (pa.scan, lambda: dict(targets=str(Path(__file__).parent.parent / "docs" / "examples" / "user_rope.py"),
                                   length=64, modes=["float32"], args=None, progress=None, locate=False)),
    "ScanFinding": (pa.ScanFinding, lambda: dict(module="m", callable="f", call="f(positions)", mode="float32",
                                                 status="scanned", length=64)),
}

# other words a message may use for an argument: a config dict's own errors speak of the config
SYNONYMS: dict[tuple[str, str], tuple[str, ...]] = {("testing.assert_config", "path"): ("config",),
                                                    ("hf.audit_rope_module", "schedule"): ("config",),
                                                    ("hf.reference_schedule", "schedule"): ("config",),
                                                    ("load_config_dict", "data"): ("config",),
                                                    ("load_model", "model"): ("config",),
                                                    ("audit_config", "model"): ("config",)}


def test_every_public_callable_is_covered():
    public = {n for n in pa.__all__ if callable(getattr(pa, n))} - {"reproduce_baichuan"}  # takes no argument
    public |= {f"testing.{n}" for n in testing.__all__} | {f"fix.{n}" for n in fix.__all__ if n != "KINDS"}
    covered = set(CASES) | {"fix.keep_rotary_fp32", "fix.release_rotary_fp32"}  # fix's are the package's
    assert public <= covered, sorted(public - covered)


class _Timeout(BaseException):
    pass


@contextmanager
def _time_limit(seconds: int):
    def on_alarm(signum, frame):
        raise _Timeout(f"call ran longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# Python's own messages for an operation on the wrong type: they name neither the argument nor its role
_INTERNAL = re.compile(
    r"object is not (iterable|callable|subscriptable)|not supported between instances|unsupported operand"
    r"|has no len\(\)|cannot be interpreted as an integer|unhashable type|object has no attribute"
    r"|argument must be a string or a (real )?number|could not convert string to float|invalid literal for int"
    r"|takes \d+ positional argument|unexpected keyword argument|bad operand type|ufunc '|truth value of an"
    r"|too many values to unpack|not enough values to unpack|cannot compute length|did not contain a loop")


def _shown(value: Any) -> set[str]:
    """How a message may show a value: repr or str, of the value or (for a container) of an element."""
    items = list(value)[:8] if isinstance(value, (list, tuple, dict, np.ndarray)) else []
    return {t[:24] for v in [value, *items] for t in (repr(v), str(v))} - {""}


def _names(message: str, arg: str, value: Any, synonyms: tuple[str, ...] = ()) -> bool:
    """The message names the argument (or one of its elements: ``length`` for ``lengths``) or shows the value."""
    for word in {arg, arg.removesuffix("s"), *synonyms}:
        if re.search(rf"(?<![\w.]){re.escape(word)}(?!\w)", message):
            return True
    return any(re.search(rf"(?<!\w){re.escape(s)}", message) for s in _shown(value))


@contextmanager
def _empty_folder():
    """Run in an empty folder three levels down a fresh temporary tree: a drawn relative path ('.', '..') names
    nothing a scan would read for minutes (the repository's own tests and scripts)."""
    with tempfile.TemporaryDirectory() as top:
        here = os.path.join(top, "a", "b", "c")
        os.makedirs(here)
        before = os.getcwd()
        os.chdir(here)
        try:
            yield
        finally:
            os.chdir(before)


def _outcome(case: str, arg: str, value: Any) -> str | None:
    """Call ``case`` with ``arg=value``; None if the outcome is allowed, else what went wrong."""
    fn, valid = CASES[case]
    kwargs = valid()
    kwargs[arg] = value
    try:
        with np.errstate(all="ignore"), _time_limit(TIMEOUT), _empty_folder() if case == "scan" else nullcontext():
            fn(**kwargs)
    except (ValueError, TypeError) as e:
        msg = str(e)
        if _INTERNAL.search(msg) or not _names(msg, arg, value, SYNONYMS.get((case, arg), ())):
            return f"{type(e).__name__} that does not name {arg}={value!r}: {msg[:200]}"
    except AssertionError:
        if not case.startswith("testing.assert_"):
            return "AssertionError"
    except _Timeout as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - the point of the test
        return f"{type(e).__name__}: {str(e)[:200]}"
    return None


class _Object:
    def __repr__(self) -> str:
        return "<an object>"


POOL: list[Any] = [
    None, "", "zz", "/", ".", "fp32", "bf16", b"x", math.nan, math.inf, -math.inf, -1, 0, 1, 1.5, -0.5, 2**70, -(2**70),
    2**1100, True, [], [None], ["zz"], [math.nan], [-1], [0, 1.5], (), {}, {"a": 1}, _Object(), print,
    np.float32(math.nan), np.int64(-3), np.array([], dtype=np.float64), np.array(["a"]), np.array([1 + 1j]),
    np.array([1.0, 2.0]), np.array([[1, 2], [3, 4]]), np.array([None], dtype=object),
]

# hypothesis draws: nothing between 100 and 2**60 in magnitude, so no valid length is large
_ints = st.integers(-100, 100) | st.integers(2**60, 2**1100) | st.integers(-(2**1100), -(2**60))
_floats = st.floats(-1e3, 1e3) | st.sampled_from([math.nan, math.inf, -math.inf, 1e300, -1e300, 5e-324])
_atoms = _ints | _floats | st.text(max_size=6) | st.none() | st.booleans()
VALUES = _atoms | st.lists(_atoms, max_size=3) | st.tuples(_atoms) | st.dictionaries(st.text(max_size=3), _atoms,
                                                                                      max_size=2)

PAIRS = [pytest.param(case, arg, id=f"{case}-{arg}") for case, (_, valid) in CASES.items() for arg in valid()]


@pytest.mark.parametrize("case, arg", PAIRS)
def test_fixed_pool_of_bad_values(case: str, arg: str) -> None:
    bad = [f"{v!r}: {o}" for v in POOL if (o := _outcome(case, arg, v)) is not None]
    assert not bad, f"{case}({arg}=...):\n" + "\n".join(bad)


@pytest.mark.parametrize("case, arg", PAIRS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES)
def test_drawn_bad_values(case: str, arg: str, value: Any) -> None:
    problem = _outcome(case, arg, value)
    assert problem is None, f"{case}({arg}={value!r}): {problem}"


def test_the_valid_calls_pass() -> None:
    # the base arguments themselves are valid: every perturbation above changes exactly one of them
    for case, (fn, valid) in CASES.items():
        with np.errstate(all="ignore"):
            fn(**valid())
