"""The stack x rope-type holes closed in issue 29 (deliverable 3): vLLM's LongRoPE and dynamic NTK, llama.cpp's
LongRoPE, MLX's YaRN / LongRoPE / proportional.

Each path is checked against an independent model written here from the cited source (an mpmath evaluation of
the stack's float32 operations, each rounded once), or against transformers' own ``ROPE_INIT_FUNCTIONS`` (the
declared schedule) for the mismatch notes' figures.  The real kernels (ggml's rope op, ``mx.fast.rope``) referee
the same paths in tests/test_stacks.py (cases ``longrope-phi3.5``, ``yarn-*``, ``proportional-gemma4``).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import mpmath
import numpy as np
import pytest
from click.testing import CliRunner
from referees import _ggml_model as ggml_model  # tests/ helpers: the referees (kernels and models)
from referees import _mlx_model as mlx_model
from referees import need
from referees._ggml import ggml_rope_angles

from precision_audit.cli import main
from precision_audit.config import load_config
from precision_audit.rope import STACKS, RopeSchedule, audit, preset, run_recipe, stack
from precision_audit.rope import formulas

DATA = Path(__file__).parent / "data"
PHI_CFG = json.loads((DATA / "phi-3.5-mini-instruct.json").read_text())
PHI = load_config(DATA / "phi-3.5-mini-instruct.json").schedule
L0 = PHI.original_max_position_embeddings


def _cr32(x: Any) -> float:
    """An mpmath value rounded to float32 (24 significant bits, nearest even; normal range)."""
    with mpmath.workprec(24):
        return float(+mpmath.mpf(x))


def _vllm_longrope_inv_freq(factors: list[float], base: float, d: int) -> list[float]:
    """vLLM's ``Phi3LongRoPEScaledRotaryEmbedding._compute_inv_freq`` in float32, every op rounded once:
    ``1.0 / (fl32(factors) * fl32(base) ** fl32(arange(0, d, 2) / d))``."""
    with mpmath.workprec(200):
        b = mpmath.mpf(_cr32(base))
        powers = [_cr32(b ** mpmath.mpf(_cr32(mpmath.mpf(2 * i) / d))) for i in range(len(factors))]
        return [_cr32(1 / mpmath.mpf(_cr32(mpmath.mpf(_cr32(f)) * p))) for f, p in zip(factors, powers)]


def _tf_longrope(seq_len: int) -> tuple[np.ndarray, float]:
    """transformers' LongRoPE init function on Phi-3.5's config (the declared schedule)."""
    from transformers import Phi3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = Phi3Config(**{k: v for k, v in PHI_CFG.items() if k not in ("architectures", "auto_map")})
        inv, factor = ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu", seq_len=seq_len)
    return inv.double().numpy(), float(factor)


# --------------------------------------------------------------------------- vLLM: LongRoPE


@pytest.mark.parametrize("n", [1024, 4096, 32768])
def test_vllm_longrope_runs_the_long_factors_at_every_length(n: int) -> None:
    """max_model_len (default: Phi-3.5's 131072) > L0: vLLM indexes its long cache at every position, so every
    pass, short or long, runs the long factors: the stack's inverse frequencies equal the mpmath model of
    vLLM's float32 ``_compute_inv_freq`` on ``long_factor`` bit for bit."""
    want = _vllm_longrope_inv_freq(PHI_CFG["rope_scaling"]["long_factor"], PHI.base, PHI.rotary)
    st = run_recipe(stack("vllm", "bfloat16", PHI), PHI, [0, n - 1], seq_len=n)
    assert st["inv_freq"].tolist() == want
    # the declared schedule (transformers, a pass of n positions) runs the short factors up to L0: the stack
    # differs there only (torch's float32 pow is faithful: a few ulps)
    declared, _ = _tf_longrope(n)
    assert (n > L0) == bool(np.allclose(st["inv_freq"], declared, rtol=1e-6))


def test_vllm_longrope_mscale_is_the_declared_attention_factor() -> None:
    """vLLM's ``scaling_factor = sqrt(1 + ln(M/L0) / ln L0)`` (M = max_position_embeddings, float64) is the
    attention factor transformers applies for this config: the stack's cache carries the declared scale."""
    M = PHI_CFG["max_position_embeddings"]
    vllm_mscale = math.sqrt(1 + math.log(M / L0) / math.log(L0))
    _, tf_factor = _tf_longrope(L0 + 1)
    assert vllm_mscale == pytest.approx(tf_factor, rel=1e-15) and PHI.cos_sin_scale == pytest.approx(tf_factor)


def _note_figures(note: str) -> tuple[float, float]:
    m = re.search(r"up to ([\d.]+)% apart, ([\d.e+-]+) rad at position (\d+)", note)
    assert m, note
    assert int(m.group(3)) == L0 - 1
    return float(m.group(1)) / 100, float(m.group(2))


_LONG = "uses the long factors at every length"


@pytest.mark.parametrize("name,who", [("vllm", f"vLLM {_LONG} (max_model_len > 4096)"),
                                      ("llama.cpp-cpu", f"llama.cpp {_LONG} (n_ctx > 4096)"),
                                      ("llama.cpp-cuda", f"llama.cpp {_LONG} (n_ctx > 4096)"),
                                      ("mlx", f"mlx-lm's SuScaledRoPE {_LONG}:"),
                                      ("mlx-cpu", f"mlx-lm's SuScaledRoPE {_LONG}:")])
def test_longrope_note_figures_from_transformers(name: str, who: str) -> None:
    """The note's figures against transformers' own LongRoPE frequencies (short: a pass of L0 positions; long:
    L0 + 1): the largest relative gap of the two sets and the largest angle gap at position L0 - 1.  The note
    prints 3 digits (1 decimal of a percent); transformers' float32 values are within 1e-6 of the float64 ones."""
    note = STACKS[name].runs_other_schedule(PHI)
    assert note is not None and note.startswith(who), note
    short, _ = _tf_longrope(L0)
    long, _ = _tf_longrope(L0 + 1)
    rel, rad = _note_figures(note)
    assert rel == pytest.approx(float(np.max(np.abs(long / short - 1))), abs=0.0006)
    assert rad == pytest.approx(float(np.max(np.abs(long - short))) * (L0 - 1), rel=0.006)


def test_longrope_fixes_name_the_setting() -> None:
    assert "--max-model-len <= L0" in STACKS["vllm"].mismatch_fix
    assert "-c <= L0" in STACKS["llama.cpp-cpu"].mismatch_fix and "-c <= L0" in STACKS["llama.cpp-cuda"].mismatch_fix
    assert "no switch" in STACKS["mlx"].mismatch_fix


def test_longrope_mismatch_is_measured_below_l0_only() -> None:
    """The audit measures each stack against the declared schedule: up to L0 the long factors are another
    schedule (phase lost: max rotation error near pi), above L0 both run the long factors and vLLM's row is the
    fp32 preset's (the same float32 formula, refereed through transformers' modules)."""
    v, p = stack("vllm", "bfloat16", PHI), preset("fp32", "bfloat16")
    rows = audit(PHI, [v, p], [L0, 2 * L0])
    by = {(r.recipe, r.length): r for r in rows}
    assert by["vllm", L0].max_rotation_error > 3.0 > 0.01 > by["fp32", L0].max_rotation_error
    assert by["vllm", 2 * L0].max_rotation_error == by["fp32", 2 * L0].max_rotation_error
    assert by["vllm", 2 * L0].mean_rotation_error == by["fp32", 2 * L0].mean_rotation_error


def test_vllm_short_factors_when_max_model_len_fits() -> None:
    """factor <= 1 (max_position_embeddings <= L0: max_model_len cannot exceed L0): vLLM takes the short
    factors, as the declared schedule does; no override, no note."""
    s = replace(PHI, factor=1.0)
    assert stack("vllm", "bfloat16", s).overrides == () and STACKS["vllm"].runs_other_schedule(s) is None


# --------------------------------------------------------------------------- vLLM: dynamic NTK

DYN = [RopeSchedule(head_dim=d, scaling="dynamic", factor=f, original_max_position_embeddings=m, base=b)
       for d, f, m, b in [(128, 2.0, 4096, 10000.0), (128, 4.0, 2048, 10000.0), (64, 1.5, 4096, 500000.0),
                          (128, 8.0, 8192, 1000000.0)]]


@pytest.mark.parametrize("s", DYN, ids=lambda s: f"d{s.rotary}-f{s.factor:g}")
def test_vllm_dynamic_runs_the_plain_base(s: RopeSchedule) -> None:
    """vLLM's ``DynamicNTKScalingRotaryEmbedding`` builds one cache for max_len = L0 * factor with
    ``base * ((max_len / L0) - (factor - 1)) ** (d / (d - 2))``: the bracket is exactly 1 (closed form), so the
    base is the plain one, and its float32 inverse frequencies (``1.0 / base ** (arange / d)``) are the default
    schedule's at every length: equal to the mpmath model of that float32 formula bit for bit."""
    assert formulas.vllm_dynamic_base(s) == pytest.approx(s.base, rel=1e-15)
    with mpmath.workprec(200):
        b = mpmath.mpf(_cr32(s.base))
        want = [_cr32(1 / mpmath.mpf(_cr32(b ** mpmath.mpf(_cr32(mpmath.mpf(2 * i) / s.rotary)))))
                for i in range(s.rotary // 2)]
    L0d = s.original_max_position_embeddings
    for n in (L0d, 2 * L0d, int(L0d * s.factor)):
        assert run_recipe(stack("vllm", "float16", s), s, [0], seq_len=n)["inv_freq"].tolist() == want


def test_vllm_dynamic_note_figures_from_transformers() -> None:
    """The note: the plain base, and at L0 * factor transformers' grown base, whose lowest frequency is
    ``factor**2 - factor + 1`` times lower (closed form: (base'/base) ** ((d-2)/d)); transformers'
    ``ROPE_INIT_FUNCTIONS['dynamic']`` at that length gives the same ratio (float32, within 1e-5)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    s = DYN[0]
    cfg = LlamaConfig(head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
                      rope_scaling={"rope_type": "dynamic", "factor": 2.0}, rope_theta=10000.0)
    plain, _ = ROPE_INIT_FUNCTIONS["dynamic"](cfg, "cpu", seq_len=4096)
    grown, _ = ROPE_INIT_FUNCTIONS["dynamic"](cfg, "cpu", seq_len=8192)
    ratio = float(plain[-1] / grown[-1])
    note = STACKS["vllm"].runs_other_schedule(s)
    assert note is not None and "keeps the plain base 10000" in note and "cache ends at 8192" in note
    m = re.search(r"to ([\d.e+]+) at 8192, the lowest frequency ([\d.]+)x lower", note)
    assert m, note
    assert float(m.group(2)) == pytest.approx(ratio, rel=1e-5) == 3.0
    assert float(m.group(1)) == pytest.approx(10000.0 * 3.0 ** (128 / 126), rel=1e-5)


def test_vllm_dynamic_mismatch_is_measured_above_l0_only() -> None:
    """Up to L0 the declared (transformers) schedule is the plain one too: vLLM's row is the fp32 preset's; above
    L0 transformers grows the base and vLLM's plain frequencies show as error."""
    s = DYN[0]
    rows = audit(s, [stack("vllm", "bfloat16", s), preset("fp32", "bfloat16")], [4096, 8192])
    by = {(r.recipe, r.length): r for r in rows}
    assert by["vllm", 4096].max_rotation_error == by["fp32", 4096].max_rotation_error
    assert by["vllm", 8192].max_rotation_error > 1.0 > 0.01 > by["fp32", 8192].max_rotation_error


# --------------------------------------------------------------------------- llama.cpp: LongRoPE


def test_llama_cpp_longrope_divides_by_the_gguf_factors() -> None:
    """ggml's ``freq_factors`` are the GGUF's float32 ``rope_factors_long`` (the converter's torch.float32
    tensor of the config's list) with llama.cpp's default context (the training one, > L0); the short ones when
    the model's context does not exceed L0 (factor <= 1).  The kernel itself referees the angles
    (tests/test_stacks.py, case longrope-phi3.5)."""
    long = np.asarray(PHI_CFG["rope_scaling"]["long_factor"], dtype=np.float32)
    short = np.asarray(PHI_CFG["rope_scaling"]["short_factor"], dtype=np.float32)
    for how in ("repeated-product", "power-product"):
        assert np.array_equal(formulas.angle_maker(how, PHI).freq_factors, long)
        assert np.array_equal(formulas.angle_maker(how, replace(PHI, factor=1.0)).freq_factors, short)


def test_llama_cpp_short_factors_on_ggml_kernel() -> None:
    """With a context that fits L0 (``-c <= 4096``: factor <= 1 here) llama.cpp passes ``rope_factors_short``:
    the tool's float32 angles for that schedule are the harness model's (tests/referees/_ggml_model.py, checked
    against the kernel in tests/test_stack_ggml.py) bit for bit, and ggml's own rope op on those factors returns
    cos/sin within one float32 ulp (glibc's faithful cosf/sinf; two with the attn_factor product) of the
    tool's angle's correctly rounded cos/sin times the attn_factor."""
    need("ggml")
    s = replace(PHI, factor=1.0)
    short = np.asarray(PHI_CFG["rope_scaling"]["short_factor"], dtype=np.float32)
    af = float(np.float32(PHI.cos_sin_scale))  # the GGUF's rope.scaling.attn_factor (from M / L0, whatever -c is)
    pos = np.arange(L0)
    angle = run_recipe(stack("llama.cpp-cpu", "float32", s), s, pos)["angle"].astype(np.float32)
    _, _, theta = ggml_model.cpu_rope_cache(pos, s.rotary, s.base, freq_factors=short, attn_factor=af)
    assert np.array_equal(angle, theta)
    kc, ks = ggml_rope_angles(pos, s.rotary, s.base, freq_factors=short, attn_factor=af, mode="neox")
    t64 = angle.astype(np.float64)
    for fn, k in ((np.cos, kc), (np.sin, ks)):
        tool = (fn(t64).astype(np.float32) * np.float32(af)).astype(np.float32)
        assert ggml_model.ulp_diff(k, tool, "f32").max() <= (1 if af == 1 else 2)


# --------------------------------------------------------------------------- MLX: mlx-lm's freqs

MLX_CONFIGS = {"phi-3.5": "phi-3.5-mini-instruct.json", "qwen2.5-yarn": "qwen2.5-coder-32b-instruct-yarn.json",
               "deepseek-v3": "deepseek-v3.json", "gpt-oss": "gpt-oss-20b.json", "gemma-4": "gemma-4-31b-it.json"}


def _mlx_referee_freqs(s: RopeSchedule) -> np.ndarray:
    if s.scaling == "longrope":
        return mlx_model.su_freqs(s.rotary, s.base, list(s.long_factor or ()))
    if s.scaling == "yarn":
        return mlx_model.yarn_freqs(s.rotary, s.base, s.factor, s.original_max_position_embeddings, s.beta_fast,
                                    s.beta_slow)
    return mlx_model.proportional_freqs(s.head_dim, s.rotary, s.base, s.factor)


@pytest.mark.parametrize("name", list(MLX_CONFIGS))
def test_mlx_lm_inv_freq_is_the_referee_model(name: str) -> None:
    """The ``mlx-lm`` how equals the referee's numpy model of mlx-lm's ``freqs`` (tests/referees/_mlx_model.py,
    written from rope_utils.py independently) followed by the kernel's ``1.0f / freqs``, bit for bit; both
    stacks take it for the scaled types."""
    model = load_config(DATA / MLX_CONFIGS[name])
    for _, s in model.rope:
        if s.scaling not in formulas.MLX_LM_ROPE_TYPES:
            continue
        want = mlx_model.freqs_inv_freq(_mlx_referee_freqs(s)).astype(np.float64)
        assert np.array_equal(formulas.mlx_lm_inv_freq(s), want), name
        for st in ("mlx", "mlx-cpu"):
            assert stack(st, "bfloat16", s).inv_freq_from == "mlx-lm"


def test_mlx_notes() -> None:
    """YaRN: mlx-lm floors / ceils the ramp bounds always (gpt-oss declares truncate=false: the same note as
    vLLM before #28244, figures from the schedule's own bounds); Qwen2.5 (truncate true) runs its schedule."""
    oss = load_config(DATA / "gpt-oss-20b.json").schedule
    qwen = load_config(DATA / "qwen2.5-coder-32b-instruct-yarn.json").schedule
    assert STACKS["mlx"].runs_other_schedule(oss) == STACKS["vllm-pre-28244"].runs_other_schedule(oss)
    assert "(8, 18)" in STACKS["mlx-cpu"].runs_other_schedule(oss)
    assert STACKS["mlx"].runs_other_schedule(qwen) is None
    gemma = dict(load_config(DATA / "gemma-4-31b-it.json").rope)["full_attention"]
    assert STACKS["mlx"].runs_other_schedule(gemma) is None


# --------------------------------------------------------------------------- what stays refused


@pytest.mark.parametrize("name,kind", [("flash-attn", "linear"), ("mlx-cpu", "dynamic"), ("llama.cpp-cpu", "dynamic"),
                                       ("llama.cpp-cuda", "proportional"), ("sglang", "longrope"),
                                       ("vllm-pre-28244", "dynamic"), ("vllm", "proportional")])
def test_still_refused(name: str, kind: str) -> None:
    s = {"linear": RopeSchedule(scaling="linear", factor=2.0), "dynamic": DYN[0],
         "proportional": RopeSchedule(head_dim=8, rotary_dim=4, scaling="proportional"), "longrope": PHI}[kind]
    with pytest.raises(ValueError, match=f"stack '{name}' does not run rope type '{kind}'"):
        stack(name, "bfloat16", s)


# --------------------------------------------------------------------------- the CLI


@pytest.mark.parametrize("cfg,labels", [
    ("phi-3.5-mini-instruct.json", ("vLLM, ", "llama.cpp CPU, ", "llama.cpp CUDA, ", "MLX (Metal), ", "MLX (CPU), ")),
    ("deepseek-v3.json", ("MLX (Metal), ", "MLX (CPU), ")),
    ("qwen2.5-coder-32b-instruct-yarn.json", ("MLX (Metal), ", "MLX (CPU), ")),
    ("gemma-4-31b-it.json", ("MLX (Metal), ", "MLX (CPU), ")),
])
def test_config_audits_the_new_stacks(cfg: str, labels: tuple[str, ...]) -> None:
    """``precision-audit config`` with its default stacks audits them (a bottom-line line each, no "skipped"
    line naming them)."""
    r = CliRunner().invoke(main, ["config", str(DATA / cfg), "-l", "4K", "--no-positions"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    for label in labels:
        assert any(x.strip().startswith(label) for x in lines), (label, r.output)
    for name in ("vllm", "llama.cpp-cpu", "llama.cpp-cuda", "mlx", "mlx-cpu"):
        if any(STACKS[name].label + ", " == lab for lab in labels):
            assert f"skipped: stack '{name}'" not in r.output
