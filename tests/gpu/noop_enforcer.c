/* An in-container enforcer that enforces nothing: a shared library with no CUDA or NVML
 * symbols, loaded with LD_PRELOAD in place of libvgpu. The real-GPU suite's dry run under it
 * must fail (integration.gpu_suite_noop_enforcer): a suite that passes a do-nothing
 * enforcer proves nothing about the one it measures. */
int vgpu_noop_enforcer_loaded;
