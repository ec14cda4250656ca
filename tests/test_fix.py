"""keep_rotary_fp32 against the real third-party code: transformers' rotary modules built from public configs.

Referee: the same transformers module class built from the same config and never cast (its cos/sin for a
bfloat16 input, computed on this machine).  A fixed-then-cast module must return the same bits; the
cast-without-fix module must not (its inv_freq lost 16 bits).  No weights are downloaded; every model is
built from a config.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import re
import warnings
from pathlib import Path
from typing import Any

import _thirdparty  # tests/ helper: third-party references, imported and run
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from precision_audit.effect.real import forward_portably  # noqa: E402
from precision_audit.fix import (  # noqa: E402
    ProtectedBuffer,
    ProtectionReport,
    buffer_kind,
    keep_rotary_fp32,
    release_rotary_fp32,
)

PHI35 = json.loads((Path(__file__).parent / "data" / "phi-3.5-mini-instruct.json").read_text())
L = 32768

# family -> (config class, rotary module class, config kwargs, forward extra args).  Public configs:
# Llama-3.1-8B, Qwen2-7B, Mistral-7B-v0.3, Gemma-3-4B (sliding: default 10000, full: linear x8 at 1M),
# Phi-3.5-mini (longrope), gpt-oss-20b (yarn, truncate=False), DeepSeek-V3 (yarn with mscale).
FAMILIES: dict[str, tuple[str, str, dict[str, Any], tuple[Any, ...]]] = {
    "llama": ("LlamaConfig", "llama:LlamaRotaryEmbedding",
              dict(head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
                   rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0, original_max_position_embeddings=8192)), ()),
    "qwen2": ("Qwen2Config", "qwen2:Qwen2RotaryEmbedding",
              dict(hidden_size=3584, num_attention_heads=28, max_position_embeddings=131072,
                   rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), ()),
    "mistral": ("MistralConfig", "mistral:MistralRotaryEmbedding",
                dict(head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=32768,
                     rope_parameters=dict(rope_type="default", rope_theta=1000000.0)), ()),
    "gemma3-sliding": ("Gemma3TextConfig", "gemma3:Gemma3RotaryEmbedding",
                       dict(head_dim=256, max_position_embeddings=131072,
                            rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                                                 full_attention=dict(rope_type="linear", rope_theta=1000000.0,
                                                                     factor=8.0))), ("sliding_attention",)),
    "gemma3-full": ("Gemma3TextConfig", "gemma3:Gemma3RotaryEmbedding",
                    dict(head_dim=256, max_position_embeddings=131072,
                         rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                                              full_attention=dict(rope_type="linear", rope_theta=1000000.0,
                                                                  factor=8.0))), ("full_attention",)),
    "phi3": ("Phi3Config", "phi3:Phi3RotaryEmbedding",
             dict(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
                  original_max_position_embeddings=4096,
                  rope_parameters=dict(rope_type="longrope", rope_theta=PHI35["rope_theta"],
                                       original_max_position_embeddings=4096,
                                       short_factor=PHI35["rope_scaling"]["short_factor"],
                                       long_factor=PHI35["rope_scaling"]["long_factor"])), ()),
    "gpt_oss": ("GptOssConfig", "gpt_oss:GptOssRotaryEmbedding",
                dict(head_dim=64, max_position_embeddings=131072,
                     rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0,
                                          beta_slow=1.0, truncate=False, original_max_position_embeddings=4096)), ()),
    "deepseek_v3": ("DeepseekV3Config", "deepseek_v3:DeepseekV3RotaryEmbedding",
                    dict(qk_rope_head_dim=64, max_position_embeddings=163840,
                         rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=40.0, mscale=1.0,
                                              mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0,
                                              original_max_position_embeddings=4096)), ()),
}


def _import(where: str, name: str) -> Any:
    return _thirdparty.private(where, name)


def _config(family: str) -> Any:
    cfg_name, _, kwargs, _ = FAMILIES[family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _import("transformers", cfg_name)(**kwargs)


def _rotary(family: str) -> Any:
    """A fresh rotary module of this family, as transformers builds it from the config (float32)."""
    mod, _, name = FAMILIES[family][1].partition(":")
    cls = _import(f"transformers.models.{mod}.modeling_{mod}", name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(_config(family))


def _cos_sin(mod: Any, family: str, dtype: Any = None) -> tuple[Any, Any]:
    """cos/sin in one call for an input of ``dtype`` (bfloat16 by default), at every 16th position below L
    and at L - 1 (longrope picks its factors from the largest position of the call).  Elementwise: each
    position's bits do not depend on the others, and reference and fixed module get the same tensor."""
    x = torch.zeros(1, dtype=dtype or torch.bfloat16)
    pos = torch.cat([torch.arange(0, L, 16), torch.tensor([L - 1])])[None]
    with torch.no_grad():
        return mod(x, pos, *FAMILIES[family][3])


