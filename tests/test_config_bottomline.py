"""`precision-audit config`: the bottom line per stack, --fail-on, GGUF files and Hub ids.

Expected verdicts come from closed forms already tested elsewhere: a bf16-cast inv_freq buffer
(transformers-cast) loses the phase (error >= pi/2) by 32K for base 5e5 (tests/test_rope.py); the
fp32 paths stay within 8 cache bounds through 128K for Llama 3.1 (test_stacks.py, against the real
kernels); the GGUF file holds the Llama 3.1 config's own numbers (tests/test_gguf.py).  Nothing is
downloaded: Hub ids resolve through a temporary offline cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import load_model

from referees import need
from referees._ggml_model import converter_llama3_factors

DATA = Path(__file__).parent / "data"
LLAMA = str(DATA / "llama-3.1-8b.json")


def run(*args: str):
    return CliRunner().invoke(main, ["config", *args])


def test_bottom_line_opens_the_output_and_names_the_fix():
    res = run(LLAMA, "-l", "32K")
    assert res.exit_code == 0, res.output
    head = res.output.split("\n\n")[1].splitlines()
    assert head[0].startswith("Bottom line")
    lines = {ln.strip().split(",")[0]: ln.strip() for ln in head[1:]}
    assert lines["transformers as built"] == "transformers as built, bfloat16: safe to 32K"
    # what it costs: a downcast inv_freq keeps local order and the phase of every pair that resolves a distance;
    # only fast pairs (many turns across it) are off by radians: degraded, not broken (precision_audit.verdicts)
    cast = lines["transformers after model.to(dtype)"]
    assert cast.startswith("transformers after model.to(dtype), bfloat16: degraded from 32K (positions ")
    assert "apart off by up to" in cast and "in the pairs that resolve them" in cast
    assert cast.endswith("-> call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)")
    assert set(lines) >= {"vLLM", "llama.cpp CPU", "llama.cpp CUDA", "MLX (Metal)", "MLX (CPU)"}
    # the summary comes before the table
    assert res.output.index("Bottom line") < res.output.index("component")


def test_json_carries_the_summary_as_data():
    doc = json.loads(run(LLAMA, "-l", "32K", "--json").output)
    by = {s["path"]: s for s in doc["summary"]}
    assert by["transformers"]["verdict"] == "safe" and by["transformers"]["safe_to"] == 32768
    cast = by["transformers-cast"]
    assert (cast["verdict"], cast["degraded_from"], cast["broken_from"]) == ("degraded", 32768, None)
    assert "keep_rotary_fp32" in cast["fix"]
    assert {r["stack"] for r in doc["results"] if r["component"] == "rope"} == set(by)


def test_fail_on_judges_what_was_selected():
    # default: transformers as built, which is safe here
    assert run(LLAMA, "-l", "32K", "--fail-on", "broken").exit_code == 0
    # a named stack that is degraded: exit 0 for --fail-on broken, 1 for --fail-on degraded, each failing row and
    # why on stderr
    res = CliRunner().invoke(main, ["config", LLAMA, "-l", "32K", "--stack", "transformers-cast",
                                    "--fail-on", "broken"])
    assert res.exit_code == 0
    res = CliRunner().invoke(main, ["config", LLAMA, "-l", "32K", "--stack", "transformers-cast",
                                    "--fail-on", "degraded"])
    assert res.exit_code == 1
    assert "fail-on degraded: transformers-cast: degraded at 32K in bfloat16" in res.output
    # recipes named with -r are judged too (the issue: -r lowp --fail-on broken exited 0)
    res = run(LLAMA, "-l", "32K", "-r", "lowp", "--fail-on", "broken")
    assert res.exit_code == 1 and "fail-on broken: lowp: broken at 32K" in res.output
    assert "positions share the previous one's rotation" in res.output


def test_stack_on_an_alibi_model_is_a_usage_error():
    res = run(str(DATA / "bloom-7b1.json"), "-l", "2K", "--stack", "vllm")
    assert res.exit_code == 2 and "stacks model RoPE code paths" in res.output


def test_stack_all_skips_what_a_stack_does_not_run():
    res = run(str(DATA / "gemma-4-31b-it.json"), "-l", "2K")
    assert res.exit_code == 0, res.output
    assert "skipped: stack 'vllm' does not run rope type 'proportional'" in res.output
    res = run(str(DATA / "gemma-4-31b-it.json"), "-l", "2K", "--stack", "vllm", "--stack", "transformers")
    assert res.exit_code == 0, res.output  # a stack named that cannot run the model is a reason, not an abort
    assert "skipped: stack 'vllm' does not run rope type 'proportional'" in res.output
    assert "transformers as built, bfloat16: safe to 2K" in res.output


def write_llama31_gguf(path: Path) -> Path:
    """A GGUF file holding Llama 3.1's rope metadata and rope_freqs (as llama.cpp's converter writes them)."""
    gguf = need("gguf")
    cfg = json.loads(Path(LLAMA).read_text())
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_rope_dimension_count(128)
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_tensor("rope_freqs.weight", np.asarray(converter_llama3_factors(cfg), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_file_audits_the_llama_cpp_stacks(tmp_path):
    path = write_llama31_gguf(tmp_path / "llama31.gguf")
    m = load_model(path)
    assert m.origin == "gguf" and m.rope == load_model(LLAMA).rope  # the same schedule as the config.json
    doc = json.loads(run(str(path), "-l", "8K", "--json").output)
    assert [s["path"] for s in doc["summary"]] == ["llama.cpp-cpu", "llama.cpp-cuda"]
    assert run(str(path), "-l", "8K", "--fail-on", "degraded").exit_code == 0  # judged: llama.cpp CPU


def hub_cache(tmp_path: Path) -> Path:
    """A Hub cache in ``tmp_path`` holding meta-llama/Llama-3.1-8B's config.json (nothing downloaded)."""
    root = tmp_path / "hub"
    snap = root / "models--meta-llama--Llama-3.1-8B" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    (root / "models--meta-llama--Llama-3.1-8B" / "refs").mkdir()
    (root / "models--meta-llama--Llama-3.1-8B" / "refs" / "main").write_text("0" * 40)
    shutil.copy(LLAMA, snap / "config.json")
    return root


def test_hub_id_from_the_local_cache_offline(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path)))
    res = run("meta-llama/Llama-3.1-8B", "-l", "8K")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("meta-llama/Llama-3.1-8B (model_type llama)")
    res = run("Qwen/Qwen3-8B", "-l", "8K")
    assert res.exit_code == 2
    assert "Qwen/Qwen3-8B: no such file, and as a Hub id: HF_HUB_OFFLINE is set" in res.output
