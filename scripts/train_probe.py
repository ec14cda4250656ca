"""Train the probe model (precision_audit.effect) and write its weights to package data.

    PYTHONPATH=. python scripts/train_probe.py [--steps N] [--out precision_audit/effect/probe.npz]

The probe is the architecture of :mod:`precision_audit.effect.model` (2 layers, 2 rotate-half RoPE heads of 128,
base 1e4, d_model 64, pre-norm RMSNorm, no MLP, 32 content tokens) trained in float32 on both tasks of :mod:`precision_audit.effect.tasks` at once, with
exact RoPE: cos/sin of the oracle's float64 angles (precision_audit.rope.exact_angles), rounded once to float32.
Sequences start at random offsets below 2**16 (exact RoPE depends only on position differences).

Deterministic: fixed seeds (torch: TORCH_SEED, data: DATA_SEED), torch.use_deterministic_algorithms(True), a
fixed thread count (THREADS).  Training stops at the first check (every CHECK steps) where the float32 model
reaches STOP_ACCURACY on both tasks of a held-out set, or after --steps.  The shipped file then records the
float64 numpy forward's exact-arithmetic accuracy (precision_audit.effect.exact_accuracy: cos/sin of the oracle's
float64 angles, 1024 evaluation sequences per task, offset 0).

The shipped weights: 800 steps, about 60 s of CPU (80-140 s wall on the shared 2-core machine); three runs gave
bit-identical weights (the file's bytes differ only by the zip timestamps and the recorded seconds).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from precision_audit.effect.model import BASE, D_MODEL, EPS, HEAD_DIM, HEADS, LAYERS, PROBE_FILE
from precision_audit.effect.tasks import (CONTENT, GAPS, LOCAL_PREFIX, LOCAL_QUERIES, VOCAB, Batch, gap_batch,
                                         local_batch)
from precision_audit.rope import RopeSchedule, exact_angles

TORCH_SEED = 0
DATA_SEED = 1
CHECK_SEED = 2
THREADS = 1
LR = 3e-3
WARMUP = 100
BATCH_LOCAL = 32
BATCH_GAP = 4 * len(GAPS)
CHECK = 200
STOP_ACCURACY = 0.998
MAX_OFFSET = 2**16
THETA = RopeSchedule(head_dim=HEAD_DIM, base=BASE).inv_freq()


def cos_sin(positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact RoPE tables (n, T, 64) for integer positions: the oracle's float64 angles, cos/sin rounded to float32."""
    a = exact_angles(positions.reshape(-1), THETA).reshape(*positions.shape, -1)
    return torch.from_numpy(np.cos(a).astype(np.float32)), torch.from_numpy(np.sin(a).astype(np.float32))


