/* Injected device health: one bit per device in the shared state, set by fakegpu-ctl and
 * read by NVML on every device query. Atomic, so a query never waits on the state lock
 * for it, and a test flipping it is seen by the next call of every process. */
#include <errno.h>
#include <stdbool.h>

#include "fakegpu/state.h"
#include "fakegpu/timeline.h"

int fg_device_set_lost(struct fg_state *st, int dev, bool lost)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count)
        return -EINVAL;
    uint32_t bit = 1u << (unsigned)dev;
    if (lost)
        __atomic_or_fetch(&sh->lost, bit, __ATOMIC_ACQ_REL);
    else
        __atomic_and_fetch(&sh->lost, ~bit, __ATOMIC_ACQ_REL);
    return 0;
}

bool fg_device_lost(struct fg_state *st, int dev)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count)
        return false;
    return (__atomic_load_n(&sh->lost, __ATOMIC_ACQUIRE) >> (unsigned)dev) & 1u;
}
