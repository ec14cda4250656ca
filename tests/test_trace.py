"""precision_audit.trace: the tracer, its shadows and its verdicts.

Referees: hf-scan run here on transformers' own rotary classes (the same verdict per class, and inv_freq named
as the downcast operand after the cast); the bf16 position factory's first inexact position from the format
registry's closed form (2**8 + 1); the shadow's per-op values and errors against mpmath on small inputs.
"""

from __future__ import annotations

import json
import textwrap

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from precision_audit.cli import main  # noqa: E402
from precision_audit.formats import get_format  # noqa: E402
from precision_audit.trace import run_traced, trace  # noqa: E402
from precision_audit.verdicts import scan_verdict  # noqa: E402

L = 4096
BF16_FIRST_INEXACT = get_format("bfloat16").max_exact_integer + 1  # 2**8 + 1: the first integer bf16 rounds


class Bf16Positions(torch.nn.Module):
    """The rotary protocol with positions made in bfloat16 inside forward (the Baichuan-style bug)."""

    def __init__(self, dim: int = 16, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

    def forward(self, x, position_ids):
        pos = torch.arange(x.shape[1], dtype=torch.bfloat16)
        freqs = pos[:, None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None].to(x.dtype), emb.sin()[None].to(x.dtype)


class Fp32Rotary(Bf16Positions):
    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


# --------------------------------------------------------------------------- referee: hf-scan


@pytest.fixture(scope="module")
def scanned():
    pytest.importorskip("transformers")
    from precision_audit.hf import rotary_classes, scan

    found = rotary_classes(["llama", "qwen2", "gemma", "gemma3"])
    rows = scan(classes=found, length=L, dtype="bfloat16")
    return {f.name: f for f in found}, [r for r in rows if r.status == "audited"]


def test_every_scanned_class_gets_the_scan_verdict_and_names_inv_freq(scanned):
    from precision_audit.hf import build_rotary_module

    found, rows = scanned
    assert {r.module_class for r in rows} >= {"LlamaRotaryEmbedding", "Qwen2RotaryEmbedding", "GemmaRotaryEmbedding"}
    for row in rows:
        cls = found[row.module_class].cls
        built, cfg = build_rotary_module(cls)
        as_built = trace(built, L, schedule=cfg, layer_type=row.layer_type)
        cast_mod, _ = build_rotary_module(cls, cfg)
        cast = trace(cast_mod, L, schedule=cfg, layer_type=row.layer_type, cast="bfloat16")
        assert as_built.threshold == pytest.approx(row.threshold)
        got = scan_verdict(1.0 if as_built.damaged else 0.0, 1.0 if cast.damaged else 0.0, 0.5)
        assert got == row.verdict, row.module_class
        assert as_built.downcast == []
        (op,) = cast.downcast
        assert op.name.endswith("inv_freq") and op.origin_dtype == "bfloat16" and "bfloat16" in op.exact_in
        assert cast.lines[0].startswith(f"operand {op.name}") and "keep_rotary_fp32" in cast.lines[0]


# --------------------------------------------------------------------------- referee: the bf16 position factory


def test_bf16_arange_is_named_with_its_first_inexact_position():
    r = trace(Bf16Positions(), L)
    (op,) = r.culprits
    assert op.op.startswith("aten.arange") and op.role == "position factory" and op.out_dtype == "bfloat16"
    assert op.first_inexact == BF16_FIRST_INEXACT == 257
    # bf16 spacing at L-1 (2**11 .. 2**12: 16) halves to the worst position error, 8
    assert op.added == op.error == get_format("bfloat16").max_exact_integer * 0 + 8
    assert op.added_half_ulps == 1.0  # one correct rounding: half the spacing 16 of [2048, 4096)
    # already correctly rounded (added: one half-ulp), so a correctly rounded bf16 arange explains nothing; named
    # because the output is broken (positions collide) and the arange in float64 removes the error
    assert op.not_rounded == 0 and op.explained == 0.0 and op.explained_float64 > 0.9
    assert r.output_verdict == "broken" and {o["kind"] for o in r.outputs} == {"rotation"}
    assert f"first inexact position {BF16_FIRST_INEXACT}" in r.lines[0] and "int64 or float32" in r.lines[0]
    assert r.verdict is None  # no config, no schedule: no RoPE audit


def test_ops_inside_a_submodule_carry_its_path():
    """A module whose submodule makes bf16 positions: the ops run by the submodule's forward carry its path (as
    named_modules names it), the outer module's own ops the root's (""), and the first line says where."""

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rope = Bf16Positions()

        def forward(self, x, position_ids):
            return tuple(t * 2.0 for t in self.rope(x, position_ids))

    r = trace(Outer(), L)
    (op,) = r.culprits
    assert op.module == "rope" and op.op.startswith("aten.arange") and " in rope: " in r.lines[0]
    assert [o.module for o in r.ops[-2:]] == ["", ""] and r.ops[-1].op == "aten.mul.Tensor"


def test_fp32_rotary_names_no_op_beyond_the_output_rounding():
    r = trace(Fp32Rotary(), L)
    assert r.culprits == [] and r.downcast == []
    assert r.lines[0].startswith("no op before the output") and "bfloat16" in r.lines[0]
    casts = [o for o in r.ops if o.role == "output cast"]
    # a cast rounds once (closed form); the outputs are safe and within a few half-ulps of bf16, so no op could
    # be named and nothing is rerun
    assert len(casts) == 2 and all(o.not_rounded == 0 for o in casts)
    assert r.output_verdict == "safe" and all(o["half_ulps"] <= 4 for o in r.outputs)
    assert all(o.explained is None and o.explained_float64 is None for o in r.ops)
    # the bf16 output rounding is at most half a bf16 ulp of 1 (2**-9), plus the float32 angle's error
    assert r.final_error <= 2.0**-9 + L * 2.0**-24


def test_cumsum_of_a_mask_is_followed():
    def positions_from_mask(attention_mask):
        return (attention_mask.cumsum(-1) - 1).to(torch.bfloat16)

    mask = torch.ones(1, 300, dtype=torch.int64)
    r = trace(positions_from_mask, inputs={"attention_mask": mask})
    assert [o.op for o in r.ops][0].startswith("aten.cumsum")
    assert r.culprits[0].op.startswith("aten._to_copy") and r.culprits[0].first_inexact == BF16_FIRST_INEXACT


def test_positions_written_into_a_view_make_its_base_derived():
    """``cache[:, 0] = bf16 positions`` (an in-place copy into a view of a plain tensor): the cache is followed
    after the write. Closed form: bf16 spacing on [512, 1024) is 4, so positions below 600 are off by up to 2,
    and the cache times 2 by up to 4; the first inexact position is 257 (then 514 after doubling)."""
    def written(pos):
        cache = torch.zeros(pos.shape[-1], 4)
        cache[:, 0] = pos[0].to(torch.bfloat16).float()
        return cache * 2.0

    r = trace(written, inputs={"pos": torch.arange(600)[None]}, positions=["pos"])
    assert r.final_error == 4.0
    last = r.ops[-1]
    assert last.op == "aten.mul.Tensor" and last.error == 4.0 and last.first_inexact == 2 * BF16_FIRST_INEXACT
    assert r.culprits[0].op.startswith("aten._to_copy") and r.culprits[0].first_inexact == BF16_FIRST_INEXACT


def test_reruns_reusing_the_main_runs_outputs_are_the_full_reruns():
    """The reruns that reuse the main run's outputs outside the fixed op's reach give the same outputs, bit for
    bit, as reruns that compute every op (transformers' Llama rotary module, cast to bf16)."""
    from precision_audit.trace.shadow import Kept
    from precision_audit.trace.target import load_target

    mod = load_target("tests/data/llama-3.1-8b.json", "bfloat16").fn
    args = (torch.zeros(1, 3000, 1, dtype=torch.bfloat16), torch.arange(3000)[None])
    names = dict(mod.named_buffers())
    keep = Kept()
    first = run_traced(mod, args, seeds=[1], names=names, keep=keep)
    assert keep.usable and keep.outputs
    fixed = [r.index for r in first.records if r.added > 0]
    assert fixed
    for i in fixed:
        a = run_traced(mod, args, seeds=[1], names=names, fix=i, keep=keep).outputs
        b = run_traced(mod, args, seeds=[1], names=names, fix=i).outputs
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b) == 2


