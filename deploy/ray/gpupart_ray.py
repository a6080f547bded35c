"""Ray actors that share one GPU by fractions, each held to its fraction by gpupart.

Ray's fractional GPUs (`num_gpus=0.5`) are a scheduling count: Ray puts two such actors
on one GPU and sets CUDA_VISIBLE_DEVICES for them, but does not limit what either
allocates. This recipe gives each actor, through its `runtime_env`, a gpupart partition
of the GPU's budget sized by its fraction (and an optional floor), in one shared ledger
of the node, so that each is refused past its share (gpupart.LimitError) and `gpupart top`
shows both. The programs allocate through gpupart (here its Python package; PyTorch,
CuPy or pyopencl through its allocators, docs/python.md; unmodified programs under its
layers, docs/unmodified.md).

Needs: `pip install ray` and gpupart's Python package (`pip install ./python`) in the
environment Ray's workers use, and libgpupart. One node: the ledger is a file in a folder
of that node (GPUPART_LEDGER_DIR), shared by the actors' processes, which run as one user.

    python3 deploy/ray/gpupart_ray.py          # two actors on the node's GPU; see docs/deploy.md

tests/deploy/test_ray.py runs this file's actors on the sim backend (GPUPART_BACKEND=sim
in the environment given to share_env), Ray on the CPU with one logical GPU."""
import os

import ray


def share_env(name, num_gpus, guarantee=0.0, ledger_dir="/run/gpupart", extra=None):
    """The runtime_env that puts an actor of `num_gpus` (a fraction of one GPU) under
    partition `name` of that size, guaranteed `guarantee` (a fraction, 0 for none), in
    the node's ledger folder; extra: more variables (GPUPART_* or others)."""
    if not 0 < num_gpus <= 1 or not 0 <= guarantee <= num_gpus:
        raise ValueError(f"num_gpus {num_gpus} and guarantee {guarantee}: want 0 < guarantee <= num_gpus <= 1")
    size = f"{name}:{num_gpus * 100:g}%" + (f":{guarantee * 100:g}%" if guarantee else "")
    env = {"GPUPART_PARTITIONS": size, "GPUPART_PARTITION": name, "GPUPART_SHARED": "1",
           "GPUPART_LEDGER_DIR": ledger_dir, **(extra or {})}
    return {"env_vars": env}


@ray.remote
class Worker:
    """An actor whose GPU memory comes from its gpupart partition (the one its
    runtime_env names), through gpupart's Python package."""

    def __init__(self):
        import gpupart
        self.gpupart = gpupart
        self.ctx = gpupart.Context()  # reads the GPUPART_* variables of the runtime_env
        self.dev = self.ctx.open_device()
        self.part = self.dev.find(os.environ["GPUPART_PARTITION"])
        self.held = []

    def where(self):
        """What Ray gave this actor, and the partition's limit and floor."""
        s = self.part.stats
        return {"pid": os.getpid(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "limit": s.limit,
                "guarantee": s.guarantee, "budget": self.dev.budget}

    def hold(self, nbytes):
        """Allocates nbytes and keeps them: "ok", or the gpupart error's name."""
        try:
            self.held.append(self.part.alloc(nbytes))
            return "ok"
        except self.gpupart.Error as e:
            return e.name

    def release(self):
        for a in self.held:
            a.free()
        self.held.clear()
        return self.part.stats.in_use


def main():
    """Two actors of half a GPU each, on the node's GPU: `train` guaranteed a quarter."""
    ray.init(num_gpus=1, include_dashboard=False)
    ledger = os.environ.get("GPUPART_LEDGER_DIR", "/run/gpupart")
    train = Worker.options(num_gpus=0.5, runtime_env=share_env("train", 0.5, 0.25, ledger)).remote()
    serve = Worker.options(num_gpus=0.5, runtime_env=share_env("serve", 0.5, 0, ledger)).remote()
    for w in (train, serve):
        info = ray.get(w.where.remote())
        print(info)
        print("past its share:", ray.get(w.hold.remote(info["limit"] + (2 << 20))))
    ray.shutdown()


if __name__ == "__main__":
    main()
