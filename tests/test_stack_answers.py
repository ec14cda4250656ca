"""The bottom line outside `config`: `report --model`, `hf-rope`, `attention --stack` and testing's ``stack=``.

Expected verdicts are derived here, not read from the tool:

* a float32 inverse frequency rounded to a 16-bit format (``model.to(dtype)`` casting the ``inv_freq``
  buffer: the transformers-cast stack, a cast transformers module) turns pair i's angle at position m
  into ``m * fl(theta_i)``: its error ``m * |theta_i - fl(theta_i)|`` grows linearly in m by steps far
  below pi/2, so the wrapped error reaches pi/2 (broken) before position L - 1 exactly when
  ``(L - 1) * max_i |theta_i - fl(theta_i)| >= pi/2`` (:func:`cast_error`, with the exact frequencies of
  the schedule, tested against transformers' ROPE_INIT_FUNCTIONS in test_schedules.py).  The
  storing of cos/sin moves that by at most the cache bound, so only margins well above it are used;
* a float32 path (transformers as built, vLLM) errs by at most the cache format's rounding bound plus
  ``(L - 1) * max_i theta_i`` times 8 float32 ulps (the formula's pow, reciprocal and scaling, and the
  product, each within an ulp or two) plus one ulp of cos/sin: below 8 cache bounds, hence safe, while
  that sum is (:func:`fp32_bound`);
* ALiBi biases ``slope * j`` stored in bfloat16 collide once the spacing of bfloat16 above the
  largest bias exceeds twice the slope (two neighbours then round to one value); float32 biases are
  correctly rounded products: within half an ulp, safe;
* llama.cpp's attention logits are refereed by the real ggml rope kernel (through ``ggml-python``):
  logits built from the kernel's own cos/sin agree with the tool's row within the bound that one ulp of
  cos/sin per pair allows (derived in the test).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner
from test_config_bottomline import hub_cache, write_llama31_gguf

from precision_audit.cli import main
from precision_audit.config import load_model, rope_verdict
from precision_audit.rope import STACKS, RopeSchedule, cache_rounding_bound

DATA = Path(__file__).parent / "data"
LLAMA = str(DATA / "llama-3.1-8b.json")
FMT = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
KEEP_FP32 = "call precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype)"


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def cast_error(schedule: RopeSchedule, dtype: str, length: int) -> float:
    """(L - 1) * max_i |theta_i - fl(theta_i)|: the angle error of a downcast inv_freq buffer at L - 1 (unwrapped).

    The buffer holds the float32 formula rounded to ``dtype``; the float32 value is within a few float32 ulps of
    the exact one, so both round to the same 16-bit value unless one sits at a 16-bit midpoint: checked.
    """
    theta = schedule.inv_freq()
    direct = theta.astype(FMT[dtype]).astype(np.float64)
    via32 = theta.astype(np.float32).astype(FMT[dtype]).astype(np.float64)
    assert np.array_equal(direct, via32)
    return (length - 1) * float(np.abs(theta - direct).max())


def fp32_bound(schedule: RopeSchedule, dtype: str, length: int) -> float:
    """An upper bound of a float32 path's max rotation error at ``length`` (see the module docstring)."""
    theta = schedule.inv_freq()
    return cache_rounding_bound(dtype, schedule.cos_sin_scale) + (length - 1) * float(theta.max()) * 2.0**-21 \
        + 2.0**-23


