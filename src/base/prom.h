/* Prometheus's text exposition format (version 0.0.4), written into a vg_buf: the one
 * writer every vgpu /metrics endpoint and metrics file uses (docs/monitor.md and
 * docs/scheduler.md list the series).
 *
 *     struct vg_prom p;
 *     vg_prom_init(&p, &buf, &err);                 // buf's ceiling bounds the output
 *     vg_prom_family(&p, "vgpu_x_total", "counter", "Things done.");
 *     vg_prom_sample(&p, "vgpu_x_total");
 *     vg_prom_label(&p, "pod", name);               // escaped here
 *     vg_prom_u64(&p, n);                            // ends the sample: } value \n
 *     rc = vg_prom_done(&p);                         // the first error, or 0
 *
 * What the writer keeps true, so no producer has to:
 * - a family's "# HELP" and "# TYPE" lines appear once: beginning a family a second time
 *   is an error (-EEXIST), as its samples would no longer be contiguous;
 * - a sample belongs to the family begun last (its name is the family's, or the family's
 *   followed by "_suffix", as histograms' _bucket/_sum/_count are), else -EINVAL;
 * - label values are escaped (backslash, double quote, newline, as the format says), and
 *   invalid UTF-8 is replaced by one rule: every byte that does not begin a well-formed
 *   UTF-8 sequence (RFC 3629: shortest form, no surrogates, at most U+10FFFF) is written
 *   as U+FFFD, and the next byte is tried again;
 * - a label value longer than VG_PROM_VALUE_MAX bytes is not cut: it is an error
 *   (-E2BIG naming the family and the label), as a cut value could merge two series;
 * - numbers are written one way: integers in decimal, fixed-point values exactly (no
 *   binary rounding), doubles as %.17g (round-trips), NaN and infinities as "NaN",
 *   "+Inf" and "-Inf";
 * - the output never passes the buffer's ceiling (-E2BIG from vg_buf).
 * Errors are sticky: after the first, every call does nothing and vg_prom_done returns
 * it, so producers write straight-line code and check once.
 *
 * Label sets that stay the same across many samples can be built once: vg_prom_set_begin
 * on a writer over a scratch buffer, vg_prom_label calls, and the bytes written
 * (`name="value",...`, no braces) go into samples with vg_prom_label_set.
 *
 * Not thread-safe; one writer per scrape. */
#ifndef VGPU_BASE_PROM_H
#define VGPU_BASE_PROM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* The longest label value accepted, in bytes before escaping. Kubernetes names are at
 * most 253 bytes; every value vgpu exports is far below this. */
#define VG_PROM_VALUE_MAX    4096
/* The most families one writer begins. */
#define VG_PROM_FAMILIES_MAX 4096

struct vg_prom {
    struct vg_buf *b;
    struct vg_err *err;
    int rc;                /* the first error, sticky */
    const char *family;    /* the family begun last; NULL before the first */
    size_t family_len;     /* strlen(family) */
    unsigned labels;       /* labels written in the sample or set being written */
    bool in_sample;        /* a sample's name is written, its value not yet */
    bool in_set;           /* a label set is being built (vg_prom_set_begin) */
    const char **families; /* the families begun, for the once-only check */
    size_t family_count, family_cap;
};

/* A writer appending to b (b's ceiling bounds what it writes). Allocates nothing. */
void vg_prom_init(struct vg_prom *p, struct vg_buf *b, struct vg_err *err);

/* Releases the writer's memory and returns its first error (0: all written). */
int vg_prom_done(struct vg_prom *p);

/* Begins a family: "# HELP name help" (help escaped as the format says) and "# TYPE
 * name type". name must be a valid metric name and stay valid until vg_prom_done; type
 * one of counter, gauge, histogram, summary, untyped. */
void vg_prom_family(struct vg_prom *p, const char *name, const char *type, const char *help);

/* Begins a sample of the current family. */
void vg_prom_sample(struct vg_prom *p, const char *name);

/* Adds a label to the sample (or set) being written: name="escaped value". */
void vg_prom_label(struct vg_prom *p, const char *name, const char *value);
void vg_prom_label_n(struct vg_prom *p, const char *name, const char *value, size_t len);
void vg_prom_label_u64(struct vg_prom *p, const char *name, uint64_t value);

/* Adds a label set built earlier with vg_prom_set_begin (already escaped). */
void vg_prom_label_set(struct vg_prom *p, const char *set, size_t len);

/* Starts a label set (labels without braces, for vg_prom_label_set) at the buffer's end. */
void vg_prom_set_begin(struct vg_prom *p);

/* End the sample with its value. vg_prom_fixed writes value / scale exactly, scale a
 * power of ten up to 10^18 with digits its exponent, trailing fraction zeros dropped
 * (scale 1: an integer). */
void vg_prom_u64(struct vg_prom *p, uint64_t value);
void vg_prom_fixed(struct vg_prom *p, uint64_t value, uint64_t scale, unsigned digits);
void vg_prom_double(struct vg_prom *p, double value);

#endif
