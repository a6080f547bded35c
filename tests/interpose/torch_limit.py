"""An unmodified PyTorch script (it knows nothing of gpupart) for the CUDA preload
library's check on a GPU (tests/interpose/gpu_preload_check.sh, from scripts/gpu-check).
Run under LD_PRELOAD=libgpupart_preload.so and GPUPART_MEMORY_LIMIT=LIMIT:

    torch_limit.py LIMIT_BYTES

It checks what an operator expects of the limit: torch.cuda.mem_get_info() reports LIMIT
as the device's total; holding half of it, a tensor as large as the limit is refused with
torch.cuda.OutOfMemoryError; after the half is freed (and PyTorch's cache emptied) three
quarters of it fit again; a small training step runs. Exit status 0 when all hold."""
import sys

import torch

OOM = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)


def main(limit):
    ok = True
    free, total = torch.cuda.mem_get_info()
    print(f"mem_get_info: free {free} total {total} (limit {limit})")
    if total != limit or free > limit:
        print("FAIL: the device's total is not the limit")
        ok = False
    half = torch.empty(limit // 2, dtype=torch.uint8, device="cuda")
    try:
        torch.empty(limit, dtype=torch.uint8, device="cuda")
        print("FAIL: a tensor as large as the limit was allocated next to half of it")
        ok = False
    except OOM as e:
        print(f"past the limit: {type(e).__name__}")
    del half
    torch.cuda.empty_cache()
    again = torch.empty(limit * 3 // 4, dtype=torch.uint8, device="cuda")
    print(f"after the free: {again.numel()} bytes fit again")
    del again
    model = torch.nn.Linear(1024, 1024).cuda()
    loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
    loss.backward()
    torch.cuda.synchronize()
    print(f"training step: loss {loss.item():.4f}")
    print(f"torch under the preload: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