class Probe(torch.nn.Module):
    """The float32 twin of precision_audit.effect.model.forward (same weights, same layout)."""

    def __init__(self) -> None:
        super().__init__()
        inner = HEADS * HEAD_DIM
        self.emb = torch.nn.Parameter(torch.randn(VOCAB, D_MODEL))
        self.norms = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(D_MODEL)) for _ in range(LAYERS)])
        self.w = torch.nn.ParameterList()
        for _ in range(LAYERS):
            for shape in ((D_MODEL, inner),) * 3 + ((inner, D_MODEL),):
                self.w.append(torch.nn.Parameter(torch.randn(*shape) / math.sqrt(shape[0])))
        self.norm = torch.nn.Parameter(torch.ones(D_MODEL))
        self.unembed = torch.nn.Parameter(torch.randn(D_MODEL, CONTENT) / math.sqrt(D_MODEL))

    @staticmethod
    def rms(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * g

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, b: Batch, offsets: np.ndarray) -> torch.Tensor:
        tokens = torch.from_numpy(b.tokens)
        n, t = tokens.shape
        cos, sin = cos_sin(b.positions + offsets[:, None])
        cos, sin = cos[:, None], sin[:, None]
        x = self.emb[tokens]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        for layer in range(LAYERS):
            wq, wk, wv, wo = self.w[4 * layer: 4 * layer + 4]
            h = self.rms(x, self.norms[layer])
            q, k, v = ((h @ m).view(n, t, HEADS, HEAD_DIM).transpose(1, 2) for m in (wq, wk, wv))
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            s = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM) + mask, dim=-1)
            x = x + (s @ v).transpose(1, 2).reshape(n, t, HEADS * HEAD_DIM) @ wo
        xq = self.rms(x[torch.arange(n)[:, None], torch.from_numpy(b.queries)], self.norm)
        return torch.log_softmax(xq @ self.unembed, dim=-1)

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "Probe":
        """A model holding the given weights (the names :meth:`arrays` writes)."""
        model = cls()
        with torch.no_grad():
            for name, param in model.named(model).items():
                param.copy_(torch.from_numpy(np.asarray(arrays[name], dtype=np.float32)))
        return model

    @staticmethod
    def named(model: "Probe") -> dict[str, torch.nn.Parameter]:
        """The parameters under the names precision_audit.effect.model reads."""
        out = {"emb": model.emb, "norm": model.norm, "unembed": model.unembed}
        for layer in range(LAYERS):
            out[f"l{layer}.norm"] = model.norms[layer]
            for c, m in zip("qkvo", model.w[4 * layer: 4 * layer + 4]):
                out[f"l{layer}.w{c}"] = m
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights under the names precision_audit.effect.model reads, as float32 arrays."""
        return {k: v.detach().numpy().astype(np.float32) for k, v in self.named(self).items()}


def batches(rng: np.random.Generator) -> list[tuple[Batch, np.ndarray]]:
    out = []
    for b in (local_batch(rng, BATCH_LOCAL), gap_batch(rng, BATCH_GAP)):
        out.append((b, rng.integers(0, MAX_OFFSET, size=len(b.tokens))))
    return out


def accuracy(model: Probe, checks: list[tuple[Batch, np.ndarray]]) -> list[float]:
    with torch.no_grad():
        return [float((model(b, o).argmax(-1).numpy() == b.targets).mean()) for b, o in checks]


def train(steps: int, log_every: int) -> tuple[Probe, int, list[float]]:
    torch.manual_seed(TORCH_SEED)
    model = Probe()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    rng = np.random.default_rng(DATA_SEED)
    crng = np.random.default_rng(CHECK_SEED)
    checks = [(local_batch(crng, 512), np.zeros(512, np.int64)), (gap_batch(crng, 56 * len(GAPS)),
                                                                 np.zeros(56 * len(GAPS), np.int64))]
    acc = [0.0, 0.0]
    t0 = time.time()
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = LR * min(1.0, step / WARMUP) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        loss = sum(-(model(b, o).gather(-1, torch.from_numpy(b.targets)[..., None])).mean()
                   for b, o in batches(rng))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % log_every == 0:
            print(f"step {step} loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
        if step % CHECK == 0:
            acc = accuracy(model, checks)
            print(f"step {step} check accuracy local {acc[0]:.4f} gap {acc[1]:.4f}", flush=True)
            if min(acc) >= STOP_ACCURACY:
                return model, step, acc
    return model, steps, acc


def write(path: str | Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """The weights and the metadata (a JSON string array) as a compressed .npz."""
    buf = io.BytesIO()
    np.savez_compressed(buf, metadata=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    Path(path).write_bytes(buf.getvalue())


def measure(path: str | Path) -> dict:
    """Record the float64 exact-arithmetic accuracies of the weights in ``path`` (the library's evaluation sets)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "metadata"}
        meta = json.loads(str(z["metadata"]))
    from precision_audit.effect import exact_accuracy

    meta["exact_accuracy"] = exact_accuracy(arrays)
    write(path, arrays, meta)
    return meta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4000, help="at most this many steps (default 4000)")
    ap.add_argument("--log-every", type=int, default=50, help="print the loss every N steps")
    out = Path(__file__).resolve().parents[1] / "precision_audit" / "effect" / PROBE_FILE
    ap.add_argument("--out", default=str(out),
                    help="where to write the weights")
    ap.add_argument("--measure-only", action="store_true", help="only re-measure the exact accuracies of --out")
    args = ap.parse_args()
    if not args.measure_only:
        torch.set_num_threads(THREADS)
        torch.use_deterministic_algorithms(True)
        t0 = time.time()
        model, steps, acc = train(args.steps, args.log_every)
        meta = {
            "architecture": {"layers": LAYERS, "heads": HEADS, "head_dim": HEAD_DIM, "d_model": D_MODEL, "mlp": None,
                             "norm": f"RMSNorm eps {EPS}, pre-norm", "rope": f"rotate-half, base {BASE}, on q and k",
                             "vocab": VOCAB, "outputs": CONTENT, "weights": "float32"},
            "tasks": {"local": f"induction: {LOCAL_PREFIX} distinct tokens then {LOCAL_QUERIES} of them; "
                               "predict the token that followed",
                      "gap": f"fetch the token exactly G before the query token Q_G, G in {list(GAPS)}"},
            "seeds": {"torch": TORCH_SEED, "data": DATA_SEED, "check": CHECK_SEED},
            "training": {"steps": steps, "lr": LR, "warmup": WARMUP, "batch_local": BATCH_LOCAL,
                         "batch_gap": BATCH_GAP, "max_offset": MAX_OFFSET, "threads": THREADS,
                         "seconds": round(time.time() - t0, 1), "torch": torch.__version__,
                         "float32_check_accuracy": {"local": acc[0], "gap": acc[1]}},
        }
        write(args.out, model.arrays(), meta)
        print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)", flush=True)
    print(json.dumps(measure(args.out), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
