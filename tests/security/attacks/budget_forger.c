/* A process of the container that forges its compute budget (docs/security.md, "Compute
 * budget and the region's fields"): no CUDA, any uid, only the region file, which every
 * process of the container may write.
 *
 *   budget_forger REGION_FILE VALUES SECONDS
 *
 * Waits for the region to appear, then every 200 us for SECONDS rewrites every field of
 * every device's compute budget (struct region_compute) with VALUES, and the device's
 * recorded share (0 for zero, 100 otherwise):
 *   zero    every field 0 (a credit of 0 never waits)
 *   minus1  every field -1 (a refill time long past refills to the ceiling at once)
 *   max     every field INT64_MAX (a credit that never runs out, times in the future)
 *   big     a plausible budget: 10 s of credit refilled just now at the whole GPU's rate,
 *           the control tick just run, the trim at its top, nothing achieved or waited
 *   none    nothing (the same run without the forgery, for comparison)
 * Prints "writes=<n>" at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "region/region.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void fill(struct region_compute *c, int64_t v)
{
    atomic_store(&c->credit_ns, v);
    atomic_store(&c->refill_at, v);
    atomic_store(&c->busy_ns, v);
    atomic_store(&c->waited_ns, v);
    atomic_store(&c->rate_ppm, v);
    atomic_store(&c->tick_at, v);
    atomic_store(&c->tick_busy, v);
    atomic_store(&c->tick_waited, v);
    atomic_store(&c->integral_ppm, v);
    atomic_store(&c->achieved_ppm, v);
    atomic_store(&c->closed_n, v);
    atomic_store(&c->closed_why, v);
    atomic_store(&c->held_ns, v);
}

static void big(struct region_compute *c, int64_t now)
{
    atomic_store(&c->credit_ns, INT64_C(10000000000));
    atomic_store(&c->refill_at, now - 1000);
    atomic_store(&c->rate_ppm, 1000000);
    atomic_store(&c->tick_at, now);
    atomic_store(&c->tick_busy, atomic_load(&c->busy_ns));
    atomic_store(&c->tick_waited, atomic_load(&c->waited_ns));
    atomic_store(&c->integral_ppm, 1000000);
    atomic_store(&c->achieved_ppm, 0);
}

int main(int argc, char **argv)
{
    uint64_t seconds;
    if (argc != 4 || vg_parse_u64(argv[3], 1, 3600, &seconds, NULL) != 0 ||
        (strcmp(argv[2], "zero") != 0 && strcmp(argv[2], "minus1") != 0 &&
         strcmp(argv[2], "max") != 0 && strcmp(argv[2], "big") != 0 &&
         strcmp(argv[2], "none") != 0)) {
        fprintf(stderr, "usage: budget_forger REGION_FILE zero|minus1|max|big|none SECONDS\n");
        return 2;
    }
    const char *how = argv[2];
    struct region *r = NULL;
    struct vg_err err = {0};
    int64_t give_up = now_ns() + INT64_C(10000000000);
    while (region_open(argv[1], &r, &err) != 0) {
        if (now_ns() > give_up) {
            fprintf(stderr, "budget_forger: %s\n", err.msg);
            return 1;
        }
        usleep(1000);
    }
    int64_t end = now_ns() + (int64_t)seconds * 1000000000;
    unsigned long long writes = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (now_ns() < end) {
        int64_t t = now_ns();
        for (unsigned d = 0; d < region_device_count(r) && strcmp(how, "none") != 0; d++) {
            struct region_compute *c = region_compute(r, d);
            /* The recorded share too (a record only; over 100 no process would open the
             * region, which would only refuse its own container's next processes). */
            struct region_device_config *rec =
                (struct region_device_config *)(uintptr_t)region_device(r, d);
            rec->sm_limit_percent = strcmp(how, "zero") == 0 ? 0 : 100;
            if (strcmp(how, "zero") == 0)
                fill(c, 0);
            else if (strcmp(how, "minus1") == 0)
                fill(c, -1);
            else if (strcmp(how, "max") == 0)
                fill(c, INT64_MAX);
            else
                big(c, t);
        }
        writes++;
        next.tv_nsec += 200000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR)
            ;
    }
    printf("writes=%llu\n", writes);
    region_close(r);
    return 0;
}
