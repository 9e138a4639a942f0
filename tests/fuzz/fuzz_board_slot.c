/* Fuzz target for what a reader takes from the compute board's slot files
 * (docs/compute.md): the input is a slot file's name, a newline, then the bytes of one
 * process slot as a neighbour may have written them (any bytes: the file is the
 * neighbour's). The name either parses to a share of 1..100 % or is refused with a
 * message; the slot, read with that share as its bound, either counts as absent or gives
 * figures within the bound. The name's priority (".high" before ".slot") is what the name
 * says, and the same name parses to the same share with or without asking for it. The
 * verdict is the name's. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libvgpu/compute.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t nlen = nl != NULL ? (size_t)(nl - data) : size;
    char fname[512];
    if (nlen >= sizeof fname)
        return 0;
    memcpy(fname, data, nlen);
    fname[nlen] = '\0';
    char name[VGC_NAME_MAX];
    int64_t bound = -1;
    struct vg_err err = {0};
    int rc = vgc_slot_name_parse(fname, name, sizeof name, &bound, &err);
    vg_fuzz_report(rc == 0);
    if (rc == 0 && (bound < 10000 || bound > VGC_PPM || strlen(name) == 0))
        abort();
    if (rc != 0 && err.msg[0] == '\0')
        abort();
    char name2[VGC_NAME_MAX];
    int64_t bound2 = -1;
    bool high = false;
    int rc2 = vgc_slot_name_parse_prio(fname, name2, sizeof name2, &bound2, &high, &err);
    size_t fl = strlen(fname);
    bool says_high = fl >= 10 && strcmp(fname + fl - 10, ".high.slot") == 0;
    if (rc2 != rc ||
        (rc == 0 && (bound2 != bound || strcmp(name, name2) != 0 || high != says_high)))
        abort();
    if (rc != 0)
        bound = VGC_PPM;
    struct vgc_board_slot s;
    memset(&s, 0, sizeof s);
    size_t rest = nl != NULL ? size - nlen - 1 : 0;
    memcpy(&s, nl != NULL ? nl + 1 : data, rest < sizeof s ? rest : sizeof s);
    static const int64_t nows[] = {0, 1, INT64_C(5000000000), INT64_C(1) << 50};
    for (size_t i = 0; i < sizeof nows / sizeof nows[0]; i++) {
        struct vgc_slot_seen seen;
        if (!vgc_slot_read(&s, nows[i], bound, &seen))
            continue;
        if (seen.share_ppm < 0 || seen.share_ppm > bound || seen.claim_ppm < 0 ||
            seen.claim_ppm > bound || seen.pend < 0)
            abort();
    }
    return 0;
}
