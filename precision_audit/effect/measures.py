"""What a real model notices: its outputs with a code path's cos/sin next to its exact-RoPE run.

For each code path (a RoPE preset or a stack, in a dtype) and each offset
(the position of the window's first token: exact RoPE depends only on
position differences, so 1M-token positions cost a short forward), the model
(:class:`~precision_audit.effect.real.RealModel`) runs twice on the same
tokens at the same positions: once with exact cos/sin, once with the path's
stored cos/sin.  Two measures, each beside its **noise floor** (the same
measure for the exact cos/sin merely rounded to the path's cache format:
what holding cos/sin in that format costs anyway):

* natural text (:class:`TextEffectRow`): KL(exact || path) per token in
  nats, top-1 agreement with the exact run and the change in the negative
  log-likelihood of the text, over the window and over its second half
  (tokens that see at least half the window back).  The default text is the
  SmolLM2 model's own seeded continuation of prompts the project wrote
  (``scripts/make_effect_text.py``, package data ``effect_text.txt``);
* long-range retrieval (:class:`PasskeyRow`): a sentence with a five-digit
  key, then the text; ``gap`` tokens after the key, the question; the answer
  counts when every digit is the model's greedy choice (scored in one forward
  with the answer teacher-forced: greedy decoding yields the key exactly when
  each of its tokens is the most likely one given the ones before).

Both read one window per offset (:func:`passkey_window`: the key's sentence,
then the text; 8192 tokens by default, so the text's second half sees 4K
tokens back), run once per table: the window is prefilled in chunks that end
where a question is asked, and each question runs from a copy of the KV cache
there, so the gaps 1K, 4K and 6K cost one forward of the window per table.

With a model in bfloat16 (or float16) a row also says what the model dtype
costs: its exact run against the same weights run in float32.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from ..checks import check_int
from ..formats import get_format
from ..rope import MAX_ROPE_LENGTH
from ..rows import Row
from .real import RealModel, cache_format

__all__ = ["DEFAULT_GAPS", "DEFAULT_KEYS", "DEFAULT_MODEL_OFFSETS", "DEFAULT_MODEL_PATHS", "DEFAULT_TOKENS",
           "PasskeyRow", "PasskeyWindow", "TextEffectRow", "default_gaps", "default_text", "measure_model",
           "passkey_span", "passkey_window", "runs"]

DEFAULT_MODEL_PATHS = ("lowp", "lowp-inv-freq", "fp32")
DEFAULT_MODEL_OFFSETS = (0,)  # the model where it was trained (--offset 1M and more: positions past its context)
DEFAULT_TOKENS = 8192  # the window: its second half sees >= 4K tokens back
DEFAULT_GAPS = (1024, 4096, 6144)  # up to three quarters of SmolLM2's trained context
DEFAULT_KEYS = 1  # each key is a window of its own (a forward per table)
TEXT_FILE = "effect_text.txt"
_KEY_SEED = 2026
_BATCH_TOKENS = 4096  # rows of one forward: at most this many tokens (4 x 1024)
_STATS_BLOCK = 512  # tokens whose float64 log-probabilities are held at once
_HEAD = "A pass key is hidden in the text below. Remember it. The pass key is {key}. Remember it: {key}.\n"
_QUESTION = "\nWhat is the pass key? The pass key is"


@dataclass(frozen=True)
class _PathRow(Row):
    """What every real-model row names: the model, the path asked (``path`` in ``dtype``), the format it stores
    cos/sin in (``cache``), the model's own dtype and the position of the first token (``offset``)."""

    model: str
    path: str
    dtype: str
    cache: str
    model_dtype: str
    offset: int


