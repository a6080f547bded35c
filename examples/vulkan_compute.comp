#version 450
// saxpy: out[i] = scale * x[i] + y[i]. x and y live in one gpupart partition, out in
// another; the example checks every result on the host.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Params { float scale; uint n; } params;

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < params.n) result[i] = params.scale * x[i] + y[i];
}