def test_reruns_taking_kept_shadows_equal_full_reruns(monkeypatch):
    """Transformers' Llama rotary module as built (float32 inv_freq, exact positions): the rerun that fixes the
    angle product reaches every later op in float64 with inputs equal to their shadows, so it takes the main
    run's shadows there; its outputs equal, bit for bit, those of reruns that compute every op, and the whole
    trace's rows equal those of a trace that keeps nothing (every rerun computed)."""
    from precision_audit.trace import audit
    from precision_audit.trace.shadow import Kept
    from precision_audit.trace.target import load_target

    mod = load_target("tests/data/llama-3.1-8b.json").fn
    args = (torch.zeros(1, 3000, 1, dtype=torch.bfloat16), torch.arange(3000)[None])
    names = dict(mod.named_buffers())
    keep = Kept()
    first = run_traced(mod, args, seeds=[1], names=names, keep=keep)
    taken = []
    real_shadow = Kept.shadow

    def spy(self, index, name):
        got = real_shadow(self, index, name)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(Kept, "shadow", spy)
    for i in [r.index for r in first.records if r.added > 0]:
        a = run_traced(mod, args, seeds=[1], names=names, fix=i, keep=keep).outputs
        b = run_traced(mod, args, seeds=[1], names=names, fix=i).outputs
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b) == 2
    assert any(taken)
    monkeypatch.undo()
    kept = trace(mod, 3000, rope=False)
    monkeypatch.setattr(audit, "Kept", lambda: Kept(budget=0))
    assert trace(mod, 3000, rope=False) == kept


