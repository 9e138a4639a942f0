/* fakegpu-ctl: changes fakegpu's shared state from outside, as a test or benchmark needs.
 *
 *   fakegpu-ctl health DEVICE on|off   DEVICE is an NVML index or a full GPU-... UUID;
 *                                      off: the GPU has fallen off the bus (NVML queries
 *                                      on it return NVML_ERROR_GPU_IS_LOST); on: back.
 *   fakegpu-ctl xid DEVICE CODE        the GPU reports XID error CODE (1..9999): NVML
 *                                      event sets registered for XID events on it get
 *                                      an nvmlEventTypeXidCriticalError event.
 *   fakegpu-ctl status                 one line per device: index, UUID, healthy|lost,
 *                                      then one indented line per MIG device (profile,
 *                                      UUID, GPU instance id).
 *
 * It attaches to the state named by FAKEGPU_STATE_DIR (and FAKEGPU_DEVICES, when it is the
 * first process) like any fakegpu process. Exit 0, 1 on a state error, 2 on bad usage. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/flags.h"
#include "base/parse.h"
#include "fakegpu/state.h"

static bool help;
static const struct vg_flag flags[] = {
    {.name = "help", .type = VG_FLAG_HELP, .target = &help, .doc = "print this text"},
};

static int usage(FILE *f)
{
    vg_flags_help(f,
                  "usage: fakegpu-ctl health DEVICE on|off\n"
                  "       fakegpu-ctl xid DEVICE CODE\n"
                  "       fakegpu-ctl status\n"
                  "DEVICE: an NVML index or a GPU-... UUID",
                  flags, VG_FLAGS_COUNT(flags));
    return 2;
}

/* The device an index or UUID names, or -1 with a message. */
static int find_device(struct fg_state *st, const char *arg)
{
    int count = fg_state_device_count(st);
    if (strncasecmp(arg, "GPU-", 4) == 0) {
        for (int i = 0; i < count; i++) {
            struct fg_device_info info;
            if (fg_state_device_info(st, i, &info) == 0 && strcasecmp(info.uuid, arg) == 0)
                return i;
        }
        fprintf(stderr, "fakegpu-ctl: no device has UUID '%s'\n", arg);
        return -1;
    }
    uint64_t idx;
    struct vg_err err = {0};
    if (count == 0 || vg_parse_u64(arg, 0, (uint64_t)count - 1, &idx, &err) < 0) {
        fprintf(stderr, "fakegpu-ctl: device '%s': not a UUID or an index below %d\n", arg, count);
        return -1;
    }
    return (int)idx;
}

/* fakegpu-ctl status: one line per device, one indented line per MIG device (and per GPU
 * instance still without its compute instance), made by FAKEGPU_MIG or through NVML. */
static void print_status(struct fg_state *st)
{
    for (int i = 0; i < fg_state_device_count(st); i++) {
        struct fg_device_info info;
        if (fg_state_device_info(st, i, &info) != 0)
            continue;
        printf("%d %s %s\n", i, info.uuid, fg_device_lost(st, i) ? "lost" : "healthy");
        for (unsigned m = 0; info.mig_enabled && m < info.mig_count && m < FG_MAX_MIG; m++) {
            const struct fg_mig_info *mi = &info.mig[m];
            if (mi->gi_id != 0 && mi->has_ci)
                printf("  mig %u %s %s gi %u\n", m, mi->profile, mi->uuid, mi->gi_id);
            else if (mi->gi_id != 0)
                printf("  gi %u %s start %u (no compute instance)\n", mi->gi_id, mi->profile,
                       mi->start);
        }
    }
}

int main(int argc, char **argv)
{
    const char *arg[3];
    size_t n = 0;
    struct vg_err perr = {0};
    int prc = vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc, argv, arg, 3, &n, &perr);
    if (prc == 1) {
        usage(stdout);
        return 0;
    }
    if (prc < 0)
        fprintf(stderr, "fakegpu-ctl: %s\n", perr.msg);
    bool status = n == 1 && strcmp(arg[0], "status") == 0;
    bool health = n == 3 && strcmp(arg[0], "health") == 0;
    bool xid = n == 3 && strcmp(arg[0], "xid") == 0;
    if (prc < 0 || (!status && !health && !xid))
        return usage(stderr);
    bool on = false;
    uint64_t code = 0;
    if (xid && vg_parse_u64(arg[2], 1, 9999, &code, &perr) < 0) {
        fprintf(stderr, "fakegpu-ctl: XID '%s': %s\n", arg[2], perr.msg);
        return 2;
    }
    if (health) {
        if (strcmp(arg[2], "on") == 0)
            on = true;
        else if (strcmp(arg[2], "off") != 0) {
            fprintf(stderr, "fakegpu-ctl: health must be 'on' or 'off', not '%s'\n", arg[2]);
            return 2;
        }
    }
    struct fg_state *st = NULL;
    int rc = fg_state_get(&st);
    if (rc < 0) {
        fprintf(stderr, "fakegpu-ctl: cannot open the fakegpu state: %s\n", VG_STRERROR(rc));
        return 1;
    }
    if (status) {
        print_status(st);
        return 0;
    }
    int dev = find_device(st, arg[1]);
    if (dev < 0)
        return 2;
    rc = xid ? fg_xid_inject(st, dev, (unsigned)code) : fg_device_set_lost(st, dev, !on);
    if (rc < 0) {
        fprintf(stderr, "fakegpu-ctl: %s\n", VG_STRERROR(rc));
        return 1;
    }
    return 0;
}