def predicted_cast(schedule: RopeSchedule, dtype: str, length: int) -> str:
    """The verdict of a downcast buffer at ``length`` from the closed form: positions D apart rotate
    D * |theta_i - fl(theta_i)| off in pair i (the pairwise error the verdict judges, wrapped to [0, pi]), at the
    distances a row of that length carries, up to both positions' cache rounding (2 bounds) and their float32
    angle rounding (``fp32_bound``).  Broken needs a quarter turn in a pair that resolves D (D * theta_i <= 2 pi *
    4, precision_audit.verdicts); degraded pi/8 in any pair.  Where that leaves no margin over a threshold, the
    test must pick another length."""
    from precision_audit.rope import row_distances

    slack = 2 * fp32_bound(schedule, dtype, length)
    cast_error(schedule, dtype, 2)  # checks the buffer rounds the same through float32
    theta = schedule.inv_freq()
    delta = np.abs(theta - theta.astype(FMT[dtype]).astype(np.float64))
    ds = np.array(row_distances(length), dtype=np.float64)[:, None]
    errs = np.remainder(ds * delta, 2 * math.pi)
    errs = np.minimum(errs, 2 * math.pi - errs)  # every frequency's drift, wrapped
    resolves = ds * theta <= 2 * math.pi * 4
    lost = float(np.where(resolves, errs, 0.0).max())
    if lost >= math.pi / 2 + slack:
        return "broken"  # a pair that resolves the distance is a quarter turn off
    assert lost < math.pi / 2 - slack, (length, lost)  # else no margin: pick other lengths
    top = float(errs.max())
    assert abs(top - math.pi / 8) > slack, (length, top)  # no margin at pi/8: pick other lengths
    return "degraded" if top >= math.pi / 8 else "safe"


# --------------------------------------------------------------------------- report --model


@pytest.fixture(scope="module")
def llama_report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rep") / "r"
    res = run("report", "--model", LLAMA, "--max-length", "256", "--out", str(out), "-q")
    assert res.exit_code == 0, res.output
    return out


def test_report_opens_with_the_bottom_line_of_config(llama_report: Path):
    md = (llama_report / "report.md").read_text()
    assert md.index("## Bottom line") < md.index("## Verdict") < md.index("## Model")
    doc = json.loads((llama_report / "results.json").read_text())
    summary = doc["results"]["summary"]
    # the same sentences as `config` at the report's lengths (the model's context as given, 2x, 4x)
    cfg = json.loads(run("config", LLAMA, "-l", "256", "-l", "512", "-l", "1K", "--json").output)
    assert summary == cfg["summary"]
    block = md.split("## Bottom line")[1].split("## Verdict")[0]
    bullets = [ln[2:] for ln in block.splitlines() if ln.startswith("- ")]
    by = {s["path"]: s for s in summary}
    # every stack that runs llama3, then the others left out with their reason; not the stacks that run only
    # under a setting (--matmul-precision high: the TF32 GEMM paths)
    plain = {n: row for n, row in STACKS.items() if row.setting is None}
    runs = [n for n, row in plain.items() if "llama3" in row.rope_types]
    assert list(by) == runs
    assert len(bullets) == len(summary) + len(doc["results"]["skipped"]) == len(plain)
    assert doc["settings"]["stacks"] == list(by)
    s = load_model(LLAMA).schedule
    # transformers as built: a float32 path, within the bound through 1K
    assert fp32_bound(s, "bfloat16", 1024) < 8 * cache_rounding_bound("bfloat16")
    assert "transformers as built, bfloat16: safe to 1K" in bullets
    # after model.to(bfloat16): positions 255 apart already 0.46 rad off (>= pi/8), 1023 apart 1.8 rad in fast
    # pairs (>= pi/2, but never in a pair that resolves the distance): degraded from 256 on (closed form)
    assert [predicted_cast(s, "bfloat16", n) for n in (256, 512, 1024)] == ["degraded", "degraded", "degraded"]
    cast = by["transformers-cast"]
    assert (cast["degraded_from"], cast["broken_from"], cast["fix"]) == (256, None, KEEP_FP32)
    line = next(b for b in bullets if b.startswith("transformers after model.to(dtype)"))
    assert line.startswith("transformers after model.to(dtype), bfloat16: degraded from 256 (positions ")
    assert "in the pairs that resolve them" in line and "broken" not in line and line.endswith(KEEP_FP32)
    html = (llama_report / "report.html").read_text()
    assert html.index("<h2>Bottom line</h2>") < html.index("<h2>Verdict</h2>") and "<li>transformers as built" in html


def test_report_stack_option_and_config_alias(tmp_path: Path):
    res = run("report", "--config", LLAMA, "--stack", "transformers-cast", "--max-length", "256",
              "--out", str(tmp_path / "r"), "-q")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert [x["path"] for x in doc["results"]["summary"]] == ["transformers-cast"]
    assert {r["stack"] for r in doc["results"]["bottom_line_rows"]} == {"transformers-cast"}
    assert "| stack | transformers-cast |" in (tmp_path / "r" / "report.md").read_text()


