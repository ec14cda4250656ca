"""The referee of effect's pass-key questions asked from a copy of the KV cache (tests/test_effect_real.py for a
tiny Llama, tests/test_effect_layers.py for a tiny Gemma 3 with sliding layers).

Each question's logits, run from the cache where the window's prefill stopped, must be those of the model run
without a cache on the prompt itself (the key's sentence, the text up to the gap, the question and the answer),
with the same injected tables; and the keys counted must be what that full forward's greedy choices give.
"""

from __future__ import annotations

import numpy as np
import torch


def assert_questions_are_full_forwards(rm, w, gaps, offset, text):
    """Run :func:`precision_audit.effect.measures._run_window` on window ``w`` with exact tables, check every
    question against the uncached forward of its prompt, and return the run (its text logits, with ``text``)."""
    from precision_audit.effect.measures import _run_window

    tab = rm.tables("exact", "float64", np.arange(offset, offset + w.span(gaps)))
    asked, forward = [], rm.forward

    def recording(**inputs):  # the question forwards' logits (those run from the cache), in order of depth
        out = forward(**inputs)
        if inputs["input_ids"].shape[1] == w.questions.shape[1]:
            asked.append(out.logits)
        return out

    rm.forward = recording
    try:
        run = _run_window(rm, w, offset, gaps, text, [tab])[0]
    finally:
        rm.forward = forward
    answers = torch.as_tensor(w.questions[:, w.answer_at:])
    rm.set_tables([tab], offset)
    try:
        for g in gaps:
            d = w.head + g
            ids = torch.as_tensor(np.concatenate([w.ids[:, :d], w.questions], axis=1))
            pos = torch.arange(offset, offset + ids.shape[1])[None].expand(ids.shape[0], -1)
            with torch.inference_mode():
                full = rm.forward(input_ids=ids, position_ids=pos).logits
            assert torch.allclose(asked[gaps.index(g)], full[:, d:], atol=1e-4, rtol=1e-4)
            greedy = full[:, d + w.answer_at - 1:-1].argmax(-1)
            assert run.correct[g] == int((greedy == answers).all(-1).sum())
    finally:
        rm.set_tables(None)
    return run
