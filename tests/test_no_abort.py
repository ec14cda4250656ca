"""No audit aborts (issue 29, item 1): every shipped config gets a bottom line; a stack that cannot run a model,
or runs it with another schedule, is a row or a reason, never an exit 2.

References: transformers' own YaRN init function (``ROPE_INIT_FUNCTIONS["yarn"]``, run here on gpt-oss' config
with truncate true and false) for the schedule llama.cpp runs; transformers' ``Qwen2VLConfig`` for what an
``mrope`` rope type means.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import FALLBACK_CONTEXT, audit_config, load_config, load_config_dict, stack_notes

DATA = Path(__file__).parent / "data"
CONFIGS = sorted(DATA.glob("*.json")) + sorted(DATA.glob("diffusers/*.json"))  # diffusers/: diffusion transformers


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


# Configs whose default audit takes over 10 s here (Llama 4 Scout: 10M context x 4; Gemma 3 and 4: several layer
# types at 128K-256K x 4; Qwen3-VL: 256K x 4) or over about 3 s of CPU (issue 52: the 128K-class contexts of
# Llama 3.1, Qwen2 and Qwen2.5-VL, SmolLM3, gpt-oss, Phi-3.5, DeepSeek-V3, Qwen2-VL and Qwen2.5-Coder's YaRN took
# 11-63 s of the default run on a loaded 2-core machine): their default run is in the slow pass (CI runs it); the
# default pass audits them at 8K.  The others keep their default run here.
LONG = {"llama-4-scout-17b-16e-instruct", "gemma-3-4b-it", "gemma-3-1b-it", "gemma-4-31b-it", "qwen3-vl-4b-instruct",
        "qwen2.5-vl-7b-instruct", "qwen2-7b", "llama-3.1-8b", "smollm3-3b", "gpt-oss-20b", "phi-3.5-mini-instruct",
        "deepseek-v3", "qwen2-vl-7b-instruct", "qwen2.5-coder-32b-instruct-yarn"}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in LONG else p for p in CONFIGS],
                         ids=[p.stem for p in CONFIGS])
def test_config_with_defaults_gives_a_bottom_line(path: Path) -> None:
    """`precision-audit config FILE` with no option: exit 0 and a bottom line, for every config the project ships."""
    r = _run("config", str(path), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["summary"], "no bottom line"
    assert {s["verdict"] for s in out["summary"]} <= {"safe", "degraded", "broken"}


@pytest.mark.parametrize("name", sorted(LONG))
def test_long_configs_give_a_bottom_line_at_8k(name: str) -> None:
    """The configs whose default run is slow, in the default pass: `config FILE --length 8K` exits 0 with a bottom
    line (the default run is in the slow pass)."""
    r = _run("config", str(DATA / f"{name}.json"), "--length", "8K", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["summary"] and {s["verdict"] for s in out["summary"]} <= {"safe", "degraded", "broken"}


def _yarn_inv_freq(truncate: bool) -> np.ndarray:
    """gpt-oss' inverse frequencies as transformers computes them, with the given truncate."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    raw = json.loads((DATA / "gpt-oss-20b.json").read_text())
    raw["rope_scaling"] = dict(raw["rope_scaling"], truncate=truncate)
    raw.pop("quantization_config")
    inv, _ = ROPE_INIT_FUNCTIONS["yarn"](transformers.GptOssConfig(**raw), "cpu")
    return inv.double().numpy()


def _wrapped(x: np.ndarray) -> np.ndarray:
    return np.abs((x + np.pi) % (2 * np.pi) - np.pi)


def test_gpt_oss_schedule_mismatch_on_llama_cpp() -> None:
    """llama.cpp rounds YaRN's ramp bounds (ggml_rope_yarn_corr_dims; refereed on the ggml kernel in
    test_stack_ggml.test_yarn_model_reproduces_kernel): it runs gpt-oss with transformers' truncate=True
    frequencies, while the config declares truncate=False.  The audit measures that against the declared
    schedule: at L = 4096 the llama.cpp row's largest rotation error is max over m < 4096 and i of
    |wrap(m (theta_true_i - theta_false_i))| (float64 from transformers' frequencies), up to ggml's float32
    rounding and a float32 cache (< 2e-3 rad here: the worst pair is a low frequency, angle <= 150 rad)."""
    declared, rounded = _yarn_inv_freq(False), _yarn_inv_freq(True)
    differ = np.nonzero(declared != rounded)[0]
    assert differ.tolist() == list(range(9, 18))  # 9 of 32 frequencies, the ramp between the bounds
    assert 0.76 < np.max(np.abs(rounded / declared - 1)[differ]) < 0.77
    # positions D apart: the 0.057 rad at D = 256 and 0.90 rad at D = 4096
    assert abs(_wrapped(256 * (rounded - declared)).max() - 0.0565) < 5e-4
    assert abs(_wrapped(4096 * (rounded - declared)).max() - 0.904) < 1e-3
    expected = _wrapped(np.arange(4096)[:, None] * (rounded - declared)[None, :]).max()

    model = load_config(DATA / "gpt-oss-20b.json")
    rows = {r.recipe: r for r in audit_config(model, [4096], ["float32"], stacks=["llama.cpp-cpu", "vllm"],
                                              positions=False)}
    assert abs(rows["llama.cpp-cpu"].max_rotation_error - expected) < 2e-3
    assert rows["vllm"].max_rotation_error < 1e-3  # vLLM (after vllm#28244) runs the declared schedule
    note, fix = stack_notes(model, ["vllm", "llama.cpp-cpu", "llama.cpp-cuda"])["llama.cpp-cpu"]
    assert "(8, 18)" in note and "8.0928, 17.3980" in note and "#28244" in str(fix)
    assert set(stack_notes(model, ["vllm", "llama.cpp-cpu", "llama.cpp-cuda"])) == {"llama.cpp-cpu", "llama.cpp-cuda"}