def test_report_gguf_defaults_to_llama_cpp_and_hub_id(tmp_path: Path, monkeypatch):
    path = write_llama31_gguf(tmp_path / "llama31.gguf")
    res = run("report", "--model", str(path), "--max-length", "256", "--out", str(tmp_path / "g"), "-q")
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "g" / "results.json").read_text())
    assert [x["path"] for x in doc["results"]["summary"]] == ["llama.cpp-cpu", "llama.cpp-cuda"]
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache(tmp_path)))
    res = run("report", "--model", "meta-llama/Llama-3.1-8B", "--stack", "vllm", "--max-length", "256",
              "--out", str(tmp_path / "h"), "-q")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "h" / "report.md").read_text().startswith("# precision_audit: meta-llama/Llama-3.1-8B")


def test_report_alibi_bottom_line(tmp_path: Path):
    res = run("report", "--model", str(DATA / "bloom-7b1.json"), "--max-length", "1K", "--out", str(tmp_path / "b"),
              "-q")
    assert res.exit_code == 0, res.output
    by = {x["path"]: x for x in json.loads((tmp_path / "b" / "results.json").read_text())["results"]["summary"]}
    # Bloom's first head has slope 2**-0.25; its biases up to slope * (1K - 1) = 860 lie where bfloat16's spacing
    # (4 in [512, 1024)) exceeds twice the slope: neighbours collide at every length audited
    slope = 2.0**-0.25
    assert 4 >= 2 * slope and slope * 1023 > 512
    for name in ("lowp", "cast-output", "relative-cast"):
        assert by[name]["broken_from"] == 1024 and by[name]["safe_to"] is None, name
    assert by["fp32"]["verdict"] == "safe" and by["fp32"]["safe_to"] == 4096


@pytest.mark.parametrize("args, message", [
    (["--stack", "vllm"], "give MODEL or --model-type"),
    (["--model", str(DATA / "bloom-7b1.json"), "--stack", "vllm"], "uses ALiBi"),
    (["--model", LLAMA, "--model-type", "llama"], "not both"),
    (["--model", "/no/such/config.json"], "cannot read"),
])
def test_report_usage_errors(args, message, tmp_path: Path):
    res = run("report", *args, "--out", str(tmp_path / "r"))
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- hf-rope


