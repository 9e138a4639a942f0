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

/* Like vg_parse_bytes, but a bare number means MiB (the MEMORY field of FAKEGPU_DEVICES
 * and the device plugin's vgpu.defaultMemory are given in MiB). Not for pod values:
 * those are Kubernetes quantities, read with vg_parse_kube_mib. */
int vg_parse_mib_default(const char *s, uint64_t *out, struct vg_err *err);

/* A Kubernetes resource.Quantity giving GPU memory (nvidia.com/gpumem), answered in whole
 * MiB, rounded up. The grammar is Kubernetes' own: an optional sign, digits with an
 * optional '.', then nothing, a binary suffix (Ki Mi Gi Ti Pi Ei), a decimal suffix
 * (m k M G T P E) or an exponent (e3, E-2, e+6). What the number counts (docs/protocol.md,
 * "Kubernetes quantities"):
 *   - binary suffixes and M G T P E count bytes: 4Gi = 4096 MiB, 4G = 3815 MiB;
 *   - no suffix, k and exponents count MiB, as HAMi reads gpumem (the integer value is
 *     MiB), and as Kubernetes itself rewrites a plain 3000 into 3k: 3000 = 3k = 3e3 =
 *     3000 MiB;
 *   - m (milli) is refused: 4096m is 4.096 to Kubernetes, never 4096 MiB.
 * Refused with a message: empty, negative, a value above 2^63-1 (Kubernetes' limit) or
 * above max_mib once rounded, unknown suffixes (GiB, g, ...), whitespace, garbage. */
int vg_parse_kube_mib(const char *s, uint64_t max_mib, uint64_t *out, struct vg_err *err);

/* A Kubernetes resource.Quantity that counts things (nvidia.com/gpu, gpucores,
 * gpumem-percentage): the same grammar, the value must be a whole number in 0..max
 * ("2", "1k", "1e2" are accepted; "0.5", "500m", "-1" are not). */
int vg_parse_kube_count(const char *s, uint64_t max, uint64_t *out, struct vg_err *err);

#endif
