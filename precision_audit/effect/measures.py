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
* long-range retrieval (:class:`PasskeyRow`): a five-digit key, ``gap``
  tokens of filler, then the question; the answer counts when every digit is
  the model's greedy choice (scored in one forward with the answer
  teacher-forced: greedy decoding yields the key exactly when each of its
  tokens is the most likely one given the ones before).

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
           "PasskeyRow", "TextEffectRow", "default_text", "measure_model", "passkey_prompts", "runs"]

DEFAULT_MODEL_PATHS = ("lowp", "lowp-inv-freq", "fp32")
DEFAULT_MODEL_OFFSETS = (0, 2**20)
DEFAULT_TOKENS = 1024
DEFAULT_GAPS = (1024,)
DEFAULT_KEYS = 4
TEXT_FILE = "effect_text.txt"
_KEY_SEED = 2026
_BATCH_TOKENS = 4096  # rows of one forward: at most this many tokens (4 x 1024)
_STATS_BLOCK = 512  # tokens whose float64 log-probabilities are held at once
_FILLER = ("The lamps along the harbour came on one by one while the boats rocked against the pier, and a cold "
           "wind carried the smell of salt across the empty square. ")
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


def passkey_prompts(tokenizer: Any, gap: int, keys: int = DEFAULT_KEYS) -> tuple[np.ndarray, int, list[int]]:
    """Token ids (keys, n) of the passkey task, the index of the first answer token, and the keys.

    The keys are five-digit numbers from a fixed seed; the filler is cut at
    exactly ``gap`` tokens, so every row has the same length when the
    tokenizer spells five-digit numbers with a fixed count of tokens.
    """
    rng = np.random.default_rng(_KEY_SEED)
    values = [int(k) for k in rng.integers(10000, 100000, size=keys)]
    enc = (lambda s: list(tokenizer(s, add_special_tokens=False)["input_ids"]))
    filler = enc(_FILLER)
    filler = (filler * (gap // len(filler) + 1))[:gap]
    rows, start = [], None
    for k in values:
        prompt = enc(_HEAD.format(key=k)) + filler + enc(_QUESTION)
        rows.append(prompt + enc(f" {k}"))
        start = len(prompt) if start is None else start
        if len(prompt) != start or len(rows[-1]) != len(rows[0]):
            raise ValueError("the tokenizer spells the passkey prompts with different lengths; give one key")
    return np.array(rows, dtype=np.int64), int(start), values


def _digest(c: np.ndarray, s: np.ndarray) -> bytes:
    return hashlib.blake2b(c.tobytes() + s.tobytes(), digest_size=16).digest()


class _Runner:
    """Forwards of one token batch at one offset, one per distinct cos/sin table (cached by their bits)."""

    def __init__(self, rm: RealModel, ids: np.ndarray, offset: int, keep: int, progress: Callable[[int], None] | None):
        import torch

        self.rm, self.offset, self.keep, self.progress = rm, offset, keep, progress
        self.ids = torch.as_tensor(ids, device=rm.device)
        self.pos = np.arange(offset, offset + ids.shape[1])
        self.cache: dict[bytes, Any] = {}

    def tables(self, path: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
        return self.rm.tables(path, dtype, self.pos)

    def logits(self, wanted: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Any]:
        """The model's logits (rows, keep, vocab; float32) for each table pair, each distinct pair run once."""
        import torch

        new = {}
        for c, s in wanted:
            key = _digest(c, s)
            if key not in self.cache:
                new[key] = (c, s)
        rows = self.ids.shape[0]
        per = self.per_forward()
        todo = list(new.items())
        for i in range(0, len(todo), per):
            part = todo[i:i + per]
            tables = [t for _, t in part for _ in range(rows)]
            self.rm.set_tables(tables, self.offset)
            ids = self.ids.repeat(len(part), 1)
            pos = torch.as_tensor(self.pos, device=self.rm.device)[None].expand(ids.shape[0], -1)
            try:
                with torch.inference_mode():
                    logits = self.rm.forward(input_ids=ids, position_ids=pos, logits_to_keep=self.keep).logits
            finally:
                self.rm.set_tables(None)
            out = logits.float().cpu()
            for j, (key, _) in enumerate(part):
                self.cache[key] = out[j * rows:(j + 1) * rows]
        if self.progress is not None:
            self.progress(len(wanted))
        return [self.cache[_digest(c, s)] for c, s in wanted]

    def per_forward(self) -> int:
        """How many tables one forward runs (their rows side by side, :data:`_BATCH_TOKENS` at most)."""
        return max(1, _BATCH_TOKENS // (self.ids.shape[0] * self.ids.shape[1]))

    def forget(self, tables: Sequence[tuple[np.ndarray, np.ndarray]], keep: tuple[np.ndarray, np.ndarray]) -> None:
        """Drop the logits of these tables (all but ``keep``'s): a long window's are 1.6 GB each."""
        kept = _digest(*keep)
        for c, s in tables:
            if _digest(c, s) != kept:
                self.cache.pop(_digest(c, s), None)

    def compare(self, paths: Sequence[tuple[str, str]]) -> tuple[dict[str, str], Any, dict[str, Any], list[Any]]:
        """Each path's cache format, and the logits of the exact run, of each cache format's floor and of each path
        (one forward per distinct table)."""
        caches = {p: cache_format(self.rm.schedule, p, d) for p, d in paths}
        floors = {f: self.tables("floor", f) for f in dict.fromkeys(caches.values())}
        out = self.logits([self.tables("exact", "float64"), *floors.values(), *(self.tables(p, d) for p, d in paths)])
        return caches, out[0], dict(zip(floors, out[1:1 + len(floors)])), out[1 + len(floors):]


def _log_probs(logits: Any) -> Any:
    """float64 log-probabilities of float32 logits (float32 log-softmax would leave KL estimates of a few 1e-9 that
    are below zero for nearly equal distributions)."""
    import torch

    return torch.log_softmax(logits.double(), dim=-1)


def _text_stats(ref: Any, logits: Any, targets: Any) -> tuple[float, float, float, float, float, float, float]:
    """KL, top-1 agreement, NLL change; KL and top-1 over the second half; the largest and the 99th-percentile KL
    of one token (the percentile as torch.quantile interpolates it; inf where some token's KL is).

    ``ref``: the exact run's logits (T, V); ``logits``: the path's (T, V).  Each is taken to float64
    log-probabilities a block of tokens at a time (an 8K-token window of a 49K vocabulary is 3 GB in float64).
    The KL is a sum of float64 terms, rounded to within ~1e-16 of a value that is never negative: clamped at 0.
    """
    import torch

    kls, agrees, nlls = [], [], []
    for a in range(0, ref.shape[0], _STATS_BLOCK):
        r, lp = _log_probs(ref[a:a + _STATS_BLOCK]), _log_probs(logits[a:a + _STATS_BLOCK])
        t = targets[a:a + _STATS_BLOCK, None]
        kl = (r.exp() * (r - lp)).sum(-1)  # NaN where the path's cos/sin were not finite: counted as inf
        kls.append(torch.where(torch.isnan(kl), torch.full_like(kl, float("inf")), kl).clamp_min(0.0))
        agree = r.argmax(-1) == torch.where(torch.isnan(lp), torch.full_like(lp, -float("inf")), lp).argmax(-1)
        agrees.append(agree & ~torch.isnan(lp).any(-1))
        nll = -(lp.gather(-1, t)[:, 0] - r.gather(-1, t)[:, 0])
        nlls.append(torch.where(torch.isnan(nll), torch.full_like(nll, float("inf")), nll))
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


def _text_rows(rm: RealModel, ids: np.ndarray, paths: Sequence[tuple[str, str]], offset: int,
               f32: dict[int, Any], progress: Callable[[int], None] | None) -> list[TextEffectRow]:
    import torch

    run = _Runner(rm, ids[None], offset, 0, progress)
    caches = {p: cache_format(rm.schedule, p, d) for p, d in paths}
    exact = run.tables("exact", "float64")
    ref = run.logits([exact])[0][0, :-1]
    targets = torch.as_tensor(ids[1:])
    dt = _text_stats(f32[offset], ref, targets) if offset in f32 else None
    # each table's statistics as soon as its forward is done, its logits then dropped: the floors (once per cache
    # format), then the paths
    keys = {t: run.tables(*t) for t in [("floor", f) for f in dict.fromkeys(caches.values())] + list(paths)}
    digests = {t: _digest(*tab) for t, tab in keys.items()}
    todo = list({digests[t]: tab for t, tab in keys.items()}.items())  # each distinct table once
    stats = {}
    for i in range(0, len(todo), run.per_forward()):
        part = todo[i:i + run.per_forward()]
        for (key, _), lp in zip(part, run.logits([tab for _, tab in part])):
            stats[key] = _text_stats(ref, lp[0, :-1], targets)
        run.forget([tab for _, tab in part], exact)
    out = []
    for p, d in paths:
        st = stats[digests[p, d]]
        f = stats[digests["floor", caches[p]]]
        out.append(TextEffectRow(rm.name, p, get_format(d).name, caches[p], rm.dtype, offset, len(ids), *st,
                                 f[0], f[1], f[2], f[3], f[5], f[6], dt[0] if dt else None, dt[1] if dt else None))
    return out


def _passkey_correct(lp: Any, ids: np.ndarray, start: int) -> int:
    """Keys answered exactly: every answer token is the most likely one (``lp``: logits of the last tokens)."""
    import torch

    answer = torch.as_tensor(ids[:, start:])
    pred = torch.where(torch.isnan(lp), torch.full_like(lp, -float("inf")), lp)[:, :-1].argmax(-1)
    return int((pred == answer).all(-1).sum())


def _passkey_rows(rm: RealModel, gap: int, keys: int, paths: Sequence[tuple[str, str]], offset: int,
                  f32: dict[tuple[int, int], int], progress: Callable[[int], None] | None) -> list[PasskeyRow]:
    ids, start, _ = passkey_prompts(rm.tokenizer, gap, keys)
    caches, exact, floors, per_path = _Runner(rm, ids, offset, ids.shape[1] - start + 1, progress).compare(paths)
    floor = {f: _passkey_correct(lp, ids, start) for f, lp in floors.items()}
    return [PasskeyRow(rm.name, p, get_format(d).name, caches[p], rm.dtype, offset, gap, keys,
                       _passkey_correct(lp, ids, start), _passkey_correct(exact, ids, start), floor[caches[p]],
                       f32.get((gap, offset)))
            for (p, d), lp in zip(paths, per_path)]


def measure_model(rm: RealModel, paths: Sequence[str] = DEFAULT_MODEL_PATHS, dtypes: Sequence[str] = ("bfloat16",),
                  offsets: Sequence[int] = DEFAULT_MODEL_OFFSETS, *, tokens: int = DEFAULT_TOKENS,
                  text: str | None = None, gaps: Sequence[int] = DEFAULT_GAPS, keys: int = DEFAULT_KEYS,
                  progress: Callable[[int], None] | None = None) -> tuple[list[TextEffectRow], list[PasskeyRow]]:
    """Text rows (``tokens`` > 0) and passkey rows (one per gap) per path, dtype and offset.

    ``text``: the user's text (default :func:`default_text`), its first
    ``tokens`` tokens; ``gaps``: filler tokens between the key and the
    question (at most the model's trained context less the prompt);
    ``progress(k)`` after each batch of ``k`` tables (:func:`runs` counts them all).
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
    gaps = [check_int(g, "gap", minimum=1) for g in dict.fromkeys(gaps)]
    context = rm.context or None
    ids = None
    if tokens:
        ids = np.array(rm.tokenizer(text if text is not None else default_text())["input_ids"][:tokens], np.int64)
        if len(ids) < 4:
            raise ValueError(f"the text has {len(ids)} tokens; give at least 4")
    spans = {g: passkey_prompts(rm.tokenizer, g, 1)[0].shape[1] for g in gaps}
    for g, n in spans.items():
        if context and n > context:
            raise ValueError(f"gap {g}: the passkey prompt is {n} tokens, beyond the model's trained context "
                             f"{context}")
    offsets = _check_offsets(offsets, max([len(ids) if ids is not None else 0, *spans.values()]))
    f32_text: dict[int, Any] = {}
    f32_key: dict[tuple[int, int], int] = {}
    if rm.dtype != "float32":
        _float32_references(rm, ids, gaps, keys, offsets, f32_text, f32_key, progress)
    text_rows, key_rows = [], []
    for o in offsets:
        if ids is not None:
            text_rows += _text_rows(rm, ids, combos, o, f32_text, progress)
        for g in gaps:
            key_rows += _passkey_rows(rm, g, keys, combos, o, f32_key, progress)
    return text_rows, key_rows


def runs(rm: RealModel, paths: Sequence[str], dtypes: Sequence[str], offsets: Sequence[int], tokens: int,
         gaps: Sequence[int]) -> int:
    """How many tables :func:`measure_model` will report to ``progress`` (distinct ones run once)."""
    combos = [(p, d) for p in dict.fromkeys(paths) for d in dict.fromkeys(get_format(x).name for x in dtypes)]
    floors = len({cache_format(rm.schedule, p, d) for p, d in combos})
    per = (1 + floors + len(combos)) * ((1 if tokens else 0) + len(set(gaps)))
    extra = (1 if tokens else 0) + len(set(gaps)) if rm.dtype != "float32" else 0
    return len(set(offsets)) * (per + extra)


def _float32_references(rm: RealModel, ids: np.ndarray | None, gaps: Sequence[int], keys: int,
                        offsets: Sequence[int], f32_text: dict[int, Any], f32_key: dict[tuple[int, int], int],
                        progress: Callable[[int], None] | None) -> None:
    """The exact runs with the same weights in float32 (the model is cast up and back: both casts are exact)."""
    import torch

    low = rm.dtype
    rm.model.to(torch.float32)
    rm.dtype = "float32"
    try:
        for o in offsets:
            if ids is not None:
                run = _Runner(rm, ids[None], o, 0, progress)
                f32_text[o] = run.logits([run.tables("exact", "float64")])[0][0, :-1]
            for g in gaps:
                pk, start, _ = passkey_prompts(rm.tokenizer, g, keys)
                run = _Runner(rm, pk, o, pk.shape[1] - start + 1, progress)
                f32_key[(g, o)] = _passkey_correct(run.logits([run.tables("exact", "float64")])[0], pk, start)
    finally:
        rm.model.to(getattr(torch, low))
        rm.dtype = low