@functools.cache
def _as_built(family: str, dtype: str = "bfloat16") -> tuple[Any, Any]:
    """The referee: an uncast module's cos/sin (real transformers code on this machine)."""
    return _cos_sin(_rotary(family), family, getattr(torch, dtype))


def _same(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return all(u.dtype == v.dtype and torch.equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fix_before_cast_keeps_as_built_bits(family):
    as_built = _as_built(family)
    cast = _rotary(family).to(torch.bfloat16)
    assert not _same(_cos_sin(cast, family), as_built)  # the cast damages the module
    fixed = _rotary(family)
    report = keep_rotary_fp32(fixed)
    assert report.modules == ("",) and not report.restored
    fixed = fixed.to(torch.bfloat16)
    assert {b.dtype for b in fixed.buffers()} == {torch.float32}
    assert _same(_cos_sin(fixed, family), as_built)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fix_after_cast_rebuilds_from_config(family):
    as_built = _as_built(family)
    damaged = _rotary(family).to(torch.bfloat16)
    report = keep_rotary_fp32(damaged)
    names = sorted(n for n, _ in damaged.named_buffers())
    assert sorted(b.name for b in report.restored) == names and {b.dtype for b in report.buffers} == {"bfloat16"}
    assert all(b.rotary_protocol for b in report.buffers)
    assert _same(_cos_sin(damaged.to(torch.bfloat16), family), as_built)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_damaged_llama_restored_exactly_after_cast_to(dtype):
    dt = getattr(torch, dtype)
    as_built = _as_built("llama", dtype)
    mod = _rotary("llama").to(dt)
    damaged = _cos_sin(mod, "llama", dt)
    assert not _same(damaged, as_built)
    keep_rotary_fp32(mod)
    mod.to(dt)
    out = _cos_sin(mod, "llama", dt)
    assert out[0].dtype == dt and _same(out, as_built)


CASTS = {
    "to(dtype)": lambda m: m.to(torch.bfloat16),
    "to(device, dtype)": lambda m: m.to(torch.device("cpu"), torch.float16),
    "to(device=, dtype=)": lambda m: m.to(device="cpu", dtype=torch.float16),
    "half()": lambda m: m.half(),
    "bfloat16()": lambda m: m.bfloat16(),
    "double()": lambda m: m.double(),
    "type(float16)": lambda m: m.type(torch.float16),
}


@pytest.mark.parametrize("cast", list(CASTS))
def test_every_cast_path_keeps_float32(cast):
    mod = _rotary("llama")
    built = {n: b.clone() for n, b in mod.named_buffers()}
    keep_rotary_fp32(mod)
    CASTS[cast](mod)
    for n, b in mod.named_buffers():
        assert b.dtype == torch.float32 and torch.equal(b, built[n]), n


def test_device_moves_still_apply():
    # cpu -> meta is a device move any machine can do: the protected buffers follow it in float32
    mod = _rotary("llama")
    keep_rotary_fp32(mod)
    same = mod.inv_freq
    mod.to(torch.device("cpu"))
    assert mod.inv_freq is same  # a no-op move keeps the tensor
    mod.to(device="meta", dtype=torch.bfloat16)
    assert mod.inv_freq.device.type == "meta" and mod.inv_freq.dtype == torch.float32
    mod.to_empty(device="cpu")
    assert mod.inv_freq.device.type == "cpu" and mod.inv_freq.dtype == torch.float32


def _tiny_llama() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _import("transformers", "LlamaConfig")(
            vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096,
            rope_parameters=dict(rope_type="default", rope_theta=500000.0))
        return _import("transformers", "LlamaForCausalLM")(cfg)


def test_whole_model_weights_cast_rotary_kept_state_dict_unchanged():
    model = _tiny_llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    inv = model.model.rotary_emb.inv_freq.clone()
    report = keep_rotary_fp32(model)
    fixed = model.state_dict()
    assert list(fixed) == list(before) and all(torch.equal(fixed[k], before[k]) for k in before)  # the fix alone
    assert report.modules == ("model.rotary_emb",)
    assert [b.name for b in report.buffers] == ["inv_freq", "original_inv_freq"]
    model.to(torch.bfloat16)
    after = model.state_dict()
    assert list(after) == list(before)  # inv_freq buffers are non-persistent: not in state_dict
    assert all(after[k].shape == before[k].shape and after[k].dtype == torch.bfloat16 for k in before)
    assert all(torch.equal(after[k], before[k].to(torch.bfloat16)) for k in before)  # weights cast as usual
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32 and torch.equal(model.model.rotary_emb.inv_freq, inv)
    ids = torch.arange(8)[None]
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.dtype == torch.bfloat16


def test_whole_model_rotary_matches_an_uncast_rotary_module():
    model = _tiny_llama()
    reference = copy.deepcopy(model.model.rotary_emb)
    keep_rotary_fp32(model)
    model.to(torch.bfloat16)
    x = torch.zeros(1, dtype=torch.bfloat16)
    pos = torch.arange(4096)[None]
    with torch.no_grad():
        assert _same(model.model.rotary_emb(x, pos), reference(x, pos))


def test_whole_model_logits_are_those_of_a_bf16_model_with_an_uncast_rotary_module():
    # referee: the same weights in bf16 with transformers' rotary module left uncast (built fp32, never cast)
    model = _tiny_llama()
    reference, plain = copy.deepcopy(model), copy.deepcopy(model)
    uncast = copy.deepcopy(model.model.rotary_emb)
    keep_rotary_fp32(model)
    for m in (model, reference, plain):
        m.to(torch.bfloat16)
    reference.model.rotary_emb = uncast
    ids = (torch.arange(1024) * 7 % 64)[None]
    with torch.no_grad():  # eager attention where torch's SDPA refuses bf16 on this CPU (the same for all three)
        got, want, cast = (forward_portably(m, input_ids=ids)[0].logits for m in (model, reference, plain))
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert not torch.equal(cast, want)  # without the fix the cast rotary module changes the logits


class TwoRotary(torch.nn.Module):
    """A user model holding two transformers rotary modules (one per-layer-type) and a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([_rotary("llama"), _rotary("gemma3-full")])


def test_model_with_two_rotary_modules():
    model = TwoRotary()
    as_built = (_as_built("llama"), _as_built("gemma3-full"))
    report = keep_rotary_fp32(model)
    assert report.modules == ("blocks.0", "blocks.1")
    assert [b.path for b in report.buffers][2:] == [
        "blocks.1.full_attention_inv_freq", "blocks.1.full_attention_original_inv_freq",
        "blocks.1.sliding_attention_inv_freq", "blocks.1.sliding_attention_original_inv_freq"]
    model.half()
    assert model.proj.weight.dtype == torch.float16
    assert _same(_cos_sin(model.blocks[0], "llama"), as_built[0])
    assert _same(_cos_sin(model.blocks[1], "gemma3-full"), as_built[1])


def test_idempotent_and_undo():
    mod = _rotary("llama")
    first = keep_rotary_fp32(mod)
    guard = mod.__dict__["_apply"]
    second = keep_rotary_fp32(mod)
    assert mod.__dict__["_apply"] is guard and first.buffers == second.buffers
    mod.bfloat16()
    assert keep_rotary_fp32(mod).buffers == first.buffers  # still float32: nothing restored
    assert second.undo() == 1 and first.undo() == 0 and "_apply" not in mod.__dict__
    built = _rotary("llama")
    mod.bfloat16()  # casting is back to normal: the buffers round as an unprotected module's do
    assert mod.inv_freq.dtype == torch.bfloat16 and torch.equal(mod.inv_freq, built.inv_freq.bfloat16())
    keep_rotary_fp32(mod)
    assert release_rotary_fp32(TwoRotary()) == 0 and release_rotary_fp32(mod) == 1


def test_modules_without_position_buffers_untouched():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    model.register_buffer("scale", torch.ones(3))
    report = keep_rotary_fp32(model)
    assert report.buffers == () and str(report) == "no rotary or ALiBi buffers found"
    assert all("_apply" not in m.__dict__ for m in model.modules())
    model.half()
    assert model.scale.dtype == torch.float16


def test_protected_model_survives_deepcopy_and_torch_save():
    model = TwoRotary()
    keep_rotary_fp32(model)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    for copied in (copy.deepcopy(model), torch.load(buf, weights_only=False)):
        copied.bfloat16()
        assert copied.proj.weight.dtype == torch.bfloat16
        assert copied.blocks[0].inv_freq.dtype == torch.float32
        assert copied.blocks[1].sliding_attention_inv_freq.dtype == torch.float32
        assert model.proj.weight.dtype == torch.float32  # the original is not affected by the copy's cast


def test_dynamic_rope_rebuffer_stays_protected():
    # dynamic NTK registers a new inv_freq buffer when the context grows: it is protected by name at cast time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _import("transformers", "LlamaConfig")(
            head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
            rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0))
        cls = _import("transformers.models.llama.modeling_llama", "LlamaRotaryEmbedding")
        ref, mod = cls(cfg), cls(cfg)
    keep_rotary_fp32(mod)
    x, pos = torch.zeros(1, dtype=torch.bfloat16), torch.arange(8192)[None]
    with torch.no_grad():
        want = ref(x, pos)
        mod(x, pos)  # grows: a new inv_freq buffer
        mod.bfloat16()
        assert mod.inv_freq.dtype == torch.float32
        assert _same(mod(x, pos), want)


def test_grown_dynamic_frequencies_downcast_are_refused():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _import("transformers", "LlamaConfig")(
            head_dim=128, hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
            rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0))
        mod = _import("transformers.models.llama.modeling_llama", "LlamaRotaryEmbedding")(cfg)
    with torch.no_grad():
        mod(torch.zeros(1), torch.arange(8192)[None])
    mod.bfloat16()
    with pytest.raises(ValueError, match="dynamic RoPE frequencies regrown for 8192 positions are already bfloat16"):
        keep_rotary_fp32(mod)
    assert "_apply" not in mod.__dict__


def test_phi3_long_inv_freq_attribute_is_reported_and_stays_float32():
    mod = _rotary("phi3")
    as_built = _as_built("phi3")
    _cos_sin(mod, "phi3")  # builds the plain attribute long_inv_freq (float32, from the config)
    report = keep_rotary_fp32(mod)
    assert [(b.name, b.where) for b in report.buffers] == [
        ("inv_freq", "buffer"), ("original_inv_freq", "buffer"), ("long_inv_freq", "attribute")]
    mod.bfloat16()
    assert mod.long_inv_freq.dtype == torch.float32  # casts never touch plain attributes
    assert _same(_cos_sin(mod, "phi3"), as_built)


class AxialTable(torch.nn.Module):
    """A rotary table outside the protocol (like vision/audio rotary modules): forward(seqlen) returns
    angles in its buffer's dtype, so keeping the buffer float32 would change its output's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16),
                             persistent=False)

    def forward(self, seqlen: int) -> Any:
        return torch.outer(torch.arange(seqlen, dtype=self.inv_freq.dtype), self.inv_freq)


