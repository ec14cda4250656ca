"""`config`, `report` and `testing.assert_config` on learned and relative position encodings (issue 31, item 4):
T5 / mT5 buckets, DeBERTa log buckets, XLNet relative sinusoids, GPT-2 / BERT / OPT learned positions.

References: transformers' own config classes (their defaults, what a config.json without the field means) and,
for DeBERTa's ``max_relative_positions = -1`` rule, a DebertaV2 encoder built from the shipped config, whose
attributes say what transformers runs.  The bucket and id figures themselves are refereed against independent
oracles and transformers' functions in tests/test_relative*.py; here the figures are the wiring: config's rows
are the relative auditor's rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import audit_config, default_lengths, load_config, load_config_dict
from precision_audit.relative import LEARNED_PATHS, audit_learned, audit_relative
from precision_audit.testing import assert_config

DATA = Path(__file__).parent / "data"
transformers = pytest.importorskip("transformers")


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("cfg", [
    transformers.BertConfig().to_dict(),  # transformers 5: no position_embedding_type field at all
    {**transformers.BertConfig().to_dict(), "position_embedding_type": "absolute"},  # older BERT configs
    transformers.GPT2Config().to_dict(),
    transformers.OPTConfig().to_dict(),
], ids=["bert", "bert-absolute", "gpt2", "opt"])
def test_learned_positions_are_not_read_as_rope(cfg: dict) -> None:
    """BERT was audited as RoPE with base 10000, an encoding it does not have: now it is a table lookup."""
    m = load_config_dict(cfg)
    assert m.kind == "learned" and not m.rope
    assert default_lengths(m) == (m.max_position_embeddings,)  # a table ends at its last row
    if cfg["model_type"] == "opt":
        assert dict(m.scheme_params) == {"offset": 2}  # OPTLearnedPositionalEmbedding: ids + 2


def test_relative_configs_take_transformers_defaults() -> None:
    """Absent fields mean transformers' defaults: T5 32 buckets / 128; XLNet d_model 1024, attn_type bi."""
    t5 = load_config_dict(transformers.T5Config().to_dict())
    assert (t5.kind, t5.scheme, dict(t5.scheme_params)) == ("relative", "t5", {"num_buckets": 32, "max_distance": 128})
    assert load_config_dict(transformers.MT5Config().to_dict()).scheme == "t5"
    xl = transformers.XLNetConfig()
    x = load_config_dict(xl.to_dict())
    assert (x.scheme, dict(x.scheme_params)) == ("xlnet", {"d_model": xl.d_model, "attn_type": xl.attn_type})


def test_deberta_max_relative_positions_as_transformers_resolves_it() -> None:
    """deberta-v3-base declares max_relative_positions -1: transformers' encoder then uses
    max_position_embeddings; a tiny encoder built from the shipped config says which values it runs."""
    raw = json.loads((DATA / "deberta-v3-base.json").read_text())
    small = dict(raw, num_hidden_layers=1, hidden_size=64, num_attention_heads=2, intermediate_size=64,
                 vocab_size=100)
    enc = transformers.DebertaV2Model(transformers.DebertaV2Config(**small)).encoder
    m = load_config(DATA / "deberta-v3-base.json")
    assert dict(m.scheme_params) == {"num_buckets": enc.position_buckets, "max_distance": enc.max_relative_positions}


def test_config_rows_are_the_relative_auditors() -> None:
    """T5: the encoder's bidirectional and the decoder's causal buckets; GPT-2: the learned-id paths."""
    t5 = load_config(DATA / "t5-v1_1-xxl-encoder.json")
    rows = audit_config(t5, [2048], ["bfloat16"])
    for side, bi in (("encoder", True), ("decoder", False)):
        want = audit_relative("t5", lengths=[2048], dtypes=["bfloat16"], bidirectional=bi)
        got = [r for r in rows if r.layer_type == side]
        assert [(r.recipe, r.changed, r.first_changed, r.max_shift, r.verdict) for r in got] == \
               [(w.path, w.flipped, w.first_flip, w.max_shift, w.verdict) for w in want]
    gpt2 = audit_config(load_config(DATA / "gpt2.json"), None, ["bfloat16"])
    want = audit_learned(LEARNED_PATHS, [1024], ["bfloat16"])
    assert [(r.recipe, r.changed, r.first_changed, r.colliding_positions) for r in gpt2] == \
           [(w.path, w.wrong, w.first_wrong, w.collided) for w in want]
    # bfloat16 keeps 8 significant bits: 256 is the last id every integer below reaches exactly
    assert {r.recipe: r.first_changed for r in gpt2}["mask-cumsum"] == 256


@pytest.mark.parametrize("name", ["t5-v1_1-xxl-encoder", "gpt2", "deberta-v3-base"])
def test_cli_config_and_report(name: str, tmp_path: Path) -> None:
    r = _run("config", str(DATA / f"{name}.json"), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["summary"] and out["model"]["kind"] in ("relative", "learned")
    assert all(row["component"] in ("relative", "learned") for row in out["results"])
    rep = _run("report", str(DATA / f"{name}.json"), "-o", str(tmp_path), "-q")
    assert rep.exit_code == 0, rep.output
    md = (tmp_path / "report.md").read_text()
    assert md.index("## Bottom line") < md.index("## Verdict")


def test_cli_usage_errors_on_relative_models() -> None:
    bad = _run("config", str(DATA / "gpt2.json"), "--stack", "vllm")
    assert bad.exit_code == 2 and "uses learned positions" in bad.output
    bad = _run("config", str(DATA / "t5-v1_1-xxl-encoder.json"), "-r", "fp32")
    assert bad.exit_code == 2 and "unknown t5 path 'fp32'" in bad.output


def test_assert_config_on_relative_models() -> None:
    assert_config(DATA / "gpt2.json")  # ids from an int64 mask: exact
    assert_config(DATA / "t5-v1_1-xxl-encoder.json", dtype="bfloat16")  # transformers: the log in float32
    with pytest.raises(AssertionError, match="fails on recipe lowp in bfloat16"):
        assert_config(DATA / "deberta-v3-base.json", recipe="lowp")
    with pytest.raises(AssertionError, match="fails on recipe mask-cumsum"):
        assert_config(DATA / "gpt2.json", recipe="mask-cumsum")