@dataclass(frozen=True)
class TextEffectRow(_PathRow):
    """A real model on natural text with one code path at one offset.

    ``kl``: mean KL(exact || path) per predicted token (nats); ``top1``:
    fraction of tokens whose most likely next token is the exact run's;
    ``nll_delta``: mean NLL of the text with the path minus with exact RoPE
    (nats per token); ``*_late``: the same over the window's second half
    (tokens that see at least half the window back); ``kl_max`` /
    ``kl_p99``: the largest and the 99th-percentile KL of one token (gates
    such as NeMo's use the max).  ``floor_*``: the same for exact cos/sin
    stored in the path's cache format ``cache``.  ``dtype_kl`` /
    ``dtype_top1``: the model's exact run in ``model_dtype`` against float32
    (None for a float32 model).
    """

    tokens: int
    kl: float
    top1: float
    nll_delta: float
    kl_late: float
    top1_late: float
    kl_max: float
    kl_p99: float
    floor_kl: float
    floor_top1: float
    floor_nll_delta: float
    floor_kl_late: float
    floor_kl_max: float
    floor_kl_p99: float
    dtype_kl: float | None
    dtype_top1: float | None


@dataclass(frozen=True)
class PasskeyRow(_PathRow):
    """A real model retrieving a key ``gap`` tokens back, with one code path at one offset.

    ``correct`` of ``keys`` answered exactly with the path; ``exact``: with
    exact RoPE; ``floor``: with exact cos/sin stored in the cache format;
    ``dtype_exact``: exact RoPE with the weights in float32 (None for a float32 model).
    """

    gap: int
    keys: int
    correct: int
    exact: int
    floor: int
    dtype_exact: int | None