def test_modules_outside_the_rotary_protocol_are_skipped():
    model = TwoRotary()
    model.table = AxialTable().bfloat16()  # already cast: no error, it is not ours to restore
    report = keep_rotary_fp32(model)
    assert report.modules == ("blocks.0", "blocks.1")
    assert [(b.path, b.protected, b.restored, b.rotary_protocol) for b in report.skipped] == [
        ("table.inv_freq", False, False, False)]
    assert "table.inv_freq (rotary, bfloat16, skipped: forward is not (x, position_ids, ...))" in str(report)
    assert "_apply" not in model.table.__dict__
    model.float()
    assert model.table.inv_freq.dtype == torch.float32 and model.table(4).dtype == torch.float32  # casts as before
    model.half()
    assert model.table(4).dtype == torch.float16 and model.blocks[0].inv_freq.dtype == torch.float32


# --------------------------------------------------------------------------- ALiBi


class UserAlibi(torch.nn.Module):
    """A user-defined ALiBi module caching its slopes and its bias as buffers (transformers' Bloom, Falcon
    and MPT build the bias in every forward instead).  Slopes 2**(-8 i / h) (Press et al. 2022)."""

    def __init__(self, heads: int = 8, length: int = 4096) -> None:
        super().__init__()
        slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float64) / heads)
        self.register_buffer("slopes", slopes.float())
        self.register_buffer("alibi", (slopes[:, None] * -torch.arange(length, dtype=torch.float64)).float(),
                             persistent=False)

    def forward(self, scores: Any) -> Any:
        n = scores.shape[-1]
        return scores + self.alibi[:, -n:].to(scores.dtype)


