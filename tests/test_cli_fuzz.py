"""No traceback, ever, from the command line.

Every command of the click group is found by walking ``precision_audit.cli.main`` and its
subgroups, so commands added later are covered without touching this file.  Hypothesis
feeds each option (and argument) arbitrary text, numbers and special values; whatever it
gets, a command must exit 0 (it ran) or 2 (usage error), print a message, and never show
a traceback.

Sizes are kept small so the whole file runs in seconds: LENGTH options always get a value
(their defaults reach 1M tokens), drawn from a mix of small valid lengths and garbage, and
integers come from small ranges plus a few huge or malformed spellings.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from precision_audit.cli import main
from precision_audit.formats import format_names


def walk(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """(argv prefix, command) for every leaf command under ``group``."""
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            out += walk(cmd, (*prefix, name))
        elif cmd is not None:
            out.append(((*prefix, name), cmd))
    return out


COMMANDS = walk(main)
# 30 examples per command keeps the file at a few seconds; raise it for a deeper local search
EXAMPLES = int(os.environ.get("PRECISION_AUDIT_FUZZ_EXAMPLES", "30"))
# commands whose smallest valid run takes seconds (a whole report, a scan of every transformers model):
# a few examples each, in the slow run
HEAVY = {"report": 4, "hf-scan": 2}

GARBAGE = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "-", "--", "nan", "NaN", "inf", "-inf", "1e308", "-1e308", "1e-320", "0x10",
                     "1_000", "1,5", "2**20", "8kk", "k", "1M1", "\x00", "\u00e9\u00e8", "-0", "+3", "3.0",
                     "1.5k", "99999999999999999999", "4294967296", "-9223372036854775809"]),
)
NUMBERS = st.one_of(
    st.integers(-3, 70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(-100, 100).map(lambda x: f"{x:g}"),
)
SMALL_LENGTHS = st.sampled_from(["1", "2", "3", "16", "100", "257", "1k", "1K", "2000"])
DTYPES = st.sampled_from([*format_names(with_aliases=True), "fp7", "BF16", "float"])
STAGE_TEXT = st.builds(
    lambda k, v, sep: f"{k}={v}{sep}",
    st.sampled_from(["positions", "inv_freq", "angle", "trig", "cache", "bogus", ""]),
    st.sampled_from(["bf16", "fp32", "fp64", "fp16", "e4m3", "fp7", ""]),
    st.sampled_from(["", ",", ",inv_freq=fp32", "==", ",,"]),
)


def plausible(param: click.Parameter) -> st.SearchStrategy[str]:
    """Values a user would type that are mostly valid (small sizes, listed names, in-range numbers)."""
    t = param.type
    if t.name == "LENGTH":
        return SMALL_LENGTHS
    if t.name == "DTYPE":
        return DTYPES
    if isinstance(t, click.Choice):
        return st.sampled_from([str(c) for c in t.choices])
    if isinstance(t, click.types.IntParamType):
        lo = getattr(t, "min", None)
        lo = -3 if lo is None else lo - 1
        return st.integers(lo, lo + 66).map(str)
    if isinstance(t, click.types.FloatParamType):
        lo = getattr(t, "min", None)
        return st.floats(-3.0 if lo is None else lo, (-3.0 if lo is None else lo) + 100).map(repr)
    return STAGE_TEXT


def values_for(param: click.Parameter) -> st.SearchStrategy[str]:
    """Plausible values (3 in 5) mixed with arbitrary numbers and garbage."""
    good = plausible(param)
    return st.one_of(good, good, good, NUMBERS, GARBAGE)


def option_args(param: click.Option, dirty: bool) -> st.SearchStrategy[list[str]]:
    flag = param.opts[0]
    if param.is_flag:
        return st.sampled_from([[], [flag]])
    # LENGTH defaults run up to 1M tokens: always give one or two (mostly small) lengths
    least = 1 if param.type.name == "LENGTH" else 0
    most = 2 if param.multiple else 1
    values = values_for(param) if dirty else plausible(param)
    return st.lists(values, min_size=least, max_size=max(least, most)).map(
        lambda vs: [a for v in vs for a in (flag, v)])


@st.composite
def command_line(draw: Any, params: list[click.Parameter]) -> list[str]:
    # half the examples use plausible values only (so commands run to the end), half mix in garbage
    dirty = draw(st.booleans())
    chunks = []
    for p in params:
        if isinstance(p, click.Option):
            if p.name in ("help", "version"):
                continue
            chunks.append(draw(option_args(p, dirty)))
        elif isinstance(p, click.Argument):
            chunks.append(draw(st.lists(values_for(p) if dirty else plausible(p), min_size=1, max_size=2)))
    order = draw(st.permutations(range(len(chunks)))) if chunks else []
    return [a for i in order for a in chunks[i]]


def test_walk_finds_every_command():
    # the walk reaches nested groups (reproduce baichuan) and every top-level command
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"positions", "rope", "alibi", "sinusoidal", "attention", "reproduce", "report"} <= names
    every = main.every_command()
    assert {n for n, c in every.items() if not isinstance(c, click.Group)} <= names


@pytest.mark.parametrize("path, cmd", [
    pytest.param(p, c, id=" ".join(p), marks=[pytest.mark.slow] if " ".join(p) in HEAVY else [])
    for p, c in COMMANDS])
def test_no_traceback_for_any_input(path, cmd):
    @settings(max_examples=HEAVY.get(" ".join(path), EXAMPLES), deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(argv=command_line(cmd.params))
    def run(argv: list[str]) -> None:
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory() as tmp:  # commands that write (report --out) write into it
            os.chdir(tmp)
            try:
                res = CliRunner().invoke(main, [*path, *argv])
            finally:
                os.chdir(cwd)
        shown = res.output  # stdout and stderr as a terminal shows them
        assert res.exit_code in (0, 2), (argv, res.exit_code, shown, res.exception)
        assert res.exception is None or isinstance(res.exception, SystemExit), (argv, res.exception)
        assert shown.strip(), argv
        assert "Traceback" not in shown, (argv, shown)

    run()

