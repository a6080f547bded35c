# A pyopencl script (tests/interpose/test_cl_layer.c runs it under the OpenCL layer) that knows nothing of gpupart: allocates 1 MiB buffers (each
# written, so that PoCL really allocates) until refused or 200 MiB, then prints the MiB.
import pyopencl as cl

ctx = cl.Context(dev_type=cl.device_type.ALL)
queue = cl.CommandQueue(ctx)
held, code = [], 0
try:
    while len(held) < 200:
        buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20)
        cl.enqueue_fill_buffer(queue, buf, b"\0", 0, 1 << 20)
        held.append(buf)
except cl.Error as e:
    code = e.code
queue.finish()
print("global", ctx.devices[0].global_mem_size)
print("allocated", len(held), "code", code)
