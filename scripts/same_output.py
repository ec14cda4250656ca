"""Behaviour-identical proof for a refactoring: every command's output, before and after, byte for byte.

Runs a fixed set of ``precision-audit`` invocations (every command, ``--json`` and table output, small lengths so
the whole set takes a few minutes) and the report's files, and records a SHA-256 of each output (stdout and
stderr, exit status, and for ``report`` every file it writes).  ``--against REV`` runs the same set on a git worktree of REV
(the same interpreter and installed packages) and lists every command whose output differs.

    python scripts/same_output.py --against HEAD~3          # exit 1 if some output changed
    python scripts/same_output.py --manifest out.json       # only record this tree's hashes

Pair means may change in their last bits where a change of summation order is intended: the differing commands
are printed with the first differing line of each side, to be named in the change's note.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = "tests/data"

# (name, arguments): every command, with and without --json where the table is rendered differently
COMMANDS: list[tuple[str, list[str]]] = [
    ("positions", ["positions", "-l", "8K", "-l", "64K", "-d", "bf16", "-d", "fp16", "--json"]),
    ("positions table", ["positions", "-l", "8K", "-d", "bf16"]),
    ("rope", ["rope", "-l", "32K", "-d", "bf16", "-d", "fp16", "--json"]),
    ("rope table", ["rope", "-l", "8K", "-d", "bf16"]),
    ("rope stacks", ["rope", "-l", "16K", "-d", "bf16", "--stack", "vllm", "--stack", "llama.cpp-cpu",
                     "--stack", "mlx", "--stack", "sglang", "--json"]),
    ("rope yarn", ["rope", "-l", "64K", "-d", "bf16", "--scaling", "yarn", "--factor", "4",
                   "--original-max-position-embeddings", "16384", "--json"]),
    ("rope llama3", ["rope", "-l", "32K", "-d", "fp16", "--scaling", "llama3", "--factor", "8",
                     "--original-max-position-embeddings", "8192", "--distance", "3", "--json"]),
    ("alibi", ["alibi", "-l", "8K", "-d", "bf16", "--json"]),
    ("alibi table", ["alibi", "-l", "4K"]),
    ("sinusoidal", ["sinusoidal", "-l", "8K", "--json"]),
    ("sinusoidal table", ["sinusoidal", "-l", "4K"]),
    ("attention", ["attention", "-l", "8K", "-d", "bf16", "--pairs", "64", "--json"]),
    ("relative t5", ["relative", "--scheme", "t5", "-l", "4K", "--json"]),
    ("relative deberta", ["relative", "--scheme", "deberta", "-l", "4K", "--json"]),
    ("relative learned", ["relative", "--scheme", "learned", "-l", "4K", "--json"]),
    ("relative xlnet", ["relative", "--scheme", "xlnet", "-l", "2K", "--json"]),
    ("config llama-2", ["config", f"{DATA}/llama-2-7b-hf.json", "--json"]),
    ("config llama-2 table", ["config", f"{DATA}/llama-2-7b-hf.json"]),
    ("config llama-3.1", ["config", f"{DATA}/llama-3.1-8b.json", "-l", "32K", "--json"]),
    ("config qwen yarn", ["config", f"{DATA}/qwen2.5-coder-32b-instruct-yarn.json", "-l", "64K", "--json"]),
    ("config gpt-oss", ["config", f"{DATA}/gpt-oss-20b.json", "-l", "32K", "--json"]),
    ("config deepseek", ["config", f"{DATA}/deepseek-v3.json", "-l", "16K", "--json"]),
    ("config phi-3.5", ["config", f"{DATA}/phi-3.5-mini-instruct.json", "-l", "16K", "--json"]),
    ("config bloom", ["config", f"{DATA}/bloom-7b1.json", "--json"]),
    ("config baichuan2", ["config", f"{DATA}/baichuan2-13b-base.json", "--json"]),
    ("config gpt2", ["config", f"{DATA}/gpt2.json", "--json"]),
    ("config t5", ["config", f"{DATA}/t5-v1_1-xxl-encoder.json", "--json"]),
    ("config deberta", ["config", f"{DATA}/deberta-v3-base.json", "--json"]),
    ("hf-rope", ["hf-rope", "-m", "llama", "-l", "8K", "--json"]),
    ("hf-rope cast", ["hf-rope", "-m", "llama", "-l", "8K", "--cast-module", "--json"]),
    ("hf-alibi", ["hf-alibi", "-m", "bloom", "-l", "4K", "--json"]),
    ("hf-scan", ["hf-scan", "-l", "2K", "--family", "llama", "--family", "qwen2", "--json"]),
    ("effect", ["effect", "--offset", "0", "--offset", "64K", "--sequences", "8", "--json"]),
    ("effect calibration", ["effect", "--calibration", "--json"]),
    ("reproduce baichuan", ["reproduce", "baichuan", "--json"]),
    ("reproduce list", ["reproduce", "--list"]),
    ("reproduce all", ["reproduce", "--all", "--json"]),
    ("bad input", ["rope", "-l", "8K", "--distance", "0"]),
]
REPORT = ["report", "--model", f"{DATA}/llama-3.1-8b.json", "--max-length", "32K", "-q"]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run(tree: Path, args: list[str], out_dir: Path | None = None) -> dict[str, object]:
    """One invocation in ``tree`` (its package first on the path): exit status, stdout's hash and text."""
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="120", PYTHONHASHSEED="0", MPLBACKEND="Agg")
    code = "import sys; from precision_audit.cli import main; main(sys.argv[1:], prog_name='precision-audit')"
    argv = [*args, "--out", str(out_dir)] if out_dir is not None else args
    p = subprocess.run([sys.executable, "-c", code, *argv], cwd=tree, env=env, capture_output=True)
    if out_dir is not None:  # the folder's name is a temporary one
        p.stdout, p.stderr = (x.replace(str(out_dir).encode(), b"<out>") for x in (p.stdout, p.stderr))
    rec: dict[str, object] = {"status": p.returncode, "output": _digest(p.stdout + b"\0" + p.stderr),
                              "text": (p.stdout + p.stderr).decode(errors="replace")[-4000:],
                              "stderr": p.stderr.decode(errors="replace")[-400:] if p.returncode not in (0, 1, 2) else ""}
    if out_dir is not None:
        rec["files"] = {str(f.relative_to(out_dir)): _digest(f.read_bytes())
                        for f in sorted(out_dir.rglob("*")) if f.is_file()}
    return rec


