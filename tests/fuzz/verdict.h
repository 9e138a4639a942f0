/* A fuzz target reports whether its parser accepted the input, so the corpus replayer
 * (replay.c) can hold the corpus to its names: a file named ok-* must be accepted and a
 * file named near-* (a valid input with one field wrong) refused. That keeps every
 * corpus reaching past the parser's first check. A target that never reports is not held
 * to the names. Under libFuzzer the verdict is unused. */
#ifndef VGPU_TESTS_FUZZ_VERDICT_H
#define VGPU_TESTS_FUZZ_VERDICT_H

#include <stdbool.h>

/* -1: not reported; 0: refused; 1: accepted. Weak, so libFuzzer builds (no replay.c)
 * link too. */
__attribute__((weak)) int vg_fuzz_verdict = -1;

static inline void vg_fuzz_report(bool accepted)
{
    vg_fuzz_verdict = accepted ? 1 : 0;
}

#endif
