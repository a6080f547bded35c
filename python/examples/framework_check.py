"""A small PyTorch training step and a CuPy computation inside a gpupart partition, timed
against the frameworks' own allocators (PyTorch's caching allocator, CuPy's memory pool).

    python3 python/examples/framework_check.py torch|cupy [--steps N]

Each variant runs in a fresh process (PyTorch accepts a new allocator only before its
first CUDA allocation), checks its numbers against the default run's, and prints one
line: steps, ms per step for both, the overhead, and gpupart's peak. Exit 77 (skip) where
the framework or a CUDA device is missing, 1 when the results differ or a run fails.
scripts/gpu-check runs it with the package from python/ and the library it built.
"""

import argparse
import json
import subprocess
import sys
import time


def torch_run(use_gpupart: bool, steps: int) -> dict:
    import torch

    if use_gpupart:
        import gpupart.torch as gt

        gt.use(fraction=0.5)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024),
                                torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(512, 1024, device="cuda"), torch.randint(0, 10, (512,), device="cuda")

    def step() -> float:
        opt.zero_grad(set_to_none=True)  # gradients freed and reallocated each step
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) * 1000 / steps
    peak = gt.max_memory_allocated() if use_gpupart else torch.cuda.max_memory_allocated()
    return {"ms_per_step": ms, "loss": loss, "peak_bytes": peak}


def cupy_run(use_gpupart: bool, steps: int) -> dict:
    import cupy

    part = None
    if use_gpupart:
        import gpupart.cupy as gc

        part = gc.use(fraction=0.5)
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((2048, 2048), dtype=cupy.float32)

    def step() -> float:
        b = cupy.tanh(a @ a.T / 2048) + a * 0.5  # temporaries of 16 MiB each
        return float(b.sum())

    for _ in range(3):
        step()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        total = step()
    cupy.cuda.Device().synchronize()
    ms = (time.perf_counter() - start) * 1000 / steps
    peak = part.stats.peak_in_use if part else cupy.get_default_memory_pool().total_bytes()
    return {"ms_per_step": ms, "loss": total, "peak_bytes": peak}


def available(framework: str) -> str:
    """"" when framework and a CUDA device are usable, else why not."""
    try:
        if framework == "torch":
            import torch

            return "" if torch.cuda.is_available() else "PyTorch sees no CUDA device"
        import cupy

        return "" if cupy.cuda.runtime.getDeviceCount() > 0 else "CuPy sees no CUDA device"
    except Exception as e:  # ImportError, or CuPy's CUDARuntimeError without a driver
        return f"{framework}: {e}"


def child(framework: str, variant: str, steps: int) -> dict:
    out = subprocess.run([sys.executable, __file__, framework, "--steps", str(steps), "--child", variant],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{framework}/{variant} failed (exit {out.returncode}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=["torch", "cupy"])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--child", choices=["default", "gpupart"])
    args = ap.parse_args()
    run = torch_run if args.framework == "torch" else cupy_run
    if args.child:
        print(json.dumps(run(args.child == "gpupart", args.steps)))
        return 0
    why = available(args.framework)
    if why:
        print(f"framework_check: skipped: {why}")
        return 77
    base = child(args.framework, "default", args.steps)
    mine = child(args.framework, "gpupart", args.steps)
    same = abs(base["loss"] - mine["loss"]) <= 1e-3 * max(1.0, abs(base["loss"]))
    overhead = mine["ms_per_step"] / base["ms_per_step"] - 1
    print(f"{args.framework}: {args.steps} steps: own allocator {base['ms_per_step']:.3f} ms/step, gpupart "
          f"{mine['ms_per_step']:.3f} ms/step, overhead {overhead * 100:+.1f}%; gpupart peak "
          f"{mine['peak_bytes'] / 2**20:.1f} MiB (own {base['peak_bytes'] / 2**20:.1f} MiB); results "
          f"{'match' if same else 'DIFFER'} ({base['loss']:.6g} vs {mine['loss']:.6g})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
