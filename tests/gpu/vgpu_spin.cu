// vgpu_spin: a kernel that runs for `ns` nanoseconds of GPU time, measured on the
// global timer. fakegpu simulates a kernel of this name for exactly that long, so the
// same test programs measure the same thing on a real GPU and on fakegpu.
// Regenerate the PTX with:
//   nvcc -arch=compute_80 -ptx tests/gpu/vgpu_spin.cu -o tests/gpu/vgpu_spin.ptx
// then set `.version 7.0` so that older drivers can JIT it (nothing newer is used).
extern "C" __global__ void vgpu_spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