def manifest(tree: Path, jobs: int = 2) -> dict[str, dict[str, object]]:
    """Every command's record in ``tree`` (whose package must be the one imported there)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    where = subprocess.run([sys.executable, "-c", "import precision_audit; print(precision_audit.__file__)"],
                           cwd=tree, env=env, capture_output=True, text=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: imports precision_audit from {where!r}, not its own")
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(jobs) as pool:
        futures = {name: pool.submit(_run, tree, args) for name, args in COMMANDS}
        futures["report"] = pool.submit(_run, tree, REPORT, Path(tmp))
        return {name: f.result() for name, f in futures.items()}


def _first_difference(a: str, b: str) -> str:
    for x, y in zip(a.splitlines(), b.splitlines()):
        if x != y:
            return f"\n    before: {x[:160]}\n    after:  {y[:160]}"
    return " (lengths differ)"


def compare(before: dict[str, dict[str, object]], after: dict[str, dict[str, object]]) -> list[str]:
    """The commands whose status, stdout or files differ, each with where."""
    out = []
    for name, a in after.items():
        b = before.get(name)
        if b is None:
            out.append(f"{name}: new")
        elif (a["status"], a["output"]) != (b["status"], b["output"]):
            out.append(f"{name}: status {b['status']} -> {a['status']}"
                       + _first_difference(str(b["text"]), str(a["text"])))
        elif a.get("files") != b.get("files"):
            fa, fb = a.get("files") or {}, b.get("files") or {}
            diff = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))  # type: ignore[union-attr]
            out.append(f"{name}: files differ: {', '.join(diff)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--against", metavar="REV", help="compare with a worktree of this git revision")
    ap.add_argument("--manifest", metavar="FILE", help="write this tree's records as JSON")
    ap.add_argument("--jobs", type=int, default=2, help="commands run at once (default 2)")
    a = ap.parse_args()
    after = manifest(ROOT, a.jobs)
    for name, rec in after.items():
        if rec["stderr"]:
            print(f"{name}: crashed (status {rec['status']}): {rec['stderr']}", file=sys.stderr)
    if a.manifest:
        Path(a.manifest).write_text(json.dumps(after, indent=1, sort_keys=True))
    if not a.against:
        print(f"{len(after)} commands recorded")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        wt = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(wt), a.against], cwd=ROOT, check=True)
        try:
            before = manifest(wt, a.jobs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT, check=True)
    diffs = compare(before, after)
    print(f"{len(after)} commands against {a.against}: " + ("identical" if not diffs else f"{len(diffs)} differ"))
    for d in diffs:
        print("  " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
