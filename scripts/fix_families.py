#!/usr/bin/env python3
"""Rotation error of transformers' rotary modules: as built, after model.to(bf16), after fix + cast.

Builds each family's rotary module from its public config (no weights), runs it for a bfloat16 input
over positions 0..L-1 and measures the rotation error of its cos/sin against float64 angles from the
config's schedule (precision_audit.schedules).  Prints one row per family (Gemma 3: per layer type).

Run from the repo root: python scripts/fix_families.py [L]
"""

from __future__ import annotations

import importlib
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

PHI35 = json.loads((Path(__file__).resolve().parents[1] / "tests" / "data" / "phi-3.5-mini-instruct.json").read_text())
GEMMA3_ROPE = dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                   full_attention=dict(rope_type="linear", rope_theta=1000000.0, factor=8.0))
PHI_ROPE = dict(rope_type="longrope", rope_theta=PHI35["rope_theta"], original_max_position_embeddings=4096,
                short_factor=PHI35["rope_scaling"]["short_factor"], long_factor=PHI35["rope_scaling"]["long_factor"])

# family -> (config class, module "model:Class", config kwargs, head_dim, layer type or None).  Public configs:
# Llama-3.1-8B, Qwen2-7B, Mistral-7B-v0.3, Gemma-3-4B, Phi-3.5-mini, gpt-oss-20b, DeepSeek-V3.
FAMILIES: dict[str, tuple[str, str, dict[str, Any], int, str | None]] = {
    "llama (llama3)": ("LlamaConfig", "llama:LlamaRotaryEmbedding", dict(
        head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=8192)), 128, None),
    "qwen2 (default 1e6)": ("Qwen2Config", "qwen2:Qwen2RotaryEmbedding", dict(
        hidden_size=3584, num_attention_heads=28, max_position_embeddings=131072,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), 128, None),
    "mistral (default 1e6)": ("MistralConfig", "mistral:MistralRotaryEmbedding", dict(
        head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=32768,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), 128, None),
    "gemma3 sliding (default 1e4)": ("Gemma3TextConfig", "gemma3:Gemma3RotaryEmbedding", dict(
        head_dim=256, max_position_embeddings=131072, rope_parameters=GEMMA3_ROPE), 256, "sliding_attention"),
    "gemma3 full (linear x8, 1e6)": ("Gemma3TextConfig", "gemma3:Gemma3RotaryEmbedding", dict(
        head_dim=256, max_position_embeddings=131072, rope_parameters=GEMMA3_ROPE), 256, "full_attention"),
    "phi3 (longrope)": ("Phi3Config", "phi3:Phi3RotaryEmbedding", dict(
        hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
        original_max_position_embeddings=4096, rope_parameters=PHI_ROPE), 96, None),
    "gpt_oss (yarn)": ("GptOssConfig", "gpt_oss:GptOssRotaryEmbedding", dict(
        head_dim=64, max_position_embeddings=131072,
        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                             truncate=False, original_max_position_embeddings=4096)), 64, None),
    "deepseek_v3 (yarn)": ("DeepseekV3Config", "deepseek_v3:DeepseekV3RotaryEmbedding", dict(
        qk_rope_head_dim=64, max_position_embeddings=163840,
        rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, mscale=1.0, mscale_all_dim=1.0,
                             beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=4096)), 64, None),
}


def _build(family: str) -> Any:
    cfg_name, where, kwargs, _, _ = FAMILIES[family]
    mod, _, cls = where.partition(":")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(importlib.import_module("transformers"), cfg_name)(**kwargs)
        return getattr(importlib.import_module(f"transformers.models.{mod}.modeling_{mod}"), cls)(config)


def _errors(mod: Any, family: str, L: int, chunk: int = 8192) -> tuple[float, float]:
    """(max, mean) rotation error in radians of the module's bf16 cos/sin over positions 0..L-1."""
    import torch

    from precision_audit.rope import exact_angles, wrap
    from precision_audit.schedules import schedule_from_rope_parameters

    _, _, kwargs, head_dim, layer = FAMILIES[family]
    params = kwargs["rope_parameters"] if layer is None else kwargs["rope_parameters"][layer]
    sched = schedule_from_rope_parameters(params, head_dim=head_dim,
                                          max_position_embeddings=kwargs["max_position_embeddings"])
    theta, nf = sched.inv_freq(sched.frequency_key(L)), sched.n_freq
    extra = () if layer is None else (layer,)
    scale = float(getattr(mod, "attention_scaling" if layer is None else f"{layer}_attention_scaling"))
    x = torch.zeros(1, dtype=torch.bfloat16)
    worst, total = 0.0, 0.0
    for s0 in range(0, L, chunk):
        stop = min(L, s0 + chunk)
        pos = torch.cat([torch.tensor([L - 1]), torch.arange(s0, stop)])[None]  # as one forward over L tokens
        with torch.no_grad():
            c, s = mod(x, pos, *extra)
        c, s = (t[0, 1:, :nf].double().numpy() / scale for t in (c, s))
        err = np.abs(wrap(np.arctan2(s, c) - exact_angles(np.arange(s0, stop), theta)))
        worst, total = max(worst, float(err.max())), total + float(err.sum())
    return worst, total / (L * nf)


def main() -> None:
    import torch

    import transformers

    from precision_audit.fix import keep_rotary_fp32

    transformers.logging.set_verbosity_error()

    L = int(sys.argv[1]) if len(sys.argv) > 1 else 32768
    print(f"rotation error (rad) of bf16 cos/sin over positions 0..{L - 1}: max / mean")
    print(f"{'family':<30} {'as built':>19} {'model.to(bf16)':>19} {'fix + to(bf16)':>19}  bits as built")
    for family in FAMILIES:
        built = _build(family)
        cast = _build(family).to(torch.bfloat16)
        fixed = _build(family)
        keep_rotary_fp32(fixed)
        fixed.to(torch.bfloat16)
        rows = [_errors(m, family, L) for m in (built, cast, fixed)]
        x, pos, layer = torch.zeros(1, dtype=torch.bfloat16), torch.arange(L)[None], FAMILIES[family][4]
        with torch.no_grad():
            a, b = (m(x, pos, *(() if layer is None else (layer,))) for m in (built, fixed))
        same = all(torch.equal(u, v) for u, v in zip(a, b))
        print(f"{family:<30} " + " ".join(f"{w:8.4f} / {m:8.2e}" for w, m in rows) + f"  {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