def test_a_product_by_one_carries_its_input_error(monkeypatch):
    """``x * 1.0`` (Llama's attention_scaling at its default) adds nothing in IEEE arithmetic, so the tracer
    neither upcasts nor compares it: its row (error carried, 0 added) equals the row measured the long way, and
    the output errors the main run's ops measured equal max |output - shadow| computed afresh."""
    from precision_audit.trace import mode
    from precision_audit.trace.shadow import error_between

    def f(pos):
        a = pos[0].to(torch.bfloat16).float() * 0.37
        return a.cos() * 1.0, a * 1

    kw = dict(inputs={"pos": torch.arange(700)[None]}, positions=["pos"])
    fast = trace(f, **kw)
    run = run_traced(f, (), kw["inputs"], seeds=["pos"])
    assert run.errors == [error_between(o, s) for o, s in zip(run.outputs, run.shadows)]
    monkeypatch.setattr(mode, "_is_identity", lambda *a: False)
    assert trace(f, **kw) == fast
    ones = fast.ops[-2:]  # cos * 1.0, then a * 1 (an int scalar is no operand)
    assert [(o.op, o.operands) for o in ones] == [("aten.mul.Tensor", ("scalar 1.0",)), ("aten.mul.Tensor", ())]
    assert all(o.added == 0 and o.error > 0 for o in ones)


# --------------------------------------------------------------------------- referee: mpmath


def test_shadow_per_op_errors_against_mpmath():
    w = torch.tensor([0.3, 1.7], dtype=torch.float32)
    pos = torch.tensor([0, 1, 5, 300, 1001, 4097])

    def chain(p):
        return (p.to(torch.bfloat16).float()[:, None] * w).sin() * 0.5

    run = run_traced(chain, (pos,), seeds=[0], names={"w": w})
    # the real intermediates, from the same torch kernels outside the trace
    lo = pos.to(torch.bfloat16)
    reals = [lo, lo.float(), lo.float()[:, None], lo.float()[:, None] * w, (lo.float()[:, None] * w).sin(),
             chain(pos)]
    mpmath.mp.prec = 200
    ws = [mpmath.mpf(float(v)) for v in w]
    exact_pos = [[mpmath.mpf(int(p))] for p in pos]
    prod = [[p[0] * c for c in ws] for p in exact_pos]
    sines = [[mpmath.sin(v) for v in row] for row in prod]
    exact = [exact_pos, exact_pos, exact_pos, prod, sines, [[v / 2 for v in row] for row in sines]]
    assert [r.op for r in run.records] == ["aten._to_copy.default", "aten._to_copy.default",
                                           "aten.unsqueeze.default", "aten.mul.Tensor", "aten.sin.default",
                                           "aten.mul.Tensor"]
    for rec, real, ex in zip(run.records, reals, exact):
        r = real.double().reshape(len(pos), -1).numpy()
        e = np.array([[float(v) for v in row] for row in ex])
        want = float(np.abs(r - np.broadcast_to(e, r.shape)).max())
        scale = float(np.abs(e).max())
        assert abs(rec.error - want) <= 4 * 2.0**-52 * scale, rec.op  # the shadow is float64 of the exact chain
    assert run.records[0].first_inexact == 1001 and run.records[0].added == 1.0  # 1001 -> 1000 (spacing 4)
    (shadow,) = run.shadows
    e = np.array([[float(v) for v in row] for row in exact[-1]])
    assert np.abs(shadow.numpy() - e).max() <= 4 * 2.0**-53
    assert [o for o in run.operands] == ["w", "scalar 0.5"]


