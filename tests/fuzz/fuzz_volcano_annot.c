/* Fuzzes the decoders of Volcano's annotation strings (src/deviceplugin/volcano_annot.c).
 *
 * Oracle: an independent reading of the grammar (docs/volcano.md), written here as a plain
 * character walk: segments joined by ';', each zero or more entries `U,T,M,C:` with U and T
 * 1..63 / 1..15 of [A-Za-z0-9-_], M a decimal 1..2^31-1, C a decimal 0..100, no GPU twice
 * in one segment, at most 16 entries per segment and 32 segments. The decoder must accept
 * exactly what the oracle accepts; what it accepts encodes back to the same bytes when the
 * numbers had no leading zeros, and decodes again to what encodes the same. A refusal has a
 * message. The node annotation's decoder runs on the input too: what it accepts encodes
 * back to the input. Verdict: the pod decoder's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/volcano.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool idc(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* A decimal of [s, e) in [lo, hi]; *zeros when it has a leading zero. */
static bool number(const char *s, const char *e, unsigned long long lo, unsigned long long hi,
                   bool *zeros)
{
    if (s == e || e - s > 19)
        return false;
    unsigned long long v = 0;
    for (const char *p = s; p < e; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (unsigned long long)(*p - '0');
    }
    if (e - s > 1 && *s == '0')
        *zeros = true;
    return v >= lo && v <= hi;
}

static bool oracle(const char *t, size_t n, bool *zeros)
{
    if (n > ANNOT_MAX_BYTES)
        return false;
    if (n == 0)
        return true;
    size_t segs = 1, entries = 0;
    char seen[ANNOT_MAX_GPUS][ANNOT_UUID_MAX];
    const char *p = t, *end = t + n;
    while (p <= end) {
        if (p == end)
            break;
        if (*p == ';') {
            if (++segs > ANNOT_MAX_CONTAINERS)
                return false;
            entries = 0;
            p++;
            continue;
        }
        /* One entry. */
        const char *f[4], *fe[4];
        for (int k = 0; k < 4; k++) {
            f[k] = p;
            while (p < end && *p != ',' && *p != ':' && *p != ';')
                p++;
            fe[k] = p;
            char want = k < 3 ? ',' : ':';
            if (p == end || *p != want)
                return false;
            p++;
        }
        size_t ul = (size_t)(fe[0] - f[0]), tl = (size_t)(fe[1] - f[1]);
        if (ul == 0 || ul >= ANNOT_UUID_MAX || tl == 0 || tl >= VC_TYPE_MAX)
            return false;
        for (const char *q = f[0]; q < fe[0]; q++)
            if (!idc(*q))
                return false;
        for (const char *q = f[1]; q < fe[1]; q++)
            if (!idc(*q))
                return false;
        if (!number(f[2], fe[2], 1, INT32_MAX, zeros) || !number(f[3], fe[3], 0, 100, zeros))
            return false;
        if (entries == ANNOT_MAX_GPUS)
            return false;
        for (size_t k = 0; k < entries; k++)
            if (strlen(seen[k]) == ul && memcmp(seen[k], f[0], ul) == 0)
                return false;
        memcpy(seen[entries], f[0], ul);
        seen[entries][ul] = '\0';
        entries++;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct vc_pod_devices pd, pd2;
    static char text[2 * ANNOT_MAX_BYTES];
    struct vg_err err = {0};
    const char *in = (const char *)data;
    bool zeros = false;
    bool want = memchr(in, '\0', size) == NULL && oracle(in, size, &zeros);
    int rc = vc_pod_devices_decode(in, size, &pd, &err);
    if ((rc == 0) != want)
        abort();
    if (rc != 0 && err.msg[0] == '\0')
        abort();
    if (rc == 0) {
        if (vc_pod_devices_encode(&pd, text, sizeof text, &err) != 0)
            abort();
        if (!zeros && (strlen(text) != size || memcmp(text, in, size) != 0))
            abort();
        static char again[2 * ANNOT_MAX_BYTES];
        if (vc_pod_devices_decode(text, strlen(text), &pd2, &err) != 0 || pd2.count != pd.count ||
            vc_pod_devices_encode(&pd2, again, sizeof again, &err) != 0 || strcmp(again, text) != 0)
            abort();
    }
    static struct vc_node_device nodes[ANNOT_MAX_GPUS];
    unsigned n = 0;
    err.msg[0] = '\0';
    if (vc_node_register_decode(in, size, nodes, ANNOT_MAX_GPUS, &n, &err) == 0) {
        if (vc_node_register_encode(nodes, n, text, sizeof text, &err) != 0)
            abort();
        /* Canonical unless a number had a leading zero. */
        if (strlen(text) == size && memcmp(text, in, size) != 0) {
            bool zero = false;
            for (size_t i = 0; i + 1 < size && !zero; i++)
                zero = in[i] == '0' && in[i + 1] >= '0' && in[i + 1] <= '9';
            if (!zero)
                abort();
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    vg_fuzz_report(rc == 0);
    return 0;
}
