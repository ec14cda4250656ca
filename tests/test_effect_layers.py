"""effect on models with several rotary code paths (precision_audit.effect.real): per-layer-type rotary modules
(transformers' Gemma 3: one ``{layer_type}_inv_freq`` buffer per layer type, ``forward(x, position_ids,
layer_type)``) and several rotary modules in one model.

Every model is a tiny random-weight one built from a transformers config (no file, no download). Referee:
transformers itself: injecting each code path's own float32 cos/sin (the module's unchanged output, per layer
type) gives the unpatched model's logits bit for bit, which holds only if every layer type gets its own tables
(the two schedules' tables differ, so a swap changes the logits).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from precision_audit.config import load_config_dict  # noqa: E402
from precision_audit.effect.measures import measure_model  # noqa: E402
from precision_audit.effect.real import attach, rope_tables  # noqa: E402

VOCAB = 64
WINDOW = 32  # the sliding layers attend keys with kv_idx > q_idx - WINDOW: up to 31 back
T = 200
IDS = torch.randint(0, VOCAB, (1, T), generator=torch.Generator().manual_seed(3))


class ByteTokenizer:
    """A stand-in tokenizer: one token per byte (mod the vocabulary)."""

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [b % VOCAB for b in text.encode()]}


def gemma3_config() -> object:
    # Gemma 3's convention at tiny sizes: every 2nd layer full attention (sliding_window_pattern), the sliding
    # layers with their own default schedule (base 10000), the full ones linear x8 at base 1e6 (Gemma 3 4B's)
    return transformers.Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=4096, sliding_window=WINDOW,
        sliding_window_pattern=2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}})


def tiny_gemma3():
    torch.manual_seed(0)
    cfg = gemma3_config()
    net = transformers.Gemma3ForCausalLM(cfg).eval()
    return net, attach(net, ByteTokenizer(), load_config_dict(cfg.to_dict(), name="tiny-gemma3"))


def logits(rm, ids=IDS):
    with torch.inference_mode():
        return rm.forward(input_ids=ids, position_ids=torch.arange(ids.shape[1])[None]).logits


def own_tables(rm, path, n=T):
    """The code path's own (unpatched, float32) cos/sin at positions 0 .. n - 1, one column per frequency."""
    mod = dict(rm.model.named_modules())[path.module]
    args = () if path.layer_type is None else (path.layer_type,)
    with torch.inference_mode():
        c, s = mod._pa_forward(torch.zeros(1), torch.arange(n)[None], *args)
    f = path.width // 2
    assert torch.equal(c[..., :f], c[..., f:])  # rotate-half layout, as detected
    return c[0, :, :f].double().numpy(), s[0, :, :f].double().numpy()


def test_gemma3_code_paths_are_found_per_layer_type():
    _, rm = tiny_gemma3()
    found = {p.layer_type: p for p in rm.paths}
    assert sorted(found) == ["full_attention", "sliding_attention"]
    assert {p.module for p in rm.paths} == {"model.rotary_emb"} and len(rm.modules) == 1
    assert found["sliding_attention"].schedule.base == 10000.0 and found["sliding_attention"].reach == WINDOW - 1
    full = found["full_attention"]
    assert full.schedule.base == 1e6 and full.schedule.scaling == "linear" and full.reach is None
    assert rm.schedule == full.schedule and rm.schedules == (full.schedule, found["sliding_attention"].schedule)
    assert "[sliding_attention]" in rm.describe() and f"up to {WINDOW - 1} back" in rm.describe()


def test_gemma3_per_layer_type_injection_of_the_modules_own_tables_is_bit_exact():
    _, rm = tiny_gemma3()
    ref = logits(rm)  # no tables: the module's own forward
    by_schedule = {p.schedule: own_tables(rm, p) for p in rm.paths}
    blocks = [by_schedule[s] for s in rm.schedules]
    both = (np.concatenate([c for c, _ in blocks], -1), np.concatenate([s for _, s in blocks], -1))
    rm.set_tables([both], 0)
    assert torch.equal(logits(rm), ref)
    f = rm.schedules[0].n_freq  # the two blocks swapped: each layer type gets the other's rotation
    swapped = tuple(np.concatenate([t[:, f:], t[:, :f]], -1) for t in both)
    rm.set_tables([swapped], 0)
    assert not torch.equal(logits(rm), ref)
    rm.set_tables(None)
    assert torch.equal(logits(rm), ref)


