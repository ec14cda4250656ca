"""``config --image / --video`` with a stack group (issue 51 item 7): the group's members whose M-RoPE is modelled
are audited, every other member is listed with why, and a video's duration and rate may carry their units.

Referees: the stack registry's own roles (:data:`precision_audit.rope.STACKS`: which stacks a group holds) and
:data:`~precision_audit.config.mrope.MROPE_STACKS` (which are modelled); a video written with units audits exactly
as the same video written with bare numbers (closed form: 1 h = 3600 s, 1 min = 60 s).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import load_model
from precision_audit.config.mrope import MROPE_STACKS, mrope_audit
from precision_audit.rope import STACKS
from precision_audit.rope.axes import parse_video

QWEN3_VL = "tests/data/qwen3-vl-4b-instruct.json"  # interleaved M-RoPE, sections 24/20/20


def _config(*args):
    return CliRunner().invoke(main, ["config", QWEN3_VL, *args])


@pytest.mark.parametrize("group", ["serve", "train", "all"])
def test_a_group_audits_its_modelled_members_and_lists_the_others(group):
    # a group's members: the stacks that run without a setting (the TF32 GEMM paths need --matmul-precision high)
    members = [k for k, v in STACKS.items() if v.setting is None and (group == "all" or group in v.roles)]
    m = mrope_audit(load_model(QWEN3_VL), video=(10, 1), stacks=[group])
    audited = [e["stack"] for e in m.summary]
    assert audited == [n for n in members if n in MROPE_STACKS]
    listed = [s.split(":")[0] for s in m.skipped]
    assert sorted(listed) == sorted(n for n in members if n not in MROPE_STACKS)
    assert all(s.endswith("its M-RoPE path is not modelled") for s in m.skipped)


def test_cli_serve_group_with_a_video_audits_vllm_sglang_and_llama_cpp():
    """The command from the issue (a shorter video keeps it quick): exit 0, a bottom line for each modelled
    serving stack, and the unmodelled ones named in 'skipped' lines."""
    res = _config("--video", "10@1", "--stack", "serve")
    assert res.exit_code == 0, res.output
    bottom = [line.strip() for line in res.output.splitlines() if line.startswith("  ") and "bfloat16:" in line]
    assert len(bottom) == sum(1 for k, v in STACKS.items() if "serve" in v.roles and k in MROPE_STACKS) == 6
    assert "skipped: mlx: its M-RoPE path is not modelled" in res.output
    assert "skipped: tensorrt-llm: its M-RoPE path is not modelled" in res.output


def test_cli_a_stack_with_no_modelled_m_rope_still_exits_2_naming_it():
    res = _config("--video", "10@1", "--stack", "mlx")
    assert res.exit_code == 2
    assert "no stack named (mlx) has modelled M-RoPE; modelled: transformers" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("text, want", [
    ("3600s@2fps", (3600.0, 2.0)), ("1h@2fps", (3600.0, 2.0)), ("60 min@2 fps", (3600.0, 2.0)),
    ("90sec@0.5Hz", (90.0, 0.5)), ("2minutes@1/s", (120.0, 1.0)), ("3600@2", (3600.0, 2.0)),
])
def test_video_units_as_people_write_them(text, want):
    assert parse_video(text)[:2] == want


@pytest.mark.parametrize("text", ["3600x@2", "3600s@2fpx", "s@2fps", "3600s@fps", "-1h@2", "inf@2fps", "1h2fps"])
def test_bad_video_units_are_refused(text):
    with pytest.raises(ValueError, match="must be SECONDS@FPS"):
        parse_video(text)


def test_cli_video_with_units_is_the_video_without():
    # a minute (the hour of the example is the same parse, and an hour's audit costs 10 s more)
    a = json.loads(_config("--video", "60s@2fps", "--stack", "transformers", "--json").output)
    b = json.loads(_config("--video", "60@2", "--stack", "transformers", "--json").output)
    assert a == b and a["input"]["video"]["seconds"] == 60.0


def test_cli_bad_video_unit_exits_2_with_one_line():
    res = _config("--video", "3600years@2fps")
    assert res.exit_code == 2 and "Invalid value for '--video'" in res.output and "Traceback" not in res.output
