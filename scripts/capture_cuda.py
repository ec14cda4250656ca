#!/usr/bin/env python3
"""Record what real CUDA math functions return, for CPU tests to referee our models.

The project models CUDA fast-math intrinsics from the CUDA Math API's documented
bounds: ``__sinf`` max abs error 2^-21.41 and ``__cosf`` 2^-21.19 for x in
[-pi, pi], "larger otherwise"; ``__powf`` derived from ``exp2f(y * __log2f(x))``.
Those models matter because real kernels use them: FlashInfer's
``include/flashinfer/pos_enc.cuh`` computes
``freq = __powf(rope_rcp_theta, float(2*j)/float(rotary_dim))`` and
``__sincosf(float(pos) * freq)``, and its JIT builds with ``-use_fast_math``
(``flashinfer/jit/core.py``); ggml's ``src/ggml-cuda/rope.cu`` computes
``pos * powf(theta_scale, i0/2.0f)`` and ``cosf``/``sinf`` under
``-use_fast_math``.  This script compiles small kernels (NVRTC through cupy;
torch ``load_inline`` with nvcc as a fallback) with and without fast math, runs
them on deterministic input grids, and saves inputs and outputs (``sincos_x``;
``fast_sin``/``fast_cos`` from ``__sincosf``, ``fast_sinf``/``fast_cosf``,
``precise_sin``/``precise_cos``; ``pow_x``, ``pow_y``, ``fast_pow``,
``precise_pow``; ``flashinfer_freq`` with its ``flashinfer_theta``/``_dim``/``_j``
inputs; ``meta``: JSON with the GPU, versions, options, date and kernel sources).

Run on a CUDA machine from the repo root:
``python scripts/capture_cuda.py [--out tests/data/cuda_intrinsics.npz]``
(``--dry-run`` builds the grids and prints their sizes, no GPU needed).  The
tests read the recorded file on any CPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

F32 = np.float32
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "cuda_intrinsics.npz"
BASES = (10000.0, 500000.0, 1000000.0, 10000000.0)
DIMS = (64, 96, 128, 256)
POSITIONS = (1, 7, 255, 256, 4095, 4096, 32767, 65535, 131071, 524287, 1048575, 4194303)
FAST_OPTIONS: tuple[str, ...] = ("--use_fast_math",)
PRECISE_OPTIONS: tuple[str, ...] = ()

_IDX = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i >= n) return;\n    "
FAST_SRC = f"""
extern "C" __global__ void fast_sincos(const float* x, float* s, float* c, int n) {{
    {_IDX}__sincosf(x[i], &s[i], &c[i]);
}}
extern "C" __global__ void fast_sin_cos(const float* x, float* s, float* c, int n) {{
    {_IDX}s[i] = __sinf(x[i]);
    c[i] = __cosf(x[i]);
}}
extern "C" __global__ void fast_pow(const float* x, const float* y, float* p, int n) {{
    {_IDX}p[i] = __powf(x[i], y[i]);
}}
extern "C" __global__ void flashinfer_freq(const float* rope_rcp_theta, const int* j,
                                           const int* rotary_dim, float* freq, int n) {{
    {_IDX}freq[i] = __powf(rope_rcp_theta[i], float(2 * j[i]) / float(rotary_dim[i]));
}}
"""
PRECISE_SRC = f"""
extern "C" __global__ void precise_sincos(const float* x, float* s, float* c, int n) {{
    {_IDX}sincosf(x[i], &s[i], &c[i]);
}}
extern "C" __global__ void precise_pow(const float* x, const float* y, float* p, int n) {{
    {_IDX}p[i] = powf(x[i], y[i]);
}}
"""
# Pointer argument types of each kernel (inputs first, then float outputs; n last).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "fast_sincos": ("float", "float", "float"),
    "fast_sin_cos": ("float", "float", "float"),
    "fast_pow": ("float", "float", "float"),
    "flashinfer_freq": ("float", "int", "int", "float"),
    "precise_sincos": ("float", "float", "float"),
    "precise_pow": ("float", "float", "float"),
}


def sincos_grid() -> np.ndarray:
    """Angles: log-uniform sweep, RoPE angles, and neighbours of k*pi/2."""
    sweep = np.exp2(np.linspace(-4.0, 21.0, 2048)).astype(F32)
    i = np.arange(64, dtype=np.float64)
    m = np.array(POSITIONS, dtype=F32)[:, None]
    rope = []
    for base in (10000.0, 500000.0):
        inv_freq = F32(1.0) / (base ** (2.0 * i / 128.0)).astype(F32)
        rope.append((m * inv_freq[None, :]).ravel())
    k = np.concatenate([np.arange(1, 65), 2.0 ** np.arange(7, 21)])
    near = (k * (np.pi / 2.0)).astype(F32)
    around = [near, np.nextafter(near, F32(np.inf)), np.nextafter(near, F32(-np.inf))]
    return np.unique(np.concatenate([sweep, *rope, *around]).astype(F32))


def flashinfer_rows() -> dict[str, np.ndarray]:
    """FlashInfer's (theta, rotary_dim, j) rows, host float32 1/theta and 2j/d."""
    rows = [(t, d, j) for t in BASES for d in DIMS for j in range(d // 2)]
    theta = np.array([r[0] for r in rows], dtype=F32)
    dim = np.array([r[1] for r in rows], dtype=np.int32)
    j = np.array([r[2] for r in rows], dtype=np.int32)
    return {"theta": theta, "dim": dim, "j": j,
            "rcp": F32(1.0) / theta, "y": (2 * j).astype(F32) / dim.astype(F32)}


def pow_grid(fi: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """pow inputs: FlashInfer's, ggml's theta_scale ** i, 512 random pairs; unique."""
    xs, ys = [fi["rcp"]], [fi["y"]]
    for base in BASES:
        for d in DIMS:
            theta_scale = F32(F32(base) ** F32(-2.0 / d))
            xs.append(np.full(d // 2, theta_scale, dtype=F32))
            ys.append(np.arange(d // 2, dtype=F32))
    rng = np.random.default_rng(0)
    xs.append(np.exp(rng.uniform(np.log(1e-7), np.log(4.0), 512)).astype(F32))
    ys.append(rng.uniform(0.0, 1.0, 512).astype(F32))
    x, y = np.concatenate(xs).astype(F32), np.concatenate(ys).astype(F32)
    key = (x.view(np.uint32).astype(np.uint64) << np.uint64(32)) | y.view(np.uint32)
    _, first = np.unique(key, return_index=True)
    return x[first], y[first]


class CupyBackend:
    """NVRTC through cupy.RawModule."""

    name = "cupy.RawModule (NVRTC; cupy adds -arch for the device)"

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        cupy.cuda.runtime.getDeviceCount()  # raises without a driver or device

    def build(self, src: str, options: tuple[str, ...], tag: str) -> Any:
        module = self.cp.RawModule(code=src, options=options)
        module.compile()
        return module

    def run(self, module: Any, kernel: str, inputs: list[np.ndarray], n_out: int) -> list[np.ndarray]:
        cp, n = self.cp, len(inputs[0])
        args = [cp.asarray(np.ascontiguousarray(a)) for a in inputs]
        outs = [cp.empty(n, dtype=cp.float32) for _ in range(n_out)]
        module.get_function(kernel)(((n + 255) // 256,), (256,), (*args, *outs, np.int32(n)))
        cp.cuda.Device().synchronize()
        return [cp.asnumpy(o) for o in outs]


class TorchBackend:
    """nvcc through torch.utils.cpp_extension.load_inline, with generated launchers."""

    name = "torch.utils.cpp_extension.load_inline (nvcc extra_cuda_cflags)"

    def __init__(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        self.torch = torch

    def build(self, src: str, options: tuple[str, ...], tag: str) -> Any:
        from torch.utils.cpp_extension import load_inline

        names = [k for k in SIGNATURES if f" {k}(" in src]
        decls, defs = [], []
        for k in names:
            types = SIGNATURES[k]
            params = ", ".join(f"torch::Tensor a{q}" for q in range(len(types)))
            ptrs = ", ".join(f"a{q}.data_ptr<{t}>()" for q, t in enumerate(types))
            sig = f"void launch_{k}({params}, int64_t n)"
            decls.append(sig + ";")
            defs.append(f"{sig} {{ {k}<<<(n + 255) / 256, 256>>>({ptrs}, (int)n); }}")
        header = "#include <torch/extension.h>\n"
        return load_inline(name=f"capture_cuda_{tag}", cpp_sources=header + "\n".join(decls),
                           cuda_sources=header + src + "\n".join(defs),
                           functions=[f"launch_{k}" for k in names], extra_cuda_cflags=list(options))

    def run(self, module: Any, kernel: str, inputs: list[np.ndarray], n_out: int) -> list[np.ndarray]:
        torch, n = self.torch, len(inputs[0])
        args = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in inputs]
        outs = [torch.empty(n, dtype=torch.float32, device="cuda") for _ in range(n_out)]
        getattr(module, f"launch_{kernel}")(*args, *outs, n)
        torch.cuda.synchronize()
        return [o.cpu().numpy() for o in outs]


def capture(backend: Any) -> dict[str, np.ndarray]:
    """Build both modules, run every kernel on the grids, return the arrays to save."""
    fast = backend.build(FAST_SRC, FAST_OPTIONS, "fast")
    precise = backend.build(PRECISE_SRC, PRECISE_OPTIONS, "precise")
    x = sincos_grid()
    fi = flashinfer_rows()
    px, py = pow_grid(fi)
    out: dict[str, np.ndarray] = {"sincos_x": x, "pow_x": px, "pow_y": py}
    out["fast_sin"], out["fast_cos"] = backend.run(fast, "fast_sincos", [x], 2)
    out["fast_sinf"], out["fast_cosf"] = backend.run(fast, "fast_sin_cos", [x], 2)
    out["precise_sin"], out["precise_cos"] = backend.run(precise, "precise_sincos", [x], 2)
    (out["fast_pow"],) = backend.run(fast, "fast_pow", [px, py], 1)
    (out["precise_pow"],) = backend.run(precise, "precise_pow", [px, py], 1)
    (out["flashinfer_freq"],) = backend.run(fast, "flashinfer_freq", [fi["rcp"], fi["j"], fi["dim"]], 1)
    out.update(flashinfer_theta=fi["theta"], flashinfer_dim=fi["dim"], flashinfer_j=fi["j"])
    return out


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 (meta is best effort)
        return None


def metadata(backend: Any) -> dict[str, Any]:
    """Self-description of the capture: device, versions, options, kernel sources."""
    cp = _try(lambda: __import__("cupy"))
    torch = _try(lambda: __import__("torch"))
    rt = cp.cuda.runtime if cp is not None else None
    cc = _try(lambda: cp.cuda.Device(0).compute_capability) or _try(
        lambda: "%d%d" % torch.cuda.get_device_capability(0))
    nvrtc = _try(lambda: ".".join(map(str, cp.cuda.nvrtc.getVersion())))
    options = {k: list(FAST_OPTIONS if f" {k}(" in FAST_SRC else PRECISE_OPTIONS) for k in SIGNATURES}
    return {
        "gpu": _try(lambda: torch.cuda.get_device_name(0))
        or _try(lambda: rt.getDeviceProperties(0)["name"].decode()),
        "compute_capability": cc,
        "cuda_runtime": _try(lambda: rt.runtimeGetVersion()),
        "cuda_driver": _try(lambda: rt.driverGetVersion()),
        "nvrtc": nvrtc,
        "torch_cuda": _try(lambda: torch.version.cuda),
        "cupy": _try(lambda: cp.__version__),
        "torch": _try(lambda: torch.__version__),
        "numpy": np.__version__,
        "backend": backend.name,
        "options": options,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sources": {"fast": FAST_SRC, "precise": PRECISE_SRC},
    }


def summary(a: dict[str, np.ndarray]) -> list[str]:
    """A few lines a human can read: counts and the largest fast/precise gaps."""
    x = a["sincos_x"].astype(np.float64)
    lines = [f"sincos: {x.size} angles; pow: {a['pow_x'].size} pairs; "
             f"flashinfer_freq: {a['flashinfer_freq'].size} rows"]
    for f in ("sin", "cos"):
        gap = np.abs(a[f"fast_{f}"].astype(np.float64) - a[f"precise_{f}"].astype(np.float64))
        inner, outer = gap[np.abs(x) <= np.pi], gap[np.abs(x) > np.pi]
        lines.append(f"max |__sincosf {f} - sincosf {f}|: |x| <= pi {inner.max():.3e}, "
                     f"|x| > pi {outer.max():.3e}")
    ok = a["precise_pow"] != 0
    rel = np.abs(a["fast_pow"][ok].astype(np.float64) / a["precise_pow"][ok].astype(np.float64) - 1.0)
    lines.append(f"max |__powf / powf - 1|: {rel.max():.3e} over {int(ok.sum())} pairs")
    return lines


def dry_run() -> list[str]:
    """The grids' sizes and ranges, without touching a GPU."""
    x, fi = sincos_grid(), flashinfer_rows()
    px, py = pow_grid(fi)
    raw = 4 * (7 * x.size + 4 * px.size + 4 * fi["theta"].size)
    return [f"sincos_x: {x.size} float32 angles in [{x.min():.6g}, {x.max():.6g}]",
            f"pow pairs: {px.size} (x in [{px.min():.3g}, {px.max():.3g}], y in [{py.min():.3g}, {py.max():.3g}])",
            f"flashinfer rows: {fi['theta'].size} (thetas {BASES}, dims {DIMS})",
            f"arrays uncompressed: about {raw / 1e6:.3f} MB (limit 1.5 MB compressed)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="where to write the .npz (default: %(default)s)")
    parser.add_argument("--dry-run", action="store_true",
                        help="build the input grids and print their sizes; no GPU needed")
    args = parser.parse_args(argv)

    if args.dry_run:
        print("\n".join(dry_run()))
        return 0

    reasons = []
    for kind in (CupyBackend, TorchBackend):
        try:
            backend = kind()
            arrays = capture(backend)
            break
        except Exception as e:  # noqa: BLE001 (each backend may fail in its own way)
            first = (str(e).strip().splitlines() or [""])[0]
            reasons.append(f"{kind.__name__}: {type(e).__name__}: {first}")
    else:
        print("capture_cuda: no working CUDA backend (" + "; ".join(reasons) + ")", file=sys.stderr)
        return 2

    arrays["meta"] = np.array(json.dumps(metadata(backend), indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    size = args.out.stat().st_size
    print(f"wrote {args.out} ({size / 1e6:.3f} MB) with {backend.name}")
    if size >= 1.5e6:
        print("warning: file is over 1.5 MB", file=sys.stderr)
    print("\n".join(summary(arrays)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