def test_operand_downcast_rule():
    from precision_audit.trace.report import operand_exact_in

    assert operand_exact_in(np.array([0.1]), "float32") == ()
    assert operand_exact_in(np.array([0.5625, 1.0]), "float32") == ("bfloat16", "float16")
    assert operand_exact_in(np.array([1.0 + 2.0**-9]), "float32") == ("float16",)
    # a short constant (Bloom's slope base 0.5, a float32 0-dim tensor) is exact everywhere: no downcast
    from precision_audit.trace.report import operand_rows
    from precision_audit.trace.shadow import OperandRecord

    def flag(values):
        (row,) = operand_rows({"c": OperandRecord("c", "float32", (len(values),), np.array(values), 0)})
        return row.downcast

    assert not flag([0.5]) and not flag([0.375, 1.5]) and flag([0.3984375]) and flag([0.5, 0.3984375])


# --------------------------------------------------------------------------- bad input: ValueError naming it


class Raises(torch.nn.Module):
    def forward(self, x, position_ids):
        raise RuntimeError("kernel exploded")


class NoPositions(torch.nn.Module):
    def forward(self, a, b, c):
        return a


class Ignores(torch.nn.Module):
    def forward(self, x):
        return x * 2


@pytest.mark.parametrize("target, match", [
    (Raises(), "Raises raised RuntimeError: kernel exploded"),
    (NoPositions(), r"forward\(a, b, c\) takes no position input"),
    (Ignores(), "no op used a position input"),
    (42, "is not a config.json path"),
    ("no_such_module_xyz:make", "cannot import no_such_module_xyz"),
    ("nothing-here", "neither a config.json nor package.module:factory"),
    ("missing.json", "cannot read a config.json"),
])
def test_bad_targets_raise_value_error_naming_them(target, match):
    with pytest.raises(ValueError, match=match):
        trace(target, 64)


def test_bad_length_and_dtype():
    with pytest.raises(ValueError, match="length"):
        trace(Fp32Rotary(), 0)
    with pytest.raises(ValueError):
        trace(Fp32Rotary(), 64, dtype="bfloat17")


