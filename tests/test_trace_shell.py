"""``precision-audit trace`` on the user's own code from the shell (issue 51 item 2): ``FILE.py:NAME`` and
``module:NAME`` with the current folder importable, ``--input NAME=SHAPE[:DTYPE]``, ``--call METHOD``, a class or
function with inferred arguments, and every bad input as one line, exit 2 (the API: ValueError naming it).

Referees: the format registry's closed form for bf16's first inexact integer (2**8 + 1 = 257) and bf16's spacing
(the worst position error below L); the inputs' fill is checked against ``numpy.arange`` / ones; the inferred
arguments against the values the docs state (dim 64, base 10000, a length -> --length).
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from precision_audit.cli import main  # noqa: E402
from precision_audit.formats import get_format  # noqa: E402
from precision_audit.trace import trace  # noqa: E402
from precision_audit.trace.build import infer_arguments, make_input, parse_input  # noqa: E402

FIRST = get_format("bfloat16").max_exact_integer + 1  # 257

USER_CODE = '''
import torch


class Rotary(torch.nn.Module):
    """Rotates queries (batch, seq, heads, dim) by positions it builds in the query's dtype (the Baichuan bug)."""

    def __init__(self, dim, base=10000.0, max_seq_len=None):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, q):
        L, d = q.shape[1], q.shape[-1]
        t = torch.arange(L, dtype=q.dtype)
        ang = torch.outer(t.float(), self.inv_freq)
        cos, sin = ang.cos()[None, :, None, :].to(q.dtype), ang.sin()[None, :, None, :].to(q.dtype)
        q1, q2 = q[..., : d // 2], q[..., d // 2:]
        return torch.cat((q1 * cos - q2 * sin, q1 * sin + q2 * cos), dim=-1)

    def rotate(self, q, position_ids):
        ang = position_ids[0].float()[:, None] * self.inv_freq
        cos, sin = ang.cos()[None, :, None, :].to(q.dtype), ang.sin()[None, :, None, :].to(q.dtype)
        d = q.shape[-1]
        q1, q2 = q[..., : d // 2], q[..., d // 2:]
        return torch.cat((q1 * cos - q2 * sin, q1 * sin + q2 * cos), dim=-1)


def make():
    return Rotary(64)


def boom():
    raise RuntimeError("no GPU here")


def positions(seq_len, n_elem):
    return torch.arange(seq_len, dtype=torch.bfloat16)[:, None] * torch.ones(n_elem // 2)


class Needs:
    def __init__(self, window):
        pass

    def __call__(self, x, position_ids):
        return position_ids
'''


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A fresh folder holding the user's module (a name unique to this test run), the current folder, as a user
    who runs the command next to their file; nothing put on sys.path by the test."""
    name = f"usermod_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(USER_CODE)
    (tmp_path / "broken_syntax.py").write_text("import torch\ndef make(:\n    pass\n")
    (tmp_path / "broken_import.py").write_text("import no_such_dependency_zz\n")
    pkg = tmp_path / f"pkg_{name}"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("import torch\n\ndef make():\n    return lambda x, position_ids: "
                                   "position_ids.to(torch.bfloat16) * 1.0\n")
    (pkg / "mod.py").write_text("from .helper import make\n")
    monkeypatch.chdir(tmp_path)
    return name


def _run(*args):
    return CliRunner().invoke(main, ["trace", *args])


def test_file_factory_with_query_shaped_input_names_the_bf16_arange(folder):
    """The issue's flow: FILE.py:factory with --input x=1xLx8x64:bfloat16 (a query); the op named is the bf16
    arange at the user's line, first inexact position 257; it adds at most bf16's spacing at L-1 (32 on
    [4096, 8192)), so the final error is at least its half-ulp 16 (the real positions miss by that much)."""
    res = _run(f"{folder}.py:make", "--input", "q=1x8192x8x64:bfloat16", "--json")
    assert res.exit_code == 0, res.output
    (r,) = json.loads(res.output)["results"]
    assert r["length"] == 8192 and r["inputs"] == [{"name": "q", "shape": [1, 8192, 8, 64], "dtype": "bfloat16",
                                                    "position": False}]
    top = r["ops"][0]
    assert top["op"] == "aten.arange.default" and top["first_inexact"] == FIRST
    assert top["where"] == f"{folder}.py:15"
    assert 16 <= top["added"] <= 32
    assert r["lines"][0].startswith("op 0 aten.arange.default -> bfloat16") and "first inexact position 257" in \
        r["lines"][0]


def test_module_factory_imports_from_the_current_folder(folder):
    res = _run(f"{folder}:make", "--input", "q=1x1024x2x64:bf16")
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()
    assert first[0] == (f"trace of {folder}:make on positions 0..1023, inputs q 1x1024x2x64 bfloat16, output verdict "
                        "broken")
    assert "op 0 aten.arange.default -> bfloat16" in first[1] and "first inexact position 257" in first[1]


def test_a_class_is_built_with_its_inferred_arguments(folder):
    """No factory: Rotary(dim) gets dim=64 (its inv_freq has 32 frequencies), base and max_seq_len their defaults;
    --arg dim=16 overrides it (8 frequencies)."""
    r = trace(f"{folder}.py:Rotary", inputs={"q": "1x512x1x64:bfloat16"})
    (inv,) = [o for o in r.operands if o.name == "inv_freq"]
    assert inv.shape == (32,) and r.ops[0].first_inexact == FIRST
    r = trace(f"{folder}.py:Rotary", inputs={"q": "1x512x1x16:bfloat16"}, args={"dim": 16})
    assert [o.shape for o in r.operands if o.name == "inv_freq"] == [(8,)]


def test_a_function_is_traced_with_its_scalar_arguments_inferred(folder):
    """positions(seq_len, n_elem): seq_len is the trace's length, n_elem 64 (32 columns); positions made inside in
    bf16: first inexact 257, and the result's length is the arange's."""
    r = trace(f"{folder}.py:positions", 600)
    assert r.length == 600 and r.ops[0].op == "aten.arange.default" and r.ops[0].first_inexact == FIRST
    assert r.outputs[0]["shape"] == (600, 32)
    assert infer_arguments(lambda seq_len, n_elem, base=5e5: None, 600) == {"seq_len": 600, "n_elem": 64,
                                                                            "base": 5e5}


def test_call_traces_another_method_on_position_inputs(folder):
    """--call rotate with integer position ids 0..L-1 (a position input, followed) and a float32 angle: no
    position is lost; the result names both inputs, position_ids as the position one."""
    res = _run(f"{folder}.py:make", "--call", "rotate", "-i", "q=1x2048x2x64:float32", "-i",
               "position_ids=1x2048:int64", "--json")
    assert res.exit_code == 0, res.output
    (r,) = json.loads(res.output)["results"]
    assert r["target"] == f"{folder}.py:make.rotate" and r["length"] == 2048
    assert [(i["name"], i["position"]) for i in r["inputs"]] == [("q", False), ("position_ids", True)]
    assert all(o["first_inexact"] is None for o in r["ops"])


def test_a_file_inside_a_package_imports_as_its_module(folder):
    res = _run(f"pkg_{folder}/mod.py:make", "-l", "300")
    assert res.exit_code == 0, res.output
    assert "first inexact position 257" in res.output and "helper.py:4" in res.output


def test_inputs_are_filled_deterministically():
    """An integer or a position name: 0..n-1 along the last dimension (every row alike); a mask and any other
    input: ones."""
    p = make_input("position_ids", (2, 5), "int64")
    assert p.dtype == torch.int64 and np.array_equal(p.numpy(), np.broadcast_to(np.arange(5), (2, 5)))
    assert np.array_equal(make_input("pos", (7,), "float32").numpy(), np.arange(7, dtype=np.float32))
    assert make_input("attention_mask", (1, 4), "int64").tolist() == [[1, 1, 1, 1]]
    x = make_input("x", (1, 3, 2), "bfloat16")
    assert x.dtype == torch.bfloat16 and bool((x == 1).all())
    assert parse_input("x=1x8192x8x64:bf16") == ("x", (1, 8192, 8, 64), "bfloat16")
    assert parse_input("position_ids=1x8192:long") == ("position_ids", (1, 8192), "int64")


# --------------------------------------------------------------------------- bad input: one line, exit 2


@pytest.mark.parametrize("args, words", [
    (["broken_syntax.py:make"], "cannot import broken_syntax.py (SyntaxError: invalid syntax (broken_syntax.py, "
                                "line 2))"),
    (["broken_import.py:make"], "cannot import broken_import.py (ModuleNotFoundError: No module named "
                                "'no_such_dependency_zz')"),
    (["broken_import:make"], "cannot import broken_import (ModuleNotFoundError"),
    (["{m}.py:boom"], "the factory raised RuntimeError: no GPU here"),
    (["{m}.py:nothing"], "has no callable 'nothing'"),
    (["missing_file.py:make"], "no file missing_file.py"),
    (["{m}.py"], "name what to trace in it"),
    (["{m}.py:make", "--input", "q=1x0x8"], "--input 'q=1x0x8': SHAPE must be positive whole numbers"),
    (["{m}.py:make", "--input", "q=1xabc"], "SHAPE must be positive whole numbers"),
    (["{m}.py:make", "--input", "q=1x8:bfloat17"], "unknown dtype 'bfloat17'"),
    (["{m}.py:make", "--input", "q"], "must be NAME=SHAPE[:DTYPE]"),
    (["{m}.py:make", "--input", "q=1x8", "--input", "q=1x9"], "--input q given twice"),
    (["{m}.py:make", "--input", "x=1x8x1x64"], "do not fit Rotary.forward(q): no parameter 'x'; q missing"),
    (["{m}.py:make", "--call", "nope"], "--call nope: Rotary has no method 'nope' (its own: forward, rotate)"),
    (["{m}.py:positions", "--call", "nope"], "is a function, not an object with methods"),
    (["{m}.py:Rotary", "--arg", "window=4"], "--arg window: Rotary.forward(q) takes no argument 'window' (nor "
                                             "does its class's constructor)"),
    (["{m}.py:Needs"], "cannot infer the required argument 'window'"),
    (["{m}.py:make", "--input", "position_ids=1x300:int8"], "positions 0..299 do not fit int8"),
    (["{m}.py:make", "--input", "q=100000x100000"], "10000000000 values is more than a trace holds (2**26"),
    (["{m}.py:make", "--call", "rotate", "--input", "q=1x8x1x64", "--input", "position_ids=1x2000000"],
     "2000000 positions; a trace builds at most 1048576"),
])
def test_bad_input_exits_2_with_one_line_naming_it(folder, args, words):
    res = _run(*[a.format(m=folder) for a in args], "-l", "64")
    assert res.exit_code == 2, res.output
    out = res.output.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("Error: ") and words in out[0], res.output


@pytest.mark.parametrize("kwargs, match", [
    (dict(target="broken_syntax.py:make"), "SyntaxError"),
    (dict(target="{m}.py:boom"), "factory raised RuntimeError"),
    (dict(target="{m}.py:make", inputs={"q": "1x0"}), "SHAPE"),
    (dict(target="{m}.py:make", inputs={"q": "1x8:int3"}), r"inputs\['q'\] '1x8:int3': unknown dtype 'int3'"),
    (dict(target="{m}.py:make", call="nope"), "no method 'nope'"),
    (dict(target="{m}.py:make", call=3), "call 3 must be a method name"),
    (dict(target="{m}.py:Rotary", args=[("dim", 4)]), "args .* must be a dict"),
])
def test_api_raises_value_error_naming_the_bad_value(folder, kwargs, match):
    kwargs = dict(kwargs, target=kwargs["target"].format(m=folder))
    with pytest.raises(ValueError, match=match):
        trace(length=64, **kwargs)


def test_help_states_what_running_a_target_executes():
    out = CliRunner().invoke(main, ["trace", "--help"]).output
    assert "--input" in out and "--call" in out and "--arg" in out and "runs its module's code" in out


def _taking(name):
    """A function whose only (required) parameter is called ``name``."""
    def fn(*args, **kwargs):
        return None

    fn.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    return fn


@pytest.mark.parametrize("name, want", [
    ("dim", 64), ("head_dim", 64), ("rotary_dim", 64), ("n_elem", 64), ("d_model", 64), ("dim_head", 64),
    ("hidden_size", 64), ("base", 10000.0), ("theta", 10000.0), ("rope_theta", 10000.0), ("seq_len", 4096),
    ("max_seq_len", 4096), ("max_position_embeddings", 4096), ("context_length", 4096), ("max_len", 4096),
    ("n_ctx", 4096), ("block_size", 4096),
])
def test_required_arguments_inferred_by_name(name, want):
    """The values the docs state: a dim 64, a base or theta 10000, a length the trace's."""
    assert infer_arguments(_taking(name), 4096) == {name: want}


@pytest.mark.parametrize("name", ["num_heads", "window", "x", "scale"])
def test_other_required_arguments_are_not_guessed(name):
    with pytest.raises(ValueError, match=f"cannot infer the required argument '{name}'.*--arg {name}=VALUE"):
        infer_arguments(_taking(name), 4096)
