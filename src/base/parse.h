/* Checked parsing of numbers and quantities: the only way vgpu turns text into numbers
 * (docs/style.md §4). Every function rejects empty input, signs where none is allowed,
 * whitespace, trailing garbage and values out of range, and says why in err. */
#ifndef VGPU_BASE_PARSE_H
#define VGPU_BASE_PARSE_H

#include <stdint.h>

#include "base/err.h"

/* Decimal unsigned integer in [min, max]. */
int vg_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, struct vg_err *err);

/* Decimal signed integer in [min, max]. */
int vg_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, struct vg_err *err);

/* A byte quantity: a number with an optional unit, all units binary (powers of 1024),
 * case-insensitive: B, k|K|KB|KiB, m|M|MB|MiB, g|G|GB|GiB, t|T|TB|TiB. A fraction is
 * allowed when the result is a whole number of bytes ("1.5GiB"). Examples: "4096",
 * "4096m", "4g", "80GiB", "81559MiB". Rejects anything that does not fit in 64 bits. */
int vg_parse_bytes(const char *s, uint64_t *out, struct vg_err *err);

/* Like vg_parse_bytes, but a bare number means MiB (Kubernetes' nvidia.com/gpumem and
 * the MEMORY field of FAKEGPU_DEVICES are given in MiB). */
int vg_parse_mib_default(const char *s, uint64_t *out, struct vg_err *err);

#endif