def test_alibi_buffers_kept_float32_and_bias_exact():
    ref, mod = UserAlibi(), UserAlibi()
    report = keep_rotary_fp32(mod)
    assert [(b.name, b.kind, b.rotary_protocol) for b in report.buffers] == [
        ("slopes", "alibi", False), ("alibi", "alibi", False)]
    mod.bfloat16()
    assert mod.slopes.dtype == mod.alibi.dtype == torch.float32
    assert torch.equal(mod.alibi, ref.alibi) and torch.equal(mod.slopes, ref.slopes)
    cast = UserAlibi().bfloat16()
    # the cast rounds the cached bias: distances up to 4095 times a slope keep 8 bits
    assert not torch.equal(cast.alibi.float(), ref.alibi)
    with pytest.raises(ValueError, match="UserAlibi: slopes, alibi already bfloat16, and the module has no config"):
        keep_rotary_fp32(cast)


def test_transformers_alibi_models_cache_no_bias_buffer():
    # the finding behind the ALiBi part: Bloom builds its bias in every forward, so a cast has nothing to round
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = _import("transformers", "BloomConfig")(vocab_size=64, hidden_size=32, n_layer=1, n_head=4)
        model = _import("transformers", "BloomForCausalLM")(cfg)
    assert keep_rotary_fp32(model).buffers == ()
    assert not [n for n, _ in model.named_buffers() if buffer_kind(n.rpartition(".")[2])]