def test_gpt_oss_config_names_the_mismatch() -> None:
    r = _run("config", str(DATA / "gpt-oss-20b.json"), "-l", "4K", "--stack", "llama.cpp-cpu", "--stack", "vllm")
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.strip().startswith("llama.cpp CPU"))
    assert "runs another schedule" in line and "truncate=false" in line and "#28244" in line
    assert "runs another schedule" not in next(x for x in r.output.splitlines() if x.strip().startswith("vLLM"))


def test_named_stack_that_cannot_run_the_model_is_a_reason() -> None:
    """--stack tensorrt-llm-kernel on a YaRN model: it is left out with its reason, vLLM is audited, exit 0."""
    path = str(DATA / "qwen2.5-coder-32b-instruct-yarn.json")
    r = _run("config", path, "-l", "4K", "--stack", "tensorrt-llm-kernel", "--stack", "vllm", "--no-positions")
    assert r.exit_code == 0, r.output
    assert "skipped: stack 'tensorrt-llm-kernel' does not run rope type 'yarn'" in r.output
    assert "vLLM, bfloat16" in r.output
    only = _run("config", path, "-l", "4K", "--stack", "tensorrt-llm-kernel")
    assert only.exit_code == 0, only.output
    assert "No stack named runs this model." in only.output and "skipped: stack 'tensorrt-llm-kernel'" in only.output
    bad = _run("config", path, "--stack", "mlxx")
    assert bad.exit_code == 2 and "mlxx" in bad.output  # an unknown name is still a usage error


def test_no_context_length_is_a_note_not_an_error() -> None:
    r = _run("config", str(DATA / "bloom-7b1.json"), "-r", "fp32")
    assert r.exit_code == 0, r.output
    assert "note: the config declares no context length" in r.output
    lengths = {int(x.split()[1]) for x in r.output.splitlines() if x.startswith("bfloat16")}
    assert lengths == {FALLBACK_CONTEXT, 2 * FALLBACK_CONTEXT, 4 * FALLBACK_CONTEXT}


def test_mrope_is_default_rope_for_text_positions() -> None:
    """Qwen2-VL's rope fields (rope_scaling {"type": "mrope", "mrope_section": [16, 24, 24]}, rope_theta 1e6,
    hidden 3584 / 28 heads): transformers maps mrope to default; so does the parser, and the frequencies agree
    with transformers' Qwen2-VL rotary module to float32 rounding."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    text = dict(hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768, rope_theta=1e6,
                rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
    model = load_config_dict({"model_type": "qwen2_vl", **text})
    s = model.schedule
    assert s.scaling == "default" and s.head_dim == 128
    ref = Qwen2VLRotaryEmbedding(transformers.Qwen2VLConfig(text_config=text).get_text_config()).inv_freq
    assert np.allclose(s.inv_freq(), ref.double().numpy(), rtol=2.0**-22, atol=0)
    assert any("mrope_section" in n for n in model.notes)


def test_stack_difference_measures_the_schedule_mismatch() -> None:
    """precision_audit.rope.compare against the independent float64 figure above: llama.cpp's stored rotation
    against transformers' on gpt-oss at L = 4096 is the ramp mismatch, max over m < 4096 of
    |wrap(m (theta_true - theta_false))| = 0.904 rad, up to both paths' bfloat16 cache rounding (2 x 0.0028 rad at
    the YaRN attention factor's radius, cache_rounding_bound) and ggml's float32 angles."""
    from precision_audit.rope import cache_rounding_bound, stack
    from precision_audit.rope.compare import stack_difference

    declared, rounded = _yarn_inv_freq(False), _yarn_inv_freq(True)
    expected = _wrapped(np.arange(4096)[:, None] * (rounded - declared)[None, :]).max()
    s = load_config(DATA / "gpt-oss-20b.json").schedule
    (row,) = stack_difference(s, stack("llama.cpp-cpu", "bf16", s), stack("transformers", "bf16", s), [4096])
    slack = 2 * cache_rounding_bound("bfloat16", s.cos_sin_scale) + 2e-3
    assert abs(row.max_rotation_difference - expected) <= slack
    (same,) = stack_difference(s, stack("vllm", "bf16", s), stack("sglang", "bf16", s), [4096])
    # the same float32 cos/sin, once stored in bfloat16 and once kept: at most bfloat16's rounding apart
    assert 0 < same.max_rotation_difference <= cache_rounding_bound("bfloat16", s.cos_sin_scale)


def test_trained_on_compares_serving_stacks_with_the_training_one() -> None:
    path = str(DATA / "llama-3.1-8b.json")
    r = _run("config", path, "-l", "4K", "--stack", "vllm", "--stack", "openvino", "--trained-on", "torchtune",
             "--json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.output)["trained_on"]
    by = {s["path"]: s for s in t["summary"]}
    assert t["stack"] == "torchtune" and set(by) == {"vllm", "openvino"}
    assert by["vllm"]["verdict"] == "safe" and by["openvino"]["verdict"] == "broken"
    assert all(row["reference"] == "torchtune" for row in t["results"])
    # at 4K: the refusal does not depend on the length (the default length audits 128K first, 10 s of CPU)
    bad = _run("config", str(DATA / "gpt-oss-20b.json"), "-l", "4K", "--trained-on", "torchtune")
    assert bad.exit_code == 2 and "does not run rope type 'yarn'" in bad.output
    text = _run("config", path, "-l", "4K", "--stack", "vllm", "--stack", "torchtune").output
    assert " serving stacks:" in text and " training stacks:" in text