def test_gemma3_tables_are_each_schedules_side_by_side():
    _, rm = tiny_gemma3()
    pos = np.arange(5)
    c, s = rm.tables("exact", "float64", pos)
    want = [rope_tables(sc, "exact", "float64", pos) for sc in rm.schedules]
    assert np.array_equal(c, np.concatenate([w[0] for w in want], -1))
    assert np.array_equal(s, np.concatenate([w[1] for w in want], -1))
    with pytest.raises(ValueError, match="takes 16 columns \\(8 \\+ 8"):
        rm.set_tables([want[0]], 0)


def test_gemma3_measures_run_every_layer_type():
    # exact angles in float32 cos/sin (the fp32 preset at offset 0) cost the tiny model little; bf16 position ids
    # at offset 64K (runs of 512 positions share one) change its outputs far beyond the floor
    _, rm = tiny_gemma3()
    text, keys = measure_model(rm, ["lowp", "fp32"], ["bfloat16"], [2**16], tokens=160,
                               text="the quick brown fox jumps over the lazy dog. " * 4, gaps=[40], keys=1)
    lowp, fp32 = text
    assert lowp.kl > 10 * max(lowp.floor_kl, 1e-12) and fp32.kl <= 10 * max(fp32.floor_kl, 1e-12)
    assert [(k.path, k.gap) for k in keys] == [("lowp", 40), ("fp32", 40)]


def test_gemma3_calibration_judges_each_layer_type_within_its_reach():
    # distance 1: both layer types attend it, the row carries the worse verdict of the two schedules' audits;
    # distance 100 (beyond the sliding window's 31): the full-attention schedule's alone.  Referee: rope.audit of
    # each schedule on its own, and the closed-form reach of the sliding layers (window - 1)
    from precision_audit.effect.model_calibration import calibrate_model
    from precision_audit.rope import audit, preset
    from precision_audit.verdicts import rope_verdict, worst

    _, rm = tiny_gemma3()
    full, sliding = rm.schedules
    assert rm.sees(sliding, WINDOW - 1) and not rm.sees(sliding, WINDOW) and rm.sees(full, 10**6)
    rows = calibrate_model(rm, ["lowp", "lowp-inv-freq"], [2048], [1, 100], tokens=64, keys=1)
    assert [(r.path, r.distance) for r in rows] == [("lowp", 1), ("lowp", 100), ("lowp-inv-freq", 1),
                                                    ("lowp-inv-freq", 100)]
    for r in rows:
        judged = []
        for s in ((full, sliding) if r.distance == 1 else (full,)):
            a = audit(s, [preset(r.path, "bfloat16")], [2048], distances=[r.distance])[0]
            err = a.pair_errors[0].max_rotation_error
            judged.append((rope_verdict(a.max_rotation_error, a.colliding_positions,
                                        pair_errors=[(r.distance, err)]), err))
        assert r.verdict == worst([v for v, _ in judged])
        assert r.pair_max_error == max(e for v, e in judged if v == r.verdict)