# --------------------------------------------------------------------------- validation


def test_refuses_a_module_without_config_and_leaves_model_untouched():
    good, bare = _rotary("llama"), _rotary("qwen2")
    del bare.config
    model = torch.nn.ModuleList([good, bare.bfloat16()])
    with pytest.raises(ValueError, match=r"^1: inv_freq, original_inv_freq already bfloat16, and the module has no"):
        keep_rotary_fp32(model)
    assert "_apply" not in good.__dict__  # nothing protected: the plan failed before any change


def test_bad_input():
    # a wrong type is a TypeError naming the argument and showing the value (also a ValueError, which the
    # CLI turns into a usage error)
    for fn in (keep_rotary_fp32, release_rotary_fp32):
        for bad, shown in (({}, "{}"), (None, "None"), ("model.safetensors", "'model.safetensors'")):
            with pytest.raises(TypeError, match=rf"^model {re.escape(shown)} must be a torch.nn.Module, not "):
                fn(bad)
    with pytest.raises(ValueError, match="model None must be a torch.nn.Module"):
        release_rotary_fp32(None)
    with pytest.raises(TypeError, match="must be a tuple of ProtectedBuffer rows"):
        ProtectionReport(("inv_freq",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^name None must be a string"):
        buffer_kind(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^restored 'yes' must be True or False"):
        ProtectedBuffer("", "inv_freq", "rotary", "float32", "yes", True, (4,))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^shape \[4\] must be a tuple"):
        ProtectedBuffer("", "inv_freq", "rotary", "float32", False, True, [4])  # type: ignore[arg-type]