def default_text() -> str:
    """The shipped text: SmolLM2-135M-Instruct's own seeded continuation of the project's prompts.

    >>> len(default_text()) > 4000
    True
    """
    return resources.files(__package__).joinpath(TEXT_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class PasskeyWindow:
    """The token rows effect runs at one offset: one row per pass key, each the key's sentence then the text.

    ``ids`` (keys, n); ``head``: the tokens before the text (the key's sentence; 0 without keys); ``questions``
    (keys, m): the question then the answer, asked ``gap`` tokens after the head (the KV cache of the window's
    first ``head + gap`` tokens, so one forward of the window answers every gap); ``answer_at``: where the answer
    starts in ``questions``; ``values``: the keys.
    """

    ids: np.ndarray
    head: int
    questions: np.ndarray
    answer_at: int
    values: tuple[int, ...]

    def span(self, gaps: Sequence[int]) -> int:
        """Positions the window and its questions take."""
        return max([self.ids.shape[1], *(self.head + g + self.questions.shape[1] for g in gaps)])


def passkey_window(tokenizer: Any, text_ids: Sequence[int], length: int, keys: int = DEFAULT_KEYS,
                   with_keys: bool = True) -> PasskeyWindow:
    """The window of ``length`` tokens (fewer if the text is shorter): each key's sentence, then ``text_ids``.

    The keys are five-digit numbers from a fixed seed; each row must spell its key's sentence and its answer with
    the same count of tokens (true of every tokenizer that spells five-digit numbers alike).  ``with_keys``
    False: one row, the text alone (no pass keys asked).
    """
    enc = (lambda s: list(tokenizer(s, add_special_tokens=False)["input_ids"]))
    rng = np.random.default_rng(_KEY_SEED)
    values = tuple(int(k) for k in rng.integers(10000, 100000, size=keys)) if with_keys else ()
    start = list(tokenizer("")["input_ids"])  # what the tokenizer puts before any text (a BOS token, or nothing)
    heads = [start + enc(_HEAD.format(key=k)) for k in values] or [start]
    question = enc(_QUESTION)
    answers = [question + enc(f" {k}") for k in values] or [question]
    if len({len(h) for h in heads}) > 1 or len({len(a) for a in answers}) > 1:
        raise ValueError("the tokenizer spells the pass-key sentences with different lengths; give one key")
    head = len(heads[0])
    text = list(text_ids)[:max(0, length - head)]
    return PasskeyWindow(np.array([h + text for h in heads], dtype=np.int64), head,
                         np.array(answers, dtype=np.int64), len(question), values)


def passkey_span(tokenizer: Any, gap: int) -> int:
    """Positions a pass key ``gap`` tokens back takes: the key's sentence, the text up to the question, the question
    and the answer."""
    w = passkey_window(tokenizer, [], 0, 1)
    return w.head + check_int(gap, "gap", minimum=1) + w.questions.shape[1]


def _digest(c: np.ndarray, s: np.ndarray) -> bytes:
    return hashlib.blake2b(c.tobytes() + s.tobytes(), digest_size=16).digest()


@dataclass
class _Run:
    """What one table's forward of a window gives: the logits of its first row's tokens (with text rows) and the
    keys each gap's question retrieves."""

    logits: Any
    correct: dict[int, int]


def _run_window(rm: RealModel, w: PasskeyWindow, offset: int, gaps: Sequence[int], text: bool,
                tables: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[_Run]:
    """Each table's run of the window, the tables' rows side by side in one forward.

    The window is prefilled in chunks that end where a question is asked (the first ``head + gap`` tokens); each
    question and its answer run from a copy of the KV cache there, so the answer is scored in one forward
    (teacher-forced: greedy decoding yields the key exactly when each of its tokens is the most likely one).
    """
    import copy

    import torch

    keys, n = w.ids.shape
    k = len(tables)
    ids = torch.as_tensor(w.ids, device=rm.device).repeat(k, 1)
    q = torch.as_tensor(w.questions, device=rm.device).repeat(k, 1)
    pos = torch.arange(offset, offset + w.span(gaps), device=rm.device)[None].expand(k * keys, -1)
    depths = sorted({w.head + g for g in gaps})
    name = _cache_argument(rm.model)
    whole, correct, cache, start = None, {}, None, 0  # whole: each table's logits (k, n, V), filled chunk by chunk
    rm.set_tables([t for t in tables for _ in range(keys)], offset)
    try:
        with torch.inference_mode():
            for end in sorted({*depths, *([n] if text else [])}):  # chunk ends: each question's depth, the window's end
                if end > start:
                    out = rm.forward(input_ids=ids[:, start:end], position_ids=pos[:, start:end],
                                     **{name: cache}, use_cache=True, logits_to_keep=0 if text else 1)
                    if text:  # written in place: a list joined at the end held each table's logits twice
                        if whole is None:
                            whole = torch.empty((k, n, out.logits.shape[-1]), dtype=torch.float32)
                        whole[:, start:end] = out.logits[::keys]
                    cache, start = getattr(out, name), end
                    del out
                if end in depths:
                    lp = rm.forward(input_ids=q, position_ids=pos[:, end:end + q.shape[1]],
                                    **{name: copy.deepcopy(cache)}, use_cache=True).logits
                    pred = torch.where(torch.isnan(lp), torch.full_like(lp, -float("inf")), lp)
                    ok = (pred[:, w.answer_at - 1:-1].argmax(-1) == q[:, w.answer_at:]).all(-1)
                    correct[end - w.head] = [int(x) for x in ok.view(k, keys).sum(-1)]
    finally:
        rm.set_tables(None)
    return [_Run(whole[j] if whole is not None else None, {g: correct[g][j] for g in correct}) for j in range(k)]


def _cache_argument(model: Any) -> str:
    """The name of the model's KV-cache argument and output: ``cache`` (transformers >= 5.24) or
    ``past_key_values`` (before, deprecated since)."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _log_probs(logits: Any, x: Any, out: Any) -> Any:
    """float64 log-probabilities of float32 logits, in ``out`` (``x``: a float64 buffer of the logits' shape to
    convert them in); float32 log-softmax would leave KL estimates of a few 1e-9 that are below zero for nearly
    equal distributions."""
    import torch

    x.copy_(logits)  # float32 to float64: exact
    return torch.log_softmax(x, dim=-1, out=out)


class _Reference:
    """What every path's statistics read of the exact run's logits besides their log-probabilities, per block of
    tokens (the argmax and the targets' log-probability): computed for the first path, kept for the next."""

    def __init__(self) -> None:
        self.top: dict[int, tuple[Any, Any]] = {}


def _text_stats(ref: Any, logits: Any, targets: Any,
                kept: _Reference | None = None) -> tuple[float, float, float, float, float, float, float]:
    """KL, top-1 agreement, NLL change; KL and top-1 over the second half; the largest and the 99th-percentile KL
    of one token (the percentile as torch.quantile interpolates it; inf where some token's KL is).

    ``ref``: the exact run's logits (T, V); ``logits``: the path's (T, V).  Each is taken to float64
    log-probabilities a block of tokens at a time (an 8K-token window of a 49K vocabulary is 3 GB in float64), in
    four float64 buffers of one block made once per call (a fresh 200 MB tensor for each operation of each
    block, and the exact run's figures recomputed for each path, made the default ``effect --model smollm2`` run
    180 s instead of 151 s, the same bits).
    The KL is a sum of float64 terms, rounded to within ~1e-16 of a value that is never negative: clamped at 0.
    ``kept``: ``ref``'s :class:`_Reference` (what one path reads of it is kept for the next; the same bits).
    """
    import torch

    kls, agrees, nlls = [], [], []
    bufs = [torch.empty((min(_STATS_BLOCK, ref.shape[0]), ref.shape[-1]), dtype=torch.float64) for _ in range(4)]
    for a in range(0, ref.shape[0], _STATS_BLOCK):
        n = min(_STATS_BLOCK, ref.shape[0] - a)
        x, r, lp, e = (b[:n] for b in bufs)  # the first n rows: C-contiguous
        r = _log_probs(ref[a:a + n], x, r)
        lp = _log_probs(logits[a:a + n], x, lp)
        t = targets[a:a + n, None]
        top = kept.top.get(a) if kept is not None else None
        if top is None:
            top = (r.argmax(-1), r.gather(-1, t)[:, 0])
            if kept is not None:
                kept.top[a] = top
        # exp(r) * (r - lp) summed, r - lp in x (NaN where the path's cos/sin were not finite: counted as inf)
        kl = torch.mul(torch.exp(r, out=e), torch.sub(r, lp, out=x), out=e).sum(-1)
        kls.append(torch.where(torch.isnan(kl), torch.full_like(kl, float("inf")), kl).clamp_min(0.0))
        # a row with a NaN disagrees whatever its argmax; any other row's argmax is lp's own
        agrees.append((top[0] == lp.argmax(-1)) & ~torch.isnan(lp).any(-1))
        nll = -(lp.gather(-1, t)[:, 0] - top[1])
        nlls.append(torch.where(torch.isnan(nll), torch.full_like(nll, float("inf")), nll))
    del bufs
    kl, agree, nll = torch.cat(kls), torch.cat(agrees), torch.cat(nlls)
    h = kl.shape[0] // 2
    p99 = float(torch.quantile(kl, 0.99)) if bool(torch.isfinite(kl).all()) else float("inf")
    return (float(kl.mean()), float(agree.double().mean()), float(nll.mean()), float(kl[h:].mean()),
            float(agree[h:].double().mean()), float(kl.max()), p99)


def _check_offsets(offsets: Sequence[int], span: int) -> list[int]:
    out = [check_int(o, "offset", minimum=0) for o in offsets]
    for o in out:
        if o + span > MAX_ROPE_LENGTH:
            raise ValueError(f"offset {o} + {span} tokens exceeds 2**26 = {MAX_ROPE_LENGTH} (the oracle's exact range)")
    return list(dict.fromkeys(out))


def _offset_rows(rm: RealModel, w: PasskeyWindow, paths: Sequence[tuple[str, str]], offset: int,
                 gaps: Sequence[int], text: bool, f32: _Run | None,
                 progress: Callable[[int], None] | None) -> tuple[list[TextEffectRow], list[PasskeyRow]]:
    """One offset's rows: the exact run, each cache format's floor and each path, one forward of the window each
    (distinct tables once; a table's logits reduced to its statistics as soon as its forward is done)."""
    import torch

    span = np.arange(offset, offset + w.span(gaps))
    caches = {p: cache_format(rm.schedule, p, d) for p, d in paths}
    wanted = [("exact", "float64"), *(("floor", f) for f in dict.fromkeys(caches.values())), *paths]
    tables = {t: rm.tables(*t, span) for t in wanted}
    digests = {t: _digest(*tab) for t, tab in tables.items()}
    todo = list({digests[t]: tables[t] for t in wanted}.items())  # exact first
    per = max(1, _BATCH_TOKENS // w.ids.size)
    targets = torch.as_tensor(w.ids[0, 1:])
    ref, kept, stats, keys = None, None, {}, {}
    for i in range(0, len(todo), per):
        part = todo[i:i + per]
        for (key, _), run in zip(part, _run_window(rm, w, offset, gaps, text, [tab for _, tab in part])):
            keys[key] = run.correct
            if text and ref is None:  # the exact run (first): the reference, no statistics against itself
                ref = run.logits[:-1]
                kept = _Reference()
            elif text:
                stats[key] = _text_stats(ref, run.logits[:-1], targets, kept)
        if progress is not None:
            progress(len(part))
    exact = digests["exact", "float64"]
    dt = _text_stats(f32.logits[:-1], ref, targets) if text and f32 is not None else None
    text_rows, key_rows = [], []
    for p, d in paths:
        mine, floor = digests[p, d], digests["floor", caches[p]]
        if text:
            if exact in (mine, floor) and exact not in stats:  # a table equal to the exact one: against itself
                stats[exact] = _text_stats(ref, ref, targets, kept)
            st, f = stats[mine], stats[floor]
            text_rows.append(TextEffectRow(rm.name, p, get_format(d).name, caches[p], rm.dtype, offset,
                                           w.ids.shape[1], *st, f[0], f[1], f[2], f[3], f[5], f[6],
                                           dt[0] if dt else None, dt[1] if dt else None))
        key_rows += [PasskeyRow(rm.name, p, get_format(d).name, caches[p], rm.dtype, offset, g, len(w.values),
                                keys[mine][g], keys[exact][g], keys[floor][g],
                                f32.correct[g] if f32 is not None else None) for g in gaps]
    return text_rows, key_rows


def measure_model(rm: RealModel, paths: Sequence[str] = DEFAULT_MODEL_PATHS, dtypes: Sequence[str] = ("bfloat16",),
                  offsets: Sequence[int] = DEFAULT_MODEL_OFFSETS, *, tokens: int = DEFAULT_TOKENS,
                  text: str | None = None, gaps: Sequence[int] = DEFAULT_GAPS, keys: int = DEFAULT_KEYS,
                  progress: Callable[[int], None] | None = None) -> tuple[list[TextEffectRow], list[PasskeyRow]]:
    """Text rows (``tokens`` > 0) and pass-key rows (one per gap) per path, dtype and offset.

    One window per offset (:func:`passkey_window`): with gaps, each key's sentence and then the text (``text``:
    the user's; default :func:`default_text`), ``tokens`` long (no text rows: as long as the longest gap needs);
    each table runs it once, and every gap's question is asked from the KV cache ``gap`` tokens after the key.
    The text rows read the first key's row.  ``progress(k)`` after each batch of ``k`` tables (:func:`runs`
    counts them all).
    """
    from ..rope import PRESETS, STACKS

    tokens = check_int(tokens, "tokens", minimum=0)
    keys = check_int(keys, "keys", minimum=1, maximum=64)
    combos = []
    for p in dict.fromkeys(paths):
        if p not in PRESETS and p not in STACKS:
            raise ValueError(f"unknown path {p!r}; valid: {', '.join([*PRESETS, *STACKS])}")
        combos += [(p, get_format(d).name) for d in dict.fromkeys(dtypes)]
    if not combos:
        raise ValueError("paths: none given")
    gaps = sorted(check_int(g, "gap", minimum=1) for g in dict.fromkeys(gaps))
    if not tokens and not gaps:
        raise ValueError("nothing to measure: tokens 0 and no gap")
    text_ids = rm.tokenizer(text if text is not None else default_text(), add_special_tokens=False)["input_ids"]
    probe = passkey_window(rm.tokenizer, [], 0, keys, with_keys=bool(gaps))
    need = probe.head + (gaps[-1] if gaps else 0)
    context = rm.context or None
    if gaps and context and need + probe.questions.shape[1] > context:
        raise ValueError(f"gap {gaps[-1]}: the pass key, {gaps[-1]} tokens of text and the question take "
                         f"{need + probe.questions.shape[1]} tokens, beyond the model's trained context {context}")
    if tokens and gaps and need > tokens:
        raise ValueError(f"gap {gaps[-1]}: the pass key's sentence and {gaps[-1]} tokens of text take {need} tokens, "
                         f"more than the window's {tokens} (--tokens)")
    w = passkey_window(rm.tokenizer, text_ids, tokens or need, keys, with_keys=bool(gaps))
    if w.ids.shape[1] < need or w.ids.shape[1] - w.head < 4:
        raise ValueError(f"the text has {len(text_ids)} tokens; the window needs {max(need, w.head + 4) - w.head}")
    offsets = _check_offsets(offsets, w.span(gaps))
    text_rows, key_rows = [], []
    for o in offsets:
        f32 = _float32_reference(rm, w, o, gaps, bool(tokens)) if rm.dtype != "float32" else None
        if f32 is not None and progress is not None:
            progress(1)
        t, k = _offset_rows(rm, w, combos, o, gaps, bool(tokens), f32, progress)
        text_rows += t
        key_rows += k
    return text_rows, key_rows


def runs(rm: RealModel, paths: Sequence[str], dtypes: Sequence[str], offsets: Sequence[int], tokens: int,
         gaps: Sequence[int]) -> int:
    """How many tables :func:`measure_model` will report to ``progress`` (distinct ones run once)."""
    combos = [(p, d) for p in dict.fromkeys(paths) for d in dict.fromkeys(get_format(x).name for x in dtypes)]
    floors = len({cache_format(rm.schedule, p, d) for p, d in combos})
    extra = 1 if rm.dtype != "float32" else 0
    return len(set(offsets)) * (1 + floors + len(combos) + extra) if tokens or gaps else 0


def default_gaps(tokens: int) -> tuple[int, ...]:
    """The pass-key gaps a window of ``tokens`` asks by default: :data:`DEFAULT_GAPS` that leave a quarter of it
    for the key and the question (no window: all of them), else half the window.

    >>> default_gaps(8192), default_gaps(1024), default_gaps(0)
    ((1024, 4096, 6144), (512,), (1024, 4096, 6144))
    """
    tokens = check_int(tokens, "tokens", minimum=0)
    if not tokens:
        return DEFAULT_GAPS
    return tuple(g for g in DEFAULT_GAPS if 4 * g <= 3 * tokens) or (max(1, tokens // 2),)


def _float32_reference(rm: RealModel, w: PasskeyWindow, offset: int, gaps: Sequence[int], text: bool) -> _Run:
    """The exact run with the same weights in float32 (the model is cast up and back: both casts are exact)."""
    import torch

    low = rm.dtype
    rm.model.to(torch.float32)
    rm.dtype = "float32"
    try:
        span = np.arange(offset, offset + w.span(gaps))
        return _run_window(rm, w, offset, gaps, text, [rm.tables("exact", "float64", span)])[0]
    finally:
        rm.model.to(getattr(torch, low))
        rm.dtype = low
