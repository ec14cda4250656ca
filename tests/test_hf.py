"""Live code: transformers' rotary modules and ALiBi builders, audited by precision_audit.hf.

Referees (imported and run, never copied):
* transformers' rotary modules built from default configs: their ``inv_freq`` buffers (transformers' own
  float32 computation) check the config -> schedule mapping; their cos/sin are measured and must agree with
  the rope auditor's recipe that models the same code path (numpy engine within the bounds of
  test_schedules, torch engine within 1 %).
* transformers' Bloom/Falcon/MPT ALiBi builders: their tensors must equal the alibi auditor's matching
  recipe's biases, and then every metric must agree with the auditor's own.
* hand-written rotary callables (our own test code, each one recipe by construction) check the matching.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np
import pytest
from _engine_bound import assert_engines_within_bound  # tests/ helper: the engines' derived bound

from precision_audit import hf
from precision_audit.rope import audit, preset
from precision_audit.rope.schedules import RopeSchedule

torch = pytest.importorskip("torch")


def _tf() -> None:
    pytest.importorskip("transformers")


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from precision_audit.cli import main

    return CliRunner().invoke(main, list(args))


# --------------------------------------------------------------------------- config -> schedule


@pytest.mark.parametrize("model_type,layer_type", [
    ("llama", None), ("qwen2", None), ("mistral", None), ("gemma", None), ("phi3", None),
    ("gemma3_text", "full_attention"), ("gemma3_text", "sliding_attention"), ("deepseek_v3", None),
    ("ministral3", None), ("mistral4", None), ("stablelm", None), ("gpt_oss", None), ("phimoe", None),
])
def test_schedule_from_config_is_the_modules_own(model_type, layer_type):
    # Real third-party code: the module's inv_freq buffer is transformers' float32 evaluation of the config's
    # schedule.  Each float32 operation rounds by <= 2**-24 relative, the rounded exponent moves base ** x by
    # ln(base) * 2**-24, pow is faithful, and the formulas chain <= 6 more roundings: (ln(base) + 8) * 2**-24.
    _tf()
    cls = hf.find_rotary_classes(model_type)[0]
    module, cfg = hf.build_rotary_module(cls)
    sched = hf.schedule_from_config(cfg, layer_type)
    buf = getattr(module, f"{layer_type}_inv_freq" if layer_type else "inv_freq").double().numpy()
    ref = sched.inv_freq()
    np.testing.assert_allclose(buf, ref, rtol=(math.log(sched.base) + 8) * 2.0**-24, atol=0)


def test_schedule_from_config_dict_and_errors():
    # DeepSeek rotates qk_rope_head_dim dims; legacy rope_scaling + rope_theta; Phi-3 keeps L0 at the top level
    s = hf.schedule_from_config({"hidden_size": 7168, "num_attention_heads": 128, "qk_rope_head_dim": 64,
                                 "rope_theta": 10000, "max_position_embeddings": 163840,
                                 "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                                                  "mscale": 1.0, "mscale_all_dim": 1.0}})
    assert (s.head_dim, s.scaling, s.factor, s.cos_sin_scale) == (64, "yarn", 40.0, 1.0)
    s = hf.schedule_from_config({"hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4,
                                 "rope_theta": 10000})
    assert (s.head_dim, s.rotary_dim) == (80, 32)
    with pytest.raises(ValueError, match="multimodal rope"):
        hf.schedule_from_config({"head_dim": 128, "rope_parameters": {"rope_type": "default", "mrope_section": [1]}})
    with pytest.raises(ValueError, match="axial"):
        hf.schedule_from_config({"head_dim": 64, "rope_parameters": {"rope_type": "axial"}})
    with pytest.raises(ValueError, match="one set of rope parameters"):
        hf.schedule_from_config({"head_dim": 64}, "full_attention")
    with pytest.raises(ValueError, match="no head_dim"):
        hf.schedule_from_config({"rope_theta": 10000})


# --------------------------------------------------------------------------- live modules


def _rotary(theta: np.ndarray, *, freq_dtype: Any = None, pos_dtype: Any = None, interleave: bool = False) -> Any:
    """A rotary callable of our own: fp32 code, or inv_freq / positions held in a low-precision dtype."""
    inv = torch.tensor(theta, dtype=torch.float32)
    if freq_dtype is not None:
        inv = inv.to(freq_dtype)

    def forward(x: Any, position_ids: Any) -> tuple[Any, Any]:
        if pos_dtype is not None:  # everything in the low dtype: positions, product, cos/sin
            ang = position_ids[..., None].to(pos_dtype) * inv.to(pos_dtype)
        else:
            ang = position_ids[..., None].float() * inv.float()
        emb = torch.repeat_interleave(ang, 2, dim=-1) if interleave else torch.cat([ang, ang], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    return forward


@pytest.mark.parametrize("name,kwargs", [
    ("fp32", {}),
    ("fp32", {"interleave": True}),
    ("lowp-inv-freq", {"freq_dtype": torch.bfloat16}),
    ("lowp", {"freq_dtype": torch.bfloat16, "pos_dtype": torch.bfloat16}),
])
def test_matches_the_recipe_each_callable_implements(name, kwargs):
    # By construction each callable runs one recipe's code path (float32 formula for inv_freq, as presets do)
    s = RopeSchedule(head_dim=64, base=10000.0)
    (row,) = hf.audit_rope_module(_rotary(s.inv_freq_in("float32"), **kwargs), s, 4096)
    assert row.matches_recipe == name, row
    assert row.diagnosis == hf.DIAGNOSES[name].format(dtype="bfloat16")
    (ref,) = audit(s, preset(name, "bf16"), 4096, engine="torch")
    assert row.mean_rotation_error == pytest.approx(ref.mean_rotation_error, rel=0.01)
    assert row.colliding_positions == ref.colliding_positions


def test_module_protocol_errors():
    s = RopeSchedule(head_dim=8)
    with pytest.raises(ValueError, match="not \\(cos, sin\\)"):
        hf.audit_rope_module(lambda x, p: p.float(), s, 16)
    with pytest.raises(ValueError, match="returns 6 cos columns; the schedule from its config has 4 frequencies"):
        hf.audit_rope_module(lambda x, p: (torch.zeros(1, p.shape[1], 6),) * 2, s, 16)

    class Other(torch.nn.Module):  # a buffer of another schedule (base 500000, not 10000)
        def __init__(self) -> None:
            super().__init__()
            self.inv_freq = torch.nn.Buffer(torch.tensor(RopeSchedule(head_dim=8, base=5e5).inv_freq()))

    with pytest.raises(ValueError, match="implements another schedule"):
        hf.audit_rope_module(Other(), s, 16)
    with pytest.raises(ValueError, match="torch has no dtype for float6_e2m3fn"):
        hf.audit_rope_module(_rotary(s.inv_freq()), s, 16, dtype="fp6_e2m3")


def _check_against_recipe(row: Any, sched: RopeSchedule, recipe: str) -> None:
    # the bounds of test_schedules: numpy engine 5 % (mean), 10 % (max) plus the angle the engines' float32
    # theta_i may move it, once they are within the derived bound (tests/_engine_bound.py); torch engine 1 %
    L = row.length
    (ours,) = audit(sched, preset(recipe, "bf16"), L)
    (torch_row,) = audit(sched, preset(recipe, "bf16"), L, engine="torch")
    d_theta = assert_engines_within_bound(sched, sched.frequency_key(L))
    assert ours.mean_rotation_error == pytest.approx(row.mean_rotation_error, rel=0.05)
    assert abs(ours.max_rotation_error - row.max_rotation_error) <= 0.10 * row.max_rotation_error + (L - 1) * d_theta
    assert torch_row.mean_rotation_error == pytest.approx(row.mean_rotation_error, rel=0.01)
    assert torch_row.max_rotation_error == pytest.approx(row.max_rotation_error, rel=0.01)


def test_llama_clean_as_built_and_lowp_inv_freq_after_cast_32k():
    _tf()
    (built,) = hf.audit_model_type("llama", 32768)
    (cast,) = hf.audit_model_type("llama", 32768, cast_module=True)
    sched = hf.schedule_from_config(hf.build_rotary_module(hf.find_rotary_classes("llama")[0])[1])
    assert (built.inv_freq_dtype, cast.inv_freq_dtype) == ("float32", "bfloat16")
    assert built.matches_recipe == "fp32" and built.max_rotation_error <= hf.damage_threshold(sched, "bfloat16", 32768)[0]
    assert cast.matches_recipe == "lowp-inv-freq" and cast.diagnosis == "inv_freq buffer in bfloat16 (lowp-inv-freq)"
    assert cast.max_rotation_error > math.pi / 2  # phase lost
    _check_against_recipe(built, sched, "fp32")
    _check_against_recipe(cast, sched, "lowp-inv-freq")


# --------------------------------------------------------------------------- the scan

FAMILIES = ("llama", "qwen2", "mistral", "gemma", "phi3")


def test_scan_covers_the_main_families():
    _tf()
    rows = hf.scan(length=2048, families=FAMILIES)
    by_type = {r.model_type: r for r in rows}
    assert set(FAMILIES) <= set(by_type), sorted(by_type)
    for t in FAMILIES:
        r = by_type[t]
        assert r.status == "audited", r
        # transformers keeps inv_freq as a float32 buffer that module.to(bf16) rounds (checked here on the real
        # module): built clean, damaged by the cast
        module, _ = hf.build_rotary_module(hf.find_rotary_classes(t)[0])
        buf = module.inv_freq
        assert buf.dtype == torch.float32 and not torch.equal(module.to(torch.bfloat16).inv_freq.float(), buf)
        assert r.built_max_rotation_error <= r.threshold < r.cast_max_rotation_error
        assert (r.verdict, r.cast_matches_recipe) == ("damaged by the cast", "lowp-inv-freq")
        assert set(r.to_dict()) >= {"model_type", "class", "status", "reason", "built_max_rotation_error",
                                    "built_mean_rotation_error", "cast_max_rotation_error",
                                    "cast_mean_rotation_error", "verdict"}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_scan_fix_restores_every_damaged_class(dtype):
    # issue 13: with keep_rotary_fp32 before the cast, each class the cast damages gives exactly its
    # as-built errors (the same cos/sin bits: the buffers stay float32), in bf16 and in fp16
    _tf()
    rows = hf.scan(length=2048, dtype=dtype, families=("llama", "gemma3", "phi3", "gpt_oss"), fix=True)
    damaged = [r for r in rows if r.verdict == "damaged by the cast"]
    assert len(damaged) >= 4
    for r in damaged:
        assert r.fix_restored is True, r
        assert (r.fix_max_rotation_error, r.fix_mean_rotation_error) == (r.built_max_rotation_error,
                                                                          r.built_mean_rotation_error)
        assert r.fix_max_rotation_error <= r.threshold < r.cast_max_rotation_error
    res = _cli("hf-scan", "--family", "llama", "--length", "1024", "--fix", "--json")
    assert res.exit_code == 0, res.output
    js = json.loads(res.output)
    assert js["summary"]["restored by the fix"] == js["summary"]["damaged by the cast"] == 1
    assert js["results"][0]["fix_restored"] is True


class _NoConfig(torch.nn.Module):
    def __init__(self, dim: int, theta: float) -> None:
        super().__init__()

    def forward(self, x: Any, position_ids: Any) -> Any:
        return x, x


class _OtherForward(torch.nn.Module):
    def forward(self, seqlen: int) -> Any:
        return seqlen


def test_scan_records_bad_classes_and_goes_on():
    _tf()
    good = [f for f in hf.rotary_classes(["llama"])]
    bad = [hf._Found("x", "x.modeling_x", _NoConfig), hf._Found("y", "y.modeling_y", _OtherForward),
           hf._Found("z", "z.modeling_z", None, "import failed: ImportError('no z')")]
    rows = hf.scan(length=512, classes=bad + good)
    assert [r.status for r in rows] == ["skipped", "skipped", "skipped", "audited"]
    assert "is not the rotary protocol" in rows[1].reason and rows[2].reason == "import failed: ImportError('no z')"
    assert rows[0].reason and rows[0].verdict is None


@pytest.mark.slow
def test_full_scan():
    _tf()
    found = hf.rotary_classes()
    rows = hf.scan(length=8192, classes=found)
    assert {r.module_class for r in rows} == {f.name for f in found}
    audited = [r for r in rows if r.status == "audited"]
    assert len(audited) >= 100
    assert all(r.verdict in hf.VERDICTS for r in audited)
    assert all(r.reason for r in rows if r.status == "skipped")
    assert {"llama", "qwen2", "mistral", "gemma", "phi3"} <= {r.model_type for r in audited}


# --------------------------------------------------------------------------- ALiBi builders


@pytest.mark.parametrize("heads", [8, 12])
@pytest.mark.parametrize("model_type,dtype,recipe,recipe_dtype", [
    ("bloom", "bfloat16", "cast-output", "bfloat16"),
    ("bloom", "float16", "cast-output", "float16"),
    ("falcon", "bfloat16", "lowp", "bfloat16"),
    ("falcon", "float16", "lowp", "bfloat16"),  # Falcon computes the bias in bfloat16 whatever the model dtype
    ("mpt", "bfloat16", "fp32", "bfloat16"),
])
def test_alibi_builder_agrees_with_the_auditor(model_type, dtype, recipe, recipe_dtype, heads):
    # Real third-party code: the builder's tensor must equal the recipe's stored biases bit for bit; then
    # its metrics (computed on the whole tensor) must equal the streaming auditor's for that recipe
    _tf()
    row = hf.audit_alibi_builder(model_type, heads, 4096, dtype)
    allowed = {recipe}
    if heads & (heads - 1) == 0 and recipe in ("lowp", "cast-output"):
        allowed |= {"lowp", "cast-output"}  # power-of-two slopes are exact: both store round(slope * k)
    assert row.matches_recipe in allowed and (row.recipe_dtype, row.identical_fraction) == (recipe_dtype, 1.0)
    rec = row.recipe
    for k in ("min_distinct_biases", "max_run", "order_inversions", "nonfinite_biases", "max_abs_error", "form"):
        assert getattr(row, k) == getattr(rec, k), k
    assert row.max_prob_change == pytest.approx(rec.max_prob_change, rel=1e-9, abs=1e-15)


def test_cli_hf_alibi_json():
    _tf()
    res = _cli("hf-alibi", "-m", "falcon", "--heads", "12", "-l", "1024", "-d", "fp16", "--json")
    assert res.exit_code == 0, res.output
    b, r = json.loads(res.output)["results"]
    assert b["value_format"] == "bfloat16" and b["bias_dtype"] == "float16" and r["recipe"] == "lowp"
    assert b["min_distinct_biases"] == r["min_distinct_biases"]


# --------------------------------------------------------------------------- command line


def test_cli_hf_rope_json_rows(tmp_path):
    _tf()
    res = _cli("hf-rope", "--model-type", "llama", "-l", "2048", "--cast-module", "--json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["results"]
    assert set(row) >= {"model_type", "class", "dtype", "length", "cast_module", "max_rotation_error",
                        "mean_rotation_error", "colliding_positions", "matches_recipe"}
    assert (row["class"], row["cast_module"], row["matches_recipe"]) == ("LlamaRotaryEmbedding", True, "lowp-inv-freq")
    # a config.json: Llama 3.1's rope parameters (numbers only) give the llama3 schedule
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
           "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    res = _cli("hf-rope", str(f), "-l", "1024", "--json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["results"]
    assert "rope_type=llama3" in row["schedule"] and row["matches_recipe"] == "fp32"


def test_cli_hf_rope_layer_types():
    _tf()
    res = _cli("hf-rope", "-m", "gemma3_text", "-l", "512", "--layer-type", "sliding_attention", "--json")
    assert res.exit_code == 0, res.output
    assert [r["layer_type"] for r in json.loads(res.output)["results"]] == ["sliding_attention"]


@pytest.mark.parametrize("args,message", [
    (["hf-rope", "--model-type", "lama"], "unknown model type 'lama'"),
    (["hf-rope"], "give --model-type"),
    (["hf-rope", "/nonexistent/config.json", "-m", "llama"], "cannot read '/nonexistent/config.json'"),
    (["hf-rope", "-m", "llama", "--layer-type", "full_attention"], "unknown layer type 'full_attention'"),
    (["hf-rope", "-m", "gemma3_text", "--layer-type", "global"], "unknown layer type 'global'"),
    (["hf-rope", "-m", "llama", "--class", "Nope"], "has no class 'Nope'"),
    (["hf-rope", "-m", "bert"], "no *RotaryEmbedding class"),
    (["hf-scan", "--family", "bert"], "no *RotaryEmbedding class in bert"),
    (["hf-alibi", "-m", "bloom", "--heads", "4096", "-l", "1M"], "exceeds"),
])
def test_cli_hf_errors(args, message):
    _tf()
    res = _cli(*args)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_cli_bad_config_json(tmp_path):
    _tf()
    f = tmp_path / "config.json"
    f.write_text("{not json")
    res = _cli("hf-rope", str(f), "-m", "llama")
    assert res.exit_code == 2 and "is not valid JSON" in res.output


@pytest.mark.parametrize("args", [["hf-rope", "-m", "llama"], ["hf-scan"], ["hf-alibi", "-m", "bloom"]])
def test_cli_without_transformers(monkeypatch, args):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    res = _cli(*args)
    assert res.exit_code == 2, res.output
    assert "pip install 'precision-audit[hf]'" in res.output


@pytest.mark.parametrize("model_type", ["llama", "gemma3_text", "phi3"])
def test_fixed_module_audits_clean_after_the_cast(model_type):
    # precision_audit.fix keeps the rotary buffers float32 through .to(bf16): the live module must then
    # measure like the fp32 recipe again (below the damage threshold), where without it the cast damages it
    _tf()
    from precision_audit.fix import keep_rotary_fp32

    cls = hf.find_rotary_classes(model_type)[0]
    module, cfg = hf.build_rotary_module(cls)
    keep_rotary_fp32(module)
    module = module.to(torch.bfloat16)
    for lt in hf._layer_types(module, cfg) if hf._forward_kind(cls) == "layer_type" else [None]:
        sched = hf.schedule_from_config(cfg, lt)
        (row,) = hf.audit_rope_module(module, sched, 8192, layer_type=lt)
        assert row.inv_freq_dtype == "float32" and row.matches_recipe == "fp32", row
        assert row.max_rotation_error <= hf.damage_threshold(sched, "bfloat16", 8192)[0]


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral", "mistral4", "phi3", "gpt_oss", "deepseek_v3",
                                        "gemma3_text", "gemma4_text"])
def test_config_parser_agrees_with_transformers_rule(model_type):
    # precision_audit.config reads a config's JSON form (to_dict()) and the config object alike, and as
    # hf.schedule_from_config (its reading of one module's config, checked against each module's own inv_freq
    # buffer in the scan); Mistral 4 is the case where a partial rotary factor applies to head_dim, not to
    # qk_rope_head_dim; Gemma 4's JSON form keeps the full-attention head_dim only in per_layer_config
    _tf()
    from transformers import AutoConfig

    from precision_audit import config

    assert hf.schedule_from_config is config.schedule_from_config  # one parser
    with hf._quiet():
        cfg = AutoConfig.for_model(model_type)
        as_dict = cfg.to_dict()
    parsed = dict(config.load_config_dict(as_dict).rope)
    assert dict(config.load_config_dict(cfg).rope) == parsed
    for layer_type, sched in parsed.items():
        assert hf.schedule_from_config(cfg, None if layer_type == "all" else layer_type) == sched, layer_type
