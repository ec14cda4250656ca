"""The auditors' one call shape: ``audit_*(subject, recipes, lengths, dtypes, *, chunk, ...)``.

Expected values: the same auditor called the explicit way (one recipe object per dtype, one call per
recipe), so each check is an identity between two paths through the code, not a pinned number.
"""

from __future__ import annotations

import inspect

import pytest

import precision_audit as pa
from precision_audit import alibi, sinusoidal
from precision_audit.relative import LEARNED_PATHS, audit_learned, audit_relative, audit_relative_sinusoid
from precision_audit.rope import RopeSchedule, preset, recipe, stack
from precision_audit.rope.stacks import recipes_for
from precision_audit.verdicts import rope_verdict


def _dicts(rows):
    return [r.to_dict() for r in rows]


@pytest.mark.parametrize("fn, names", [
    (pa.audit_rope, ["schedule", "recipes", "lengths", "dtypes"]),
    (pa.audit_alibi, ["num_heads", "recipes", "lengths", "dtypes"]),
    (pa.audit_sinusoidal, ["dim", "recipes", "lengths", "dtypes"]),
    (audit_relative, ["scheme", "paths", "lengths", "dtypes"]),
    (audit_relative_sinusoid, ["d_model", "paths", "klens", "dtypes"]),
    (audit_learned, ["paths", "lengths", "dtypes"]),
    (pa.audit_positions, ["lengths", "dtypes"]),
    (pa.audit_rotary_kernel, ["apply", "schedule", "lengths", "dtypes"]),
])
def test_positional_order_and_keyword_only_options(fn, names):
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert positional == names
    options = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    assert not options & {"chunk_elems", "chunk_elements"}  # one name for the chunk, in positions


def test_rope_names_run_in_every_dtype_as_the_recipe_objects_do():
    s = RopeSchedule(head_dim=32, base=500000.0)
    names, dtypes = ["lowp", "fp32", "vllm"], ["bf16", "fp16"]
    by_name = pa.audit_rope(s, names, [300, 2048], dtypes)
    by_object = pa.audit_rope(s, [recipe(n, d, s) for d in dtypes for n in names], [300, 2048])
    assert _dicts(by_name) == _dicts(by_object)
    assert [(r.recipe, r.dtype) for r in by_name[::2]] == [(n, d) for d in ("bfloat16", "float16") for n in names]
    assert recipe("fp32", "fp16") == preset("fp32", "fp16") and recipe("vllm", "bf16", s) == stack("vllm", "bf16", s)
    # a Recipe object carries its dtype: it runs once, among the first dtype's recipes
    mixed = recipes_for(["lowp", preset("fp64", "e4m3")], ["bf16", "fp16"])
    assert [(r.name, r.cache) for r in mixed] == [("lowp", "bfloat16"), ("fp64", "float8_e4m3fn"),
                                                  ("lowp", "float16")]


def test_rope_bad_recipes_name_themselves():
    s = RopeSchedule(head_dim=8)
    with pytest.raises(ValueError, match=r"unknown RoPE recipe 'fp23'; did you mean: fp32\?"):
        pa.audit_rope(s, ["fp23"], 64)
    with pytest.raises(ValueError, match=r"recipes\[1\] 3 is not a recipe name or a Recipe"):
        pa.audit_rope(s, ["fp32", 3], 64)
    with pytest.raises(ValueError, match="no recipe given"):
        pa.audit_rope(s, [], 64)
    with pytest.raises(ValueError, match="chunk 0 must be at least 1"):
        pa.audit_rope(s, "fp32", 64, chunk=0)
    with pytest.raises(ValueError, match="stack 'mlx' does not run rope type 'dynamic'"):
        pa.audit_rope(RopeSchedule(head_dim=8, scaling="dynamic", factor=2.0), "mlx", 64)


def test_rope_chunk_counts_positions():
    # progress reports each chunk's positions: chunk=100 over 1000 positions is ten calls of 100
    seen: list[int] = []
    pa.audit_rope(RopeSchedule(head_dim=16), "fp32", 1000, chunk=100, workers=1, distances=(), progress=seen.append)
    assert seen == [100] * 10


def test_alibi_recipes_and_dtypes_give_the_rows_of_one_call_each():
    together = pa.audit_alibi(6, ["lowp", "cast-output", "fp32"], [100, 700], ["bf16", "fp16"])
    separate = [r for d in ("bfloat16", "float16") for n in ("lowp", "cast-output", "fp32")
                for r in pa.audit_alibi(6, n, [100, 700], d)]
    assert _dicts(together) == _dicts(separate)
    assert alibi.recipe("cast-output", "fp16") == alibi.get_recipe("cast-output", "fp16")
    own = alibi.Recipe("mine", "relative", "exact", "bf16", "fp32", "fp32", "fp16")
    assert [r.dtype for r in pa.audit_alibi(4, own, 64)] == ["float16"]  # labelled by its bias format
    assert [r.dtype for r in pa.audit_alibi(4, own, 64, ["bf16", "fp32"])] == ["bfloat16", "float32"]


def test_alibi_chunk_counts_positions():
    seen: list[int] = []
    pa.audit_alibi(4, "lowp", 1000, "bf16", chunk=250, progress=seen.append)
    assert seen == [250] * 8  # two passes of four chunks


def test_sinusoidal_recipe_binds_a_dtype_and_names_stay_unique():
    bound = sinusoidal.recipe("lowp", "fp16")
    assert {getattr(bound, s) for s in sinusoidal.STAGES} == {"float16"}
    # bound to float16, audited under the label bfloat16: the rows of the float16 audit, relabelled
    (a,) = pa.audit_sinusoidal(16, bound, 3000, "bf16", max_lag=0)
    (b,) = pa.audit_sinusoidal(16, "lowp", 3000, "fp16", max_lag=0)
    assert {**a.to_dict(), "dtype": "float16"} == b.to_dict()
    with pytest.raises(ValueError, match="two recipes named 'lowp'"):
        pa.audit_sinusoidal(16, ["lowp", bound], 64)


def test_calls_in_the_former_order_fail_loudly():
    # the breaking change of the call shape: an old call raises, it never returns another audit's rows
    with pytest.raises((ValueError, TypeError)):
        pa.audit_alibi(8192, 8, "cast-output", "bf16")  # old: lengths, num_heads, recipe, dtype
    with pytest.raises((ValueError, TypeError)):
        pa.audit_sinusoidal(4096, 128, ["float16"], ["lowp"])  # old: lengths, dim, dtypes, recipes
    with pytest.raises((ValueError, TypeError)):
        audit_relative_sinusoid(512, 64, "bfloat16")  # old: klens, d_model, dtypes
    with pytest.raises((ValueError, TypeError)):
        audit_learned(4096, "float16")  # old: lengths, dtypes
    with pytest.raises(TypeError):
        rope_verdict(0.1, 0, 2.0**-9)  # old: a cache bound third (never used)
    with pytest.raises(TypeError):
        pa.audit_rope(RopeSchedule(head_dim=8), "fp32", 64, chunk_elems=2**19)  # type: ignore[call-arg]
    assert [r.path for r in audit_learned(LEARNED_PATHS[:1], 64, "bf16")] == [LEARNED_PATHS[0]]
