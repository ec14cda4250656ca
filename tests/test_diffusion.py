"""Axial RoPE of diffusion transformers (issue 44, item 3): the ids, the per-axis audit, the config reader and the
CLI.  Referees: diffusers' own FluxPipeline (its static ``_prepare_latent_image_ids`` and ``prepare_latents`` run
on a stand-in object holding only the attributes the method reads), ``FluxPosEmbed`` and ``get_1d_rotary_pos_embed``
built with no weights and run live on the ids the tool builds (skipped without diffusers, failing under CI:
``referees.need``); expected counts from closed forms (integers exact
to 2**8 in bfloat16, 2**11 in float16) and ml_dtypes casts."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from referees import need
from precision_audit.config import DiffusionConfig, diffusion_config_dict, load_config, load_diffusion_config
from precision_audit.rope import run_recipe
from precision_audit.rope.axial import (FAMILIES, PATHS, audit_axial, audit_input, axial_ids, axial_maxima,
                                        axial_recipe, largest_safe, latent_grid)

DATA = Path(__file__).parent / "data"
FLUX = FAMILIES["FluxTransformer2DModel"]
HUNYUAN = FAMILIES["HunyuanVideoTransformer3DModel"]
CONFIGS = {"FluxTransformer2DModel": DATA / "diffusers" / "flux.1-dev-transformer.json",
           "HunyuanVideoTransformer3DModel": DATA / "diffusers" / "hunyuanvideo-transformer.json",
           "WanTransformer3DModel": DATA / "diffusers" / "wan2.1-t2v-14b-transformer.json"}
WAN = FAMILIES["WanTransformer3DModel"]
LOW = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}
EXACT_TO = {"bfloat16": 2**8, "float16": 2**11}  # every integer 0..2**p exists (p: significand bits)


def _diffusers():
    need("diffusers")
    import torch
    from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
    from diffusers.models.transformers.transformer_flux import FluxPosEmbed
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    return torch, FluxPipeline, FluxPosEmbed, get_1d_rotary_pos_embed


# --------------------------------------------------------------------------- ids


@pytest.mark.parametrize("size", [(16, 16), (1024, 1024), (1360, 768), (4128, 48), (1000, 1000)])
def test_flux_ids_are_the_pipelines(size):
    """The tool's ids and grid against FluxPipeline.prepare_latents (real code; its latent grid H // 16)."""
    torch, FluxPipeline, _, _ = _diffusers()
    w, h = size
    fake = SimpleNamespace(vae_scale_factor=8, _pack_latents=FluxPipeline._pack_latents,
                           _prepare_latent_image_ids=FluxPipeline._prepare_latent_image_ids)
    _, ids = FluxPipeline.prepare_latents(fake, 1, 16, h, w, torch.float32, torch.device("cpu"), None)
    grid = latent_grid(FLUX, (w, h))
    assert grid == (None, h // 16, w // 16)  # closed form
    mine = axial_ids(FLUX, grid)
    assert np.array_equal(ids.numpy().astype(np.int64), mine)
    assert axial_maxima(FLUX, grid) == tuple(int(x) for x in ids.max(dim=0).values)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_flux_pipeline_still_casts_ids(dtype):
    """diffusers' FluxPipeline builds its ids in the dtype it is given (prompt_embeds.dtype): in bfloat16, latent
    row 257 (an image 4128 px tall) rounds to 256.  The cast agrees bit for bit with ml_dtypes' rounding."""
    torch, FluxPipeline, _, _ = _diffusers()
    rows = 2 * EXACT_TO[dtype] + 8
    ids = FluxPipeline._prepare_latent_image_ids(1, rows, 1, "cpu", getattr(torch, dtype))
    assert ids.dtype == getattr(torch, dtype)
    col = ids[:, 1].float().numpy().astype(np.float64)
    assert np.array_equal(col, np.arange(rows).astype(LOW[dtype]).astype(np.float64))
    n = EXACT_TO[dtype]
    assert col[n + 1] == n  # the first id that exists no more
    shared = int(np.sum(col[1:] == col[:-1]))
    row = [r for r in audit_axial(FLUX, (0, rows - 1, 0), ["ids-dtype"], [dtype], cap=4 * n) if r.axis == "height"][0]
    assert row.colliding_positions == shared > 0 and row.verdict == "broken"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_largest_safe_ids_dtype_closed_form(dtype):
    """ids in the model dtype: safe exactly to 2**p + 1 ids (ids 0..2**p exist), so to (2**p + 1) * 16 px."""
    n = EXACT_TO[dtype]
    rows = audit_axial(FLUX, (0, 63, 63), ["ids-dtype"], [dtype], cap=8 * n)
    assert [r.safe_to for r in rows] == [n + 1] * 3
    assert largest_safe(FLUX, rows) == {"height_px": (n + 1) * 16, "width_px": (n + 1) * 16, "at_least": False}


def test_fp32_ids_paths_stay_safe_to_the_cap():
    """Every path without low-precision ids is safe to the audited cap (bf16 cos/sin: ~2**-9 rad per position,
    far below pi/8); their errors are within the stored format's rounding bound plus float32 angle rounding."""
    from precision_audit.rope import cache_rounding_bound

    rows = audit_axial(FLUX, (0, 4095, 4095), ["ids-fp32", "freqs-fp32", "cos-sin-dtype"], ["bfloat16"], cap=4096)
    assert all(r.verdict == "safe" and r.safe_to == 4096 and r.colliding_positions == 0 for r in rows)
    for r in rows:
        stored = "bfloat16" if r.stack == "cos-sin-dtype" else "float32"
        angle = 4095 * 2.0**-23 if r.stack == "freqs-fp32" else 1e-12  # float32 freqs: ~1 ulp of theta <= 1
        assert r.max_rotation_error <= cache_rounding_bound(stored) + angle


def test_hunyuan_video_grid_closed_form():
    """HunyuanVideo: (F - 1) // 4 + 1 latent frames, H // 16 rows (diffusers: VAE 8 x 8 x 4, patch 2 x 2 x 1)."""
    assert latent_grid(HUNYUAN, (1280, 720), (129 / 24, 24)) == (33, 45, 80)
    assert axial_maxima(HUNYUAN, (33, 45, 80)) == (32, 44, 79)
    ids = axial_ids(HUNYUAN, (3, 2, 2))
    assert ids.shape == (12, 3) and ids[:, 0].tolist() == [0] * 4 + [1] * 4 + [2] * 4


# --------------------------------------------------------------------------- cos/sin against diffusers


def _ulp32(x: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


@pytest.mark.parametrize("path", ["ids-fp32", "ids-dtype", "freqs-fp32", "cos-sin-dtype"])
def test_cos_sin_against_flux_pos_embed(path):
    """The tool's cos/sin per axis (numpy, correctly rounded) against FluxPosEmbed run live on the same ids
    (float64 frequencies on this CPU; freqs-fp32 through get_1d_rotary_pos_embed(freqs_dtype=float32), as
    diffusers runs it on MPS / NPU).  Bounds: torch's pow / cos / sin are faithful (1 ulp), the tool's correctly
    rounded, so float64 paths agree to one float32 ulp of the result; float32 frequencies add the angle's spread
    (position x 2 ulps of the frequency + 1 ulp of the product); a cast to bf16 of values that agree to one
    float32 ulp lands on the same or the neighbouring bf16 value, and on the same one where they agree."""
    torch, _, FluxPosEmbed, get_1d = _diffusers()
    dtype = "bfloat16"
    ids = axial_ids(FLUX, latent_grid(FLUX, (16 * 300, 16 * 3)))  # rows 0..299: above 256
    t_ids = torch.from_numpy(ids.astype(np.float32))
    if path == "ids-dtype":
        t_ids = t_ids.to(torch.bfloat16)
    if path == "freqs-fp32":
        pos = t_ids.float()
        outs = [get_1d(d, pos[:, i], theta=10000, use_real=True, repeat_interleave_real=True,
                       freqs_dtype=torch.float32) for i, d in enumerate(FLUX.axes_dim)]
        cos, sin = torch.cat([c for c, _ in outs], -1), torch.cat([s for _, s in outs], -1)
    else:
        cos, sin = FluxPosEmbed(theta=10000, axes_dim=list(FLUX.axes_dim))(t_ids)
    cos, sin = cos.numpy().astype(np.float64)[:, ::2], sin.numpy().astype(np.float64)[:, ::2]  # repeat_interleave
    start = 0
    for k, d in enumerate(FLUX.axes_dim):
        recipe = axial_recipe(FLUX, path, dtype)
        st = run_recipe(recipe, FLUX.schedule(k), ids[:, k])
        assert np.array_equal(st["positions"], t_ids[:, k].float().numpy().astype(np.float64))  # casts: exact
        ref_c, ref_s = cos[:, start:start + d // 2], sin[:, start:start + d // 2]
        start += d // 2
        if path == "freqs-fp32":
            inv = st["inv_freq"][None, :]
            m = st["positions"][:, None]
            spread = m * 2 * _ulp32(inv) + _ulp32(m * inv)
            bound = spread + 2 * _ulp32(np.ones(1))
        else:
            bound = _ulp32(np.ones(1)) * np.ones_like(ref_c)
        if path == "cos-sin-dtype":  # diffusers' float32 values cast as the path stores them
            for mine, ref in ((st["cos"], ref_c), (st["sin"], ref_s)):
                low = ref.astype(ml_dtypes.bfloat16).astype(np.float64)
                ulp = np.spacing(np.abs(low).astype(ml_dtypes.bfloat16)).astype(np.float64)
                assert np.all(np.abs(mine - low) <= ulp)
            exact = run_recipe(axial_recipe(FLUX, "ids-fp32", dtype), FLUX.schedule(k), ids[:, k])
            same = exact["cos"] == ref_c
            assert np.array_equal(st["cos"][same], ref_c[same].astype(ml_dtypes.bfloat16).astype(np.float64))
            continue
        assert np.all(np.abs(st["cos"] - ref_c) <= bound) and np.all(np.abs(st["sin"] - ref_s) <= bound)


def test_cos_sin_against_hunyuan_video_rotary_pos_embed():
    """HunyuanVideoRotaryPosEmbed (built from the shipped config, no weights) run live on a latent grid: its ids
    are the tool's (frame-major, float32 arange) and its cos/sin are the ids-fp32 path's, whose frequencies are
    float32 (get_1d_rotary_pos_embed's default), within the float32 bound of the Flux test."""
    torch, _, _, _ = _diffusers()
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

    raw = json.loads(CONFIGS["HunyuanVideoTransformer3DModel"].read_text())
    cfg = load_diffusion_config(CONFIGS["HunyuanVideoTransformer3DModel"])
    mod = HunyuanVideoRotaryPosEmbed(raw["patch_size"], raw["patch_size_t"], raw["rope_axes_dim"], raw["rope_theta"])
    grid = latent_grid(cfg.rope, (16 * 300, 16 * 5), (37 / 24, 24))  # 37 frames: 10 latent; 5 rows, 300 columns
    frames, rows, cols = grid
    latent = torch.zeros(1, 1, frames * raw["patch_size_t"], rows * raw["patch_size"], cols * raw["patch_size"])
    cos, sin = (x.numpy().astype(np.float64)[:, ::2] for x in mod(latent))
    ids = axial_ids(cfg.rope, grid)
    assert cos.shape[0] == ids.shape[0] == frames * rows * cols and axial_maxima(cfg.rope, grid) == (9, 4, 299)
    start = 0
    for k, d in enumerate(cfg.rope.axes_dim):
        st = run_recipe(axial_recipe(cfg.rope, "ids-fp32", "bfloat16"), cfg.rope.schedule(k), ids[:, k])
        inv, m = st["inv_freq"][None, :], st["positions"][:, None]
        bound = m * 2 * _ulp32(inv) + _ulp32(m * inv) + 2 * _ulp32(np.ones(1))
        ref_c, ref_s = cos[:, start:start + d // 2], sin[:, start:start + d // 2]
        start += d // 2
        assert np.all(np.abs(st["cos"] - ref_c) <= bound) and np.all(np.abs(st["sin"] - ref_s) <= bound)


def test_bf16_ids_share_diffusers_rotation():
    """The collisions the audit counts are rows FluxPosEmbed gives the same cos/sin: rows 256 and 257 of bf16
    ids (diffusers' own output), which the float32 ids keep apart."""
    torch, _, FluxPosEmbed, _ = _diffusers()
    ids = torch.tensor([[0.0, 256.0, 0.0], [0.0, 257.0, 0.0]])
    pe = FluxPosEmbed(theta=10000, axes_dim=list(FLUX.axes_dim))
    c16, _ = pe(ids.to(torch.bfloat16))
    c32, _ = pe(ids)
    assert torch.equal(c16[0], c16[1]) and not torch.equal(c32[0], c32[1])


# --------------------------------------------------------------------------- config reader and bad input


def test_configs_read_as_diffusers_builds_them():
    """The reader's axes and theta are what diffusers' classes build from the same config (no weights: the
    rotary modules alone)."""
    need("diffusers")
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

    flux = load_diffusion_config(CONFIGS["FluxTransformer2DModel"])
    raw = json.loads(CONFIGS["FluxTransformer2DModel"].read_text())
    assert isinstance(flux, DiffusionConfig) and list(flux.rope.axes_dim) == raw["axes_dims_rope"]
    assert sum(flux.rope.axes_dim) == raw["attention_head_dim"] == flux.head_dim
    hv = load_diffusion_config(CONFIGS["HunyuanVideoTransformer3DModel"])
    raw = json.loads(CONFIGS["HunyuanVideoTransformer3DModel"].read_text())
    mod = HunyuanVideoRotaryPosEmbed(raw["patch_size"], raw["patch_size_t"], raw["rope_axes_dim"], raw["rope_theta"])
    assert (mod.theta, list(mod.rope_dim)) == (hv.rope.theta, list(hv.rope.axes_dim))
    assert hv.rope.pixels_per_id == 8 * mod.patch_size and hv.rope.frames_per_id == 4 * mod.patch_size_t


@pytest.mark.parametrize("data, msg", [
    ({"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 48]},
     "sums to 120, not attention_head_dim 128"),
    ({"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 55, 1]}, "[16, 56, 55, 1] must be 3"),
    ({"_class_name": "HunyuanVideoTransformer3DModel", "rope_theta": "x"}, "rope_theta 'x' must be a number"),
    ({"_class_name": "HunyuanVideoTransformer3DModel", "patch_size": 0}, "patch_size 0 must be a positive"),
    ({"_class_name": "NoSuchModel"}, "_class_name 'NoSuchModel'"),
    ({"_class_name": "WanTransformer3DModel", "patch_size": [1, 2, 4]}, "patch_size [1, 2, 4] must be three"),
    ({"_class_name": "WanTransformer3DModel", "rope_max_seq_len": 0}, "rope_max_seq_len 0 must be a positive"),
    ({"_class_name": "WanTransformer3DModel", "attention_head_dim": 9}, "attention_head_dim 9: axes_dims_rope"),
])
def test_bad_configs_name_the_value(data, msg):
    with pytest.raises(ValueError, match=None) as e:
        diffusion_config_dict(data, source="c.json")
    assert str(e.value).startswith("c.json: ") and msg in str(e.value)


def test_transformers_reader_points_at_the_diffusion_reader():
    with pytest.raises(ValueError, match=r"a diffusers config \(_class_name 'FluxTransformer2DModel'\)"):
        load_config(CONFIGS["FluxTransformer2DModel"])


@pytest.mark.parametrize("call, msg", [
    (lambda: latent_grid(FLUX, (1024, 1024), (5.0, 24.0)), "flux makes images, not video"),
    (lambda: latent_grid(HUNYUAN, (1280, 720), (-5.0, 24.0)), "(-5.0 s, 24.0 fps)"),
    (lambda: latent_grid(FLUX, (8, 1024)), "image 8x1024"),
    (lambda: audit_axial(FLUX, (0, 70000, 1)), "largest id 70000 is above the audited cap 65536 ids per axis"),
    (lambda: audit_axial(FLUX, (0, 1)), "maxima (0, 1) must be one id >= 0 per axis"),
    (lambda: audit_axial(HUNYUAN, (0, 1, 1), ["ids-dtype"]), "path 'ids-dtype' is not one hunyuan_video runs"),
    (lambda: axial_recipe(FLUX, "fp9", "bf16"), "unknown axial RoPE path 'fp9'"),
])
def test_api_bad_input_raises_value_error(call, msg):
    with pytest.raises(ValueError) as e:
        call()
    assert msg in str(e.value)


# --------------------------------------------------------------------------- CLI


def _run(*args: str):
    return CliRunner().invoke(main, ["config", *args])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_cli_default_input_has_a_bottom_line(name):
    r = _run(str(CONFIGS[name]))
    assert r.exit_code == 0, r.output
    assert "Bottom line" in r.output and "(the default input)" in r.output


def test_cli_flux_8k_bottom_line():
    r = _run(str(CONFIGS["FluxTransformer2DModel"]), "--image", "8192x8192", "-d", "bf16", "-r", "ids-dtype",
             "-r", "ids-fp32")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    cast = next(l for l in lines if l.startswith("  ids cast to the model dtype"))
    assert "height broken, width broken" in cast and "safe to 4112 px per side (257 latent ids)" in cast
    assert "fix: build the ids in float32" in cast
    fp32 = next(l for l in lines if l.startswith("  ids in float32"))
    assert "safe to at least 1048576 px per side" in fp32


def test_cli_json_and_video_seconds():
    r = _run(str(CONFIGS["HunyuanVideoTransformer3DModel"]), "--video", "10@24", "--image", "1280x720",
             "-r", "ids-fp32", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["largest_ids"] == {"frame": 59, "height": 44, "width": 79}  # (240 - 1) // 4 = 59
    (s,) = out["summary"]
    assert s["largest_safe"]["audited"] == 2**16
    assert s["largest_safe"]["frames"] == 4 * 2**16 and math.isclose(s["largest_safe"]["seconds"], 4 * 2**16 / 24)


@pytest.mark.parametrize("args, msg", [
    (["--image", "0x0"], "image '0x0' must be WIDTHxHEIGHT"),
    (["--image", "8x8"], "image 8x8: flux makes one id per 16 px"),
    (["--video", "5@24"], "--video: flux.1-dev-transformer (FluxTransformer2DModel) makes images, not video"),
    (["--length", "4096"], "--length: flux.1-dev-transformer is a diffusion transformer"),
    (["--weights", "smollm2"], "--weights: flux.1-dev-transformer is a diffusion transformer"),
    (["--stack", "vllm"], "--stack: flux.1-dev-transformer is a diffusion transformer"),
    (["-r", "nope"], "--recipe nope: not a code path FluxTransformer2DModel runs"),
])
def test_cli_bad_input_exits_2_with_one_line(args, msg):
    r = _run(str(CONFIGS["FluxTransformer2DModel"]), *args)
    assert r.exit_code == 2 and "Traceback" not in r.output
    errors = [l for l in r.output.splitlines() if l.startswith("Error:")]
    assert len(errors) == 1 and msg in errors[0], r.output


def test_cli_bad_video_and_configs_exit_2(tmp_path):
    r = _run(str(CONFIGS["HunyuanVideoTransformer3DModel"]), "--video", "-5@24")
    assert r.exit_code == 2 and "video '-5@24' must be SECONDS@FPS" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"_class_name": "FluxTransformer2DModel", "axes_dims_rope": [16, 56, 48]}))
    r = _run(str(bad))
    assert r.exit_code == 2 and "axes_dims_rope [16, 56, 48] sums to 120, not attention_head_dim 128" in r.output
    bad.write_text(json.dumps({"_class_name": "SanaTransformer2DModel"}))
    r = _run(str(bad))
    assert r.exit_code == 2 and "_class_name 'SanaTransformer2DModel'" in r.output
    r = _run(str(DATA / "llama-2-7b-hf.json"), "-r", "ids-dtype")
    assert r.exit_code == 2 and "ids-dtype" in r.output


def test_paths_and_their_stages():
    """Each path's stage formats as the docstring states them (the diffusers code each models)."""
    st = {p: axial_recipe(FLUX, p, "float16").stages for p in PATHS}
    assert st["ids-fp32"] == {"positions": "float32", "inv_freq": "float64", "angle": "float64", "trig": "float64",
                              "cache": "float32"}
    assert st["freqs-fp32"]["inv_freq"] == st["freqs-fp32"]["angle"] == "float32"
    assert st["ids-dtype"]["positions"] == "float16" and st["cos-sin-dtype"]["cache"] == "float16"
    assert axial_recipe(HUNYUAN, "ids-fp32", "bf16").stages["inv_freq"] == "float32"  # get_1d's default
    assert audit_input(FLUX, (64, 64), paths=["ids-fp32"])[1].largest_id == 3


# --------------------------------------------------------------------------- Wan 2.x: a precomputed table


def _wan_module(cfg):
    need("diffusers")
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    return WanRotaryPosEmbed(cfg["attention_head_dim"], tuple(cfg["patch_size"]), cfg["rope_max_seq_len"])


def test_wan_table_against_wan_rotary_pos_embed():
    """WanRotaryPosEmbed built from the shipped config (no weights): its split of the head is the reader's, and
    its float32 table (float64 frequencies on this machine unless MPS is available) is the ids-fp32 path's cos/sin
    to one float32 ulp (torch's pow / cos / sin faithful, the tool's correctly rounded; the values agree in
    float64 to ~1e-13 before the cast)."""
    import torch

    raw = json.loads(CONFIGS["WanTransformer3DModel"].read_text())
    mod = _wan_module(raw)
    cfg = load_diffusion_config(CONFIGS["WanTransformer3DModel"])
    assert (mod.t_dim, mod.h_dim, mod.w_dim) == cfg.rope.axes_dim
    assert cfg.rope.table == raw["rope_max_seq_len"] == mod.freqs_cos.shape[0]
    path = "freqs-fp32" if torch.backends.mps.is_available() else "ids-fp32"
    cos = mod.freqs_cos.numpy().astype(np.float64)[:, ::2]
    start = 0
    for k, d in enumerate(cfg.rope.axes_dim):
        st = run_recipe(axial_recipe(cfg.rope, path, "bfloat16"), cfg.rope.schedule(k), np.arange(cfg.rope.table))
        ref = cos[:, start:start + d // 2]
        start += d // 2
        assert np.all(np.abs(st["cos"] - ref) <= _ulp32(np.ones(1)))


def test_wan_more_ids_than_the_table_raise_in_both():
    """An axis with more latent ids than rope_max_seq_len: diffusers raises (the sliced table does not fill the
    grid), and so does the tool, naming the count."""
    import torch

    raw = {"attention_head_dim": 12, "patch_size": [1, 2, 2], "rope_max_seq_len": 8}
    mod = _wan_module(raw)
    mod(torch.zeros(1, 1, 1, 2 * 8, 2))  # 8 rows: fits
    with pytest.raises(RuntimeError):
        mod(torch.zeros(1, 1, 1, 2 * 9, 2))
    cfg = diffusion_config_dict({"_class_name": "WanTransformer3DModel", **raw}, source="w.json")
    assert latent_grid(cfg.rope, (16, 16 * 8))[1] == 8
    with pytest.raises(ValueError, match="9 latent ids on the height axis, more than the rope table's 8 rows"):
        latent_grid(cfg.rope, (16, 16 * 9))


def test_wan_bottom_line_is_the_table():
    """Every Wan path is safe to the table's 1024 ids (16384 px, 4096 frames), which is a hard limit, not a
    precision one: no fix is offered."""
    r = _run(str(CONFIGS["WanTransformer3DModel"]), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["largest_ids"] == {"frame": 20, "height": 29, "width": 51}  # 81 frames of 832x480: 21 x 30 x 52
    for s in out["summary"]:
        assert s["largest_safe"] == {"height_px": 16384, "width_px": 16384, "frames": 4096,
                                     "seconds": 4096 / 16, "at_least": False, "table": 1024, "audited": 1024}
        assert s["fix"] is None


def test_cli_long_video_audits_past_the_default_cap():
    """A video whose frame ids pass 65536 is audited up to the next power of two (ids in float32: safe there)."""
    r = _run(str(CONFIGS["HunyuanVideoTransformer3DModel"]), "--video", "12000@24", "--image", "256x256",
             "-r", "ids-fp32", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["largest_ids"]["frame"] == (12000 * 24 - 1) // 4  # 72000 latent frames
    (s,) = out["summary"]
    assert s["largest_safe"]["audited"] == 2**17 and s["largest_safe"]["frames"] == 4 * 2**17