# --------------------------------------------------------------------------- the command


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "trace_targets_mod.py").write_text(textwrap.dedent("""
        import torch

        class Bad(torch.nn.Module):
            def forward(self, x, position_ids):
                pos = torch.arange(x.shape[1], dtype=torch.bfloat16)
                return (pos.float()[:, None] * 0.01).cos().to(x.dtype)

        class Boom(torch.nn.Module):
            def forward(self, x, position_ids):
                raise RuntimeError("boom")

        def bad():
            return Bad()

        def boom():
            return Boom()

        def not_a_module():
            return 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "trace_targets_mod"


def test_cli_config_cast_names_inv_freq_first():
    pytest.importorskip("transformers")
    res = CliRunner().invoke(main, ["trace", "tests/data/llama-3.1-8b.json", "--cast", "bfloat16", "-l", "4k"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith("trace of LlamaRotaryEmbedding from llama-3.1-8b.json .to(bfloat16)")
    assert lines[1].strip().startswith("operand inv_freq") and "keep_rotary_fp32" in lines[1]
    # degraded by the verdict (fast pairs radians off, resolving ones not), damaged by hf-scan's test
    assert any("RoPE audit: degraded" in line and "damaged by hf-scan's test" in line for line in lines)


def test_cli_factory_json(factories):
    res = CliRunner().invoke(main, ["trace", f"{factories}:bad", "-l", "1k", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    (d,) = out["results"]
    assert out["auditor"] == "trace" and d["length"] == 1024
    assert d["lines"][0].startswith("op 0 aten.arange") and f"position {BF16_FIRST_INEXACT}" in d["lines"][0]


def test_cli_refuses_a_second_cast():
    res = CliRunner().invoke(main, ["trace", "x:y", "--cast", "bf16", "--cast", "fp16"])
    assert res.exit_code == 2 and "it takes one value" in res.output


@pytest.mark.parametrize("target, words", [
    ("{m}:boom", "raised RuntimeError: boom"),
    ("{m}:not_a_module", "not a module or callable"),
    ("{m}:nope", "has no callable 'nope'"),
    ("tests/data/SOURCES.md", "cannot read a config.json"),
    ("tests/data/t5-v1_1-xxl-encoder.json", "no *RotaryEmbedding class"),
])
def test_cli_bad_target_exits_2_with_one_line(factories, target, words):
    res = CliRunner().invoke(main, ["trace", target.format(m=factories), "-l", "64"])
    assert res.exit_code == 2
    out = res.output.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("Error: ") and words in out[0], res.output


def test_a_view_taken_before_its_base_is_written_follows_the_write():
    """``col = cache[:, 0]`` taken while the cache is plain, then ``cache[:, 0] = bf16 positions``: the view shares
    the cache's storage, so it holds the rounded positions too and is followed from then on (closed form as in
    the test above: bf16 spacing 4 on [512, 1024), so col * 2 is off by up to 4, first inexact 514)."""
    def written(pos):
        cache = torch.zeros(pos.shape[-1], 4)
        col = cache[:, 0]
        cache[:, 0] = pos[0].to(torch.bfloat16).float()
        return col * 2.0

    r = trace(written, inputs={"pos": torch.arange(600)[None]}, positions=["pos"])
    assert r.final_error == 4.0
    last = r.ops[-1]
    assert last.op == "aten.mul.Tensor" and last.error == 4.0 and last.first_inexact == 2 * BF16_FIRST_INEXACT
    assert r.culprits[0].op.startswith("aten._to_copy") and r.culprits[0].first_inexact == BF16_FIRST_INEXACT


def test_a_derived_view_follows_a_later_write_into_its_base():
    """A view of exact derived positions, then its base overwritten in place with bf16-rounded ones: the view's
    error follows the base (a stale error of 0 would let the next op take its float64 value for its shadow and
    report 0).  Closed form: bf16 spacing 4 on [512, 1024), so positions below 600 are off by up to 2, times 3: 6."""
    def rewritten(pos):
        p = pos[0].float()  # exact
        head = p[:]
        p.copy_(pos[0].to(torch.bfloat16).float())  # rounded, in place
        return head * 3.0

    r = trace(rewritten, inputs={"pos": torch.arange(600)[None]}, positions=["pos"])
    assert r.final_error == 6.0
    assert r.culprits[0].op.startswith("aten._to_copy") and r.culprits[0].first_inexact == BF16_FIRST_INEXACT


def test_an_in_place_op_adds_its_own_rounding_and_shares_no_copy():
    """``a.mul_(1.1)`` in float32: what it adds is its own rounding, at most 600 x |1.1 - float32(1.1)| (torch
    multiplies by the scalar in float32) plus half a float32 ulp of 660 (2**-15), so its float64 copy of ``a`` is
    taken before the real op writes into ``a`` (taken after, it was ``a * 1.1`` multiplied again: 66 here).  The float64 copies shared between ops (cos and sin of one tensor) are never an
    in-place op's: ``a.cos()`` then adds its own rounding only, at most 2**-24 plus a faithful cosf's ulp."""
    def f(pos):
        a = pos[0].to(torch.bfloat16).float()
        s = a.sin()
        a.mul_(1.1)
        return s, a.cos()

    r = trace(f, inputs={"pos": torch.arange(600)[None]}, positions=["pos"])
    mul = next(o for o in r.ops if o.op.startswith("aten.mul_"))
    cos = next(o for o in r.ops if o.op.startswith("aten.cos"))
    bound = 600 * abs(1.1 - float(np.float32(1.1))) + 2.0**-15
    assert 0 < mul.added <= bound and 0 < cos.added <= 2.0**-23