class TwoLlamas(torch.nn.Module):
    """A user's model with two rotary modules of two schedules (as Gemma 3 was built before transformers 4.52:
    ``rotary_emb`` for the full layers, ``rotary_emb_local`` for the sliding ones): two Llamas whose logits add."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096)
        self.full = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            **common, rope_parameters={"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}))
        self.local = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            **common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))

    def get_input_embeddings(self):
        return self.full.get_input_embeddings()

    def forward(self, input_ids, position_ids, **kwargs):
        out = self.full(input_ids=input_ids, position_ids=position_ids, **kwargs)
        out.logits = out.logits + self.local(input_ids=input_ids, position_ids=position_ids, **kwargs).logits
        return out


def test_several_rotary_modules_each_get_their_own_schedules_tables():
    net = TwoLlamas().eval()
    rm = attach(net, ByteTokenizer(), load_config_dict(gemma3_config().to_dict(), name="two"))
    assert [(p.module, p.layer_type, p.schedule.base) for p in rm.paths] == [
        ("full.model.rotary_emb", None, 1e6), ("local.model.rotary_emb", None, 10000.0)]
    ref = logits(rm)
    blocks = [own_tables(rm, p) for p in rm.paths]  # rm.schedules: full's first, then local's
    rm.set_tables([tuple(np.concatenate([b[i] for b in blocks], -1) for i in (0, 1))], 0)
    assert torch.equal(logits(rm), ref)
    rm.set_tables(None)


def test_a_module_whose_schedule_the_config_does_not_declare_is_refused():
    net = TwoLlamas().eval()
    llama = load_config_dict(net.local.config.to_dict(), name="one-schedule")  # declares base 10000 only
    with pytest.raises(ValueError, match="do not match the schedule read from the config"):
        attach(net, None, llama)


@pytest.fixture(scope="module")
def gemma3_checkpoint(tmp_path_factory):
    """The tiny Gemma 3 saved as a checkpoint directory with a byte-level BPE tokenizer trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    d = tmp_path_factory.mktemp("tiny-gemma3")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the lamps came on one by one in the harbour 0123456789"] * 50,
                            trainers.BpeTrainer(vocab_size=VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.save_pretrained(d)
    torch.manual_seed(0)
    cfg = gemma3_config()
    cfg.vocab_size = len(fast)
    transformers.Gemma3ForCausalLM(cfg).save_pretrained(d)
    return d


def test_effect_and_config_weights_run_a_gemma3_checkpoint(gemma3_checkpoint):
    from click.testing import CliRunner

    from precision_audit.cli import main

    r = CliRunner().invoke(main, ["effect", "--model", str(gemma3_checkpoint), "-r", "fp32", "--offset", "0",
                                  "--tokens", "160", "--gap", "32", "--keys", "1"])
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    assert "model.rotary_emb[full_attention]: " in head and "rope_type=linear, factor=8" in head
    assert "model.rotary_emb[sliding_attention]: " in head and f"(its layers see up to {WINDOW - 1} back)" in head
    r = CliRunner().invoke(main, ["effect", "--model", str(gemma3_checkpoint), "-r", "fp32", "--offset", "0",
                                  "--tokens", "128", "--gap", "8", "--keys", "1", "--json"])
    assert r.exit_code == 0, r.output
    paths = {p["layer_type"]: p for p in json.loads(r.stdout)["rotary_paths"]}
    assert (paths["sliding_attention"]["reach"], paths["full_attention"]["reach"]) == (WINDOW - 1, None)
    assert paths["full_attention"]["module"] == "model.rotary_emb" and paths["full_attention"]["layout"] == "half"
    r = CliRunner().invoke(main, ["config", str(gemma3_checkpoint / "config.json"), "--stack", "transformers",
                                  "-l", "2K", "--weights", str(gemma3_checkpoint)])
    assert r.exit_code == 0, r.output
    assert "With the weights" in r.output and "passkey" in r.output


def test_effect_says_in_one_line_when_it_runs_eager_attention(gemma3_checkpoint, monkeypatch):
    # the SDPA refusal of a bf16 forward on an AVX512-BF16 CPU under ATEN_CPU_CAPABILITY=default, simulated on
    # every host: the command still measures, and one stderr line says what it changed
    from click.testing import CliRunner
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from precision_audit.cli import main

    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def refuse(module, query, *args, **kwargs):  # as torch does: bf16 only (the float32 reference runs)
        if query.dtype == torch.bfloat16:
            raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")
        return sdpa(module, query, *args, **kwargs)

    monkeypatch.setitem(ALL_ATTENTION_FUNCTIONS, "sdpa", refuse)
    r = CliRunner().invoke(main, ["effect", "--model", str(gemma3_checkpoint), "--model-dtype", "bfloat16", "-r",
                                  "fp32", "--offset", "0", "--tokens", "128", "--gap", "8", "--keys", "1"])
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if line.startswith("note: ")]
    assert notes == ["note: torch's SDPA refused a bfloat16 forward on this machine (pack_vnni2 is only supported "
                     "when avx512 is supported): eager attention used instead"]


def test_questions_from_the_kv_cache_of_sliding_layers_are_the_full_forwards():
    # effect asks each pass key's question from a copy of the KV cache; Gemma 3's sliding layers keep only their
    # window there.  Referee: the model run without a cache on each prompt itself (tests/_cached_questions.py)
    from _cached_questions import assert_questions_are_full_forwards
    from precision_audit.effect.measures import passkey_window

    _, rm = tiny_gemma3()
    rm.tokenizer = ByteTokenizer()
    w = passkey_window(rm.tokenizer, [(5 * i) % 61 + 2 for i in range(300)], 240, 2)
    assert assert_questions_are_full_forwards(rm, w, [10, 60, 130], 300, False).logits is None
