// The compute shader of tests/vulkan/test_sparse_binding.c: reads and rewrites each
// 32-bit word of a storage buffer range that spans two separately bound memory objects,
// so a wrong binding shows in the data.
#version 450
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) buffer Data { uint v[]; } data;
layout(push_constant) uniform Params { uint count; uint seed; } params;

void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < params.count) data.v[i] = data.v[i] * 2u + i + params.seed;
}
