"""ncnn (PyPI `ncnn`), a real program that sizes itself by VK_EXT_memory_budget: prints
the heap budget its first Vulkan device reports (VulkanDevice::get_heap_budget, in MB),
which the Vulkan layer's test reads under the layer. ncnn passes the budget struct to
vkGetPhysicalDeviceMemoryProperties2KHR uninitialised, through a pointer it asked the
instance for. Exits 77 where ncnn cannot be imported or sees no Vulkan device."""
import sys

try:
    import ncnn
except ImportError as e:
    print(f"no ncnn: {e}")
    sys.exit(77)

if ncnn.get_gpu_count() < 1:
    print("no Vulkan device")
    sys.exit(77)
print(f"ncnn budget {ncnn.get_gpu_device(0).get_heap_budget()}")