def test_hf_rope_verdicts_bottom_line_and_fail_on():
    pytest.importorskip("transformers")
    s = RopeSchedule(head_dim=128, base=10000.0)  # transformers' default LlamaConfig (rope_theta 1e4, 4096 / 32)
    assert predicted_cast(s, "bfloat16", 8192) == "degraded"
    res = run("hf-rope", "-m", "llama", "-l", "8K", "--cast-module")
    assert res.exit_code == 0, res.output
    head = res.output.splitlines()
    assert head[0].startswith("Bottom line")
    assert head[1].strip() == f"LlamaRotaryEmbedding after module.to(dtype), bfloat16: degraded from 8K -> {KEEP_FP32}"
    assert res.output.index("Bottom line") < res.output.index("model type")
    assert run("hf-rope", "-m", "llama", "-l", "8K", "--cast-module", "--fail-on", "broken").exit_code == 0
    res = run("hf-rope", "-m", "llama", "-l", "8K", "--cast-module", "--fail-on", "degraded")
    assert res.exit_code == 1
    assert "fail-on degraded: LlamaRotaryEmbedding after module.to(dtype): degraded at 8K in bfloat16" in res.stderr
    # as built: float32 frequencies and angles, within the bound at 8K: safe, and --fail-on passes
    assert fp32_bound(s, "bfloat16", 8192) < 8 * cache_rounding_bound("bfloat16")
    res = run("hf-rope", "-m", "llama", "-l", "8K", "--fail-on", "degraded", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (row,) = doc["results"]
    assert row["verdict"] == "safe" and row["cache_bound"] == cache_rounding_bound("bfloat16")
    assert row["verdict"] == rope_verdict(row["max_rotation_error"], row["colliding_positions"],
                                         pair_errors=[(p["distance"], p["max_rotation_error"])
                                                      for p in row["pair_errors"]])
    (summ,) = doc["summary"]
    assert (summ["label"], summ["verdict"], summ["safe_to"]) == ("LlamaRotaryEmbedding as built", "safe", 8192)


def test_hf_rope_float16_cast_is_degraded_from_2k():
    pytest.importorskip("transformers")
    s = RopeSchedule(head_dim=128, base=10000.0)
    # float16's 11 bits: positions D apart drift D * 2.4e-4 rad: 0.50 rad 2047 apart (degraded), 1.98 rad 8K apart,
    # in fast pairs only (degraded: a pair that resolves 8K is off by 8 pi * 2**-11 at most)
    assert [predicted_cast(s, "float16", n) for n in (2048, 16384)] == ["degraded", "degraded"]
    doc = json.loads(run("hf-rope", "-m", "llama", "-l", "2K", "-l", "16K", "-d", "fp16", "--cast-module",
                         "--json").output)
    assert [r["verdict"] for r in doc["results"]] == ["degraded", "degraded"]
    (summ,) = doc["summary"]
    assert (summ["degraded_from"], summ["broken_from"], summ["fix"]) == (2048, None, KEEP_FP32)


# --------------------------------------------------------------------------- attention --stack


LLAMA3 = ('{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, '
          '"original_max_position_embeddings": 8192, "rope_theta": 500000.0}')


def test_attention_stacks_rows_and_modes():
    res = run("attention", "-l", "8K", "--distance", "1", "--distance", "4096", "--stack", "transformers",
              "--stack", "vllm", "--stack", "llama.cpp-cpu", "-r", "fp32", "--rope-parameters", LLAMA3, "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["recipe"], r["stack"]) for r in rows[:4]] == [
        ("fp32", None), ("transformers", "transformers"), ("vllm", "vllm"), ("llama.cpp-cpu", "llama.cpp-cpu")]
    # each stack rotates in its own apply mode (the stacks' sources: vLLM's and ggml's kernels rotate in float)
    assert {r["recipe"]: r["mode"] for r in rows} == {"fp32": "elementwise", "transformers": "elementwise",
                                                      "vllm": "fp32-then-cast", "llama.cpp-cpu": "fp32-then-cast"}
    # transformers as built is the fp32 recipe (float32 until cos/sin, rotation in the dtype): the same logits
    by = {(r["recipe"], r["distance"]): r for r in rows}
    for d in (1, 4096):
        ours, fp32 = dict(by["transformers", d]), dict(by["fp32", d])
        for k in ("recipe", "stack"):
            ours.pop(k), fp32.pop(k)
        assert ours == fp32
    # without --recipe only the stacks run; a stack that does not run the rope type exits 2
    rows = json.loads(run("attention", "-l", "4K", "--distance", "1", "--stack", "vllm", "--json").output)["results"]
    assert [r["recipe"] for r in rows] == ["vllm"]
    res = run("attention", "-l", "4K", "--stack", "mlx", "--scaling", "dynamic", "--factor", "4")
    assert res.exit_code == 2 and "stack 'mlx' does not run rope type 'dynamic'" in res.output
    table = run("attention", "-l", "4K", "--distance", "1", "--stack", "all").output
    assert "mode" in table.splitlines()[0] and "each recipe's own: the mode column" in table


def test_attention_llama_cpp_refereed_by_the_real_ggml_kernel():
    """llama.cpp CPU's logits: the tool's row against logits built from ggml's own cos/sin (its rope op).

    Both rotate the same float64 q/k (``apply="float64"``) by float32 cos/sin, so they differ only where the
    kernel's cosf/sinf differ from the correctly rounded values, by at most one float32 ulp (<= 2**-24 for values
    in [-1, 1]).  A rotated pair then moves by at most (|q1| + |q2|) 2**-24 per coordinate, and the logit by at
    most 4 * 2**-24 * sum_i (|q1| + |q2|)(|k1| + |k2|) (both positions, both coordinates).
    """
    from referees import need
    from referees._ggml import ggml_rope_angles

    from precision_audit.rope.attention import attention_errors
    from precision_audit.rope import preset, stack

    need("ggml")
    s, L, pairs, shifts, seed, nf = RopeSchedule(head_dim=128, base=10000.0), 32768, 4, 256, 0, 64
    rows = attention_errors(s, [stack("llama.cpp-cpu", "float32", s), preset("fp32", "float32")], L,
                            [1, 4096, 30000], pairs=pairs, shifts=shifts, seed=seed, apply="float64")
    rng = np.random.default_rng(seed)  # the q/k attention_errors draws (its documented seed use)
    q, k = rng.standard_normal((pairs, 128)), rng.standard_normal((pairs, 128))
    bound = 4 * 2.0**-24 * ((np.abs(q[:, :nf]) + np.abs(q[:, nf:])) * (np.abs(k[:, :nf]) + np.abs(k[:, nf:]))).sum(1)
    theta = s.inv_freq()
    for dist in (1, 4096, 30000):
        m = np.unique(np.linspace(dist, L - 1, num=min(shifts, L - dist)).round().astype(np.int64))
        cm, sm = ggml_rope_angles(m, 128, 10000.0)
        cn, sn = ggml_rope_angles(m - dist, 128, 10000.0)
        q1, q2, k1, k2 = q[:, None, :nf], q[:, None, nf:], k[:, None, :nf], k[:, None, nf:]
        score = ((q1 * cm - q2 * sm) * (k1 * cn - k2 * sn) + (q2 * cm + q1 * sm) * (k2 * cn + k1 * sn)).sum(2)
        phi = np.mod(dist * theta, 2 * math.pi)  # dist * theta_i in float64: ~1e-12 rad off, far below the bound
        exact = (q[:, :nf] * k[:, :nf] + q[:, nf:] * k[:, nf:]) @ np.cos(phi) \
            - (q[:, nf:] * k[:, :nf] - q[:, :nf] * k[:, nf:]) @ np.sin(phi)
        err = np.abs(score - exact[:, None])
        ours = {r.recipe: r for r in rows if r.distance == dist}
        assert abs(ours["llama.cpp-cpu"].max_logit_error - err.max()) <= bound.max()
        assert abs(ours["llama.cpp-cpu"].mean_logit_error - err.mean()) <= bound.max()
        # and its angles are not position * inv_freq: the product path's logits are clearly apart
        assert abs(ours["fp32"].max_logit_error - err.max()) > 10 * bound.max()


# --------------------------------------------------------------------------- precision_audit.testing stack=


def test_assert_rope_and_assert_config_judge_a_stack():
    from precision_audit.testing import assert_config, assert_rope

    s = load_model(LLAMA).schedule
    assert fp32_bound(s, "bfloat16", 32768) < 8 * cache_rounding_bound("bfloat16")
    assert_rope(s, length=32768, stack="transformers")
    assert_rope(s, length=32768, stack="vllm")
    assert predicted_cast(s, "bfloat16", 32768) == "degraded"
    with pytest.raises(AssertionError) as e:
        assert_rope(s, length=32768, stack="transformers-cast")
    msg = str(e.value)
    assert msg.startswith("RoPE stack transformers-cast fails at length 32768 in bfloat16")
    assert msg.splitlines()[-1] == f"Fix: {KEEP_FP32}." and "degraded" in msg
    assert_config(LLAMA, length=32768, stack="transformers")
    with pytest.raises(AssertionError, match="fails on stack transformers-cast in bfloat16") as e:
        assert_config(LLAMA, length=32768, stack="transformers-cast")
    assert str(e.value).splitlines()[-1] == f"Fix: {KEEP_FP32}."
    with pytest.raises(ValueError, match="stack 'tensorrt-llm-kernel' does not run rope type 'yarn'"):
        assert_config(DATA / "qwen2.5-coder-32b-instruct-yarn.json", length=8192, stack="tensorrt-llm-kernel")
    with pytest.raises(ValueError, match="stacks model RoPE code paths"):
        assert_config(DATA / "bloom-7b1.json", length=2048, stack="vllm")


def test_assert_config_reads_a_gguf_file_on_the_llama_cpp_stack(tmp_path: Path):
    from precision_audit.testing import assert_config

    path = write_llama31_gguf(tmp_path / "llama31.gguf")
    assert_config(path, length=8192, stack="llama.cpp-cpu")
    with pytest.raises(AssertionError, match="fails on stack transformers-cast"):
        assert_config(path, length=8192, stack="transformers-cast")
