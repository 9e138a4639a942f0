/* Fuzz target for the annotation decoders: garbled annotations are refused with a
 * message, and whatever is accepted encodes and decodes back to the same thing. The name
 * validators run on every input too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "annot/annot.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct annot_inventory inv, inv2;
    static struct annot_decision dec, dec2;
    static struct annot_mig_refused ref, ref2;
    struct vg_err err = {0};
    bool accepted = false;
    if (annot_inventory_decode((const char *)data, size, &inv, &err) == 0) {
        accepted = true;
        char *text = annot_inventory_encode(&inv, &err);
        if (text != NULL) {
            if (annot_inventory_decode(text, strlen(text), &inv2, &err) != 0 ||
                memcmp(&inv, &inv2, sizeof inv) != 0)
                abort();
            free(text);
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    err.msg[0] = '\0';
    if (annot_decision_decode((const char *)data, size, &dec, &err) == 0) {
        accepted = true;
        char *text = annot_decision_encode(&dec, &err);
        if (text != NULL) {
            if (annot_decision_decode(text, strlen(text), &dec2, &err) != 0 ||
                memcmp(&dec, &dec2, sizeof dec) != 0)
                abort();
            free(text);
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    err.msg[0] = '\0';
    if (annot_mig_refused_decode((const char *)data, size, &ref, &err) == 0) {
        accepted = true;
        char *text = annot_mig_refused_encode(&ref, &err);
        if (text == NULL || annot_mig_refused_decode(text, strlen(text), &ref2, &err) != 0 ||
            memcmp(&ref, &ref2, sizeof ref) != 0)
            abort();
        free(text);
        for (unsigned i = 0; i < ref.count; i++)
            if (!annot_mig_profile_name(ref.refused[i].profile))
                abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    /* An accepted inventory's held list names only valid pods, containers and GPUs of the
     * inventory, each once, with bounded seconds (the scheduler puts them on a page). */
    if (annot_inventory_decode((const char *)data, size, &inv, &err) == 0)
        for (unsigned i = 0; i < inv.held_count; i++) {
            const struct annot_held *h = &inv.held[i];
            if (i >= ANNOT_HELD_MAX || !annot_pod_uid(h->pod) || !annot_dns_label(h->container) ||
                h->gpu >= inv.gpu_count || h->seconds > ANNOT_HELD_SECONDS_MAX)
                abort();
            for (unsigned j = 0; j < i; j++)
                if (inv.held[j].gpu == h->gpu && strcmp(inv.held[j].pod, h->pod) == 0 &&
                    strcmp(inv.held[j].container, h->container) == 0)
                    abort();
        }
    /* An accepted inventory's MIG fields hold only what a GPU can: profiles and instances
     * inside its slices, instances that never overlap. */
    if (annot_inventory_decode((const char *)data, size, &inv, &err) == 0)
        for (unsigned i = 0; i < inv.gpu_count; i++) {
            const struct annot_mig *m = &inv.gpus[i].mig;
            unsigned used = 0;
            for (unsigned k = 0; k < m->profile_count; k++)
                if (m->profiles[k].size > m->slices ||
                    (m->profiles[k].placements >> (m->slices - m->profiles[k].size + 1u)) != 0 ||
                    !annot_mig_profile_name(m->profiles[k].name))
                    abort();
            for (unsigned k = 0; k < m->instance_count; k++) {
                unsigned mask = ((1u << m->instances[k].size) - 1u) << m->instances[k].start;
                if ((used & mask) || m->instances[k].start + m->instances[k].size > m->slices)
                    abort();
                used |= mask;
            }
        }
    /* The live-resize request and status (vgpu.io/resize is anyone's to write): the
     * same round trip, and an accepted request names a valid id and container and asks
     * for something within bounds. */
    static struct annot_resize rq, rq2;
    static struct annot_resize_status st, st2;
    err.msg[0] = '\0';
    if (annot_resize_decode((const char *)data, size, &rq, &err) == 0) {
        accepted = true;
        if (!annot_dns_label(rq.id) ||
            (rq.container[0] != '\0' && !annot_dns_label(rq.container)) ||
            rq.memory_mib > ANNOT_RESIZE_MAX_MIB || rq.cores > 100 ||
            (rq.memory_mib == 0 && rq.cores == 0))
            abort();
        char *text = annot_resize_encode(&rq, &err);
        if (text == NULL || annot_resize_decode(text, strlen(text), &rq2, &err) != 0 ||
            memcmp(&rq, &rq2, sizeof rq) != 0)
            abort();
        free(text);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    err.msg[0] = '\0';
    if (annot_resize_status_decode((const char *)data, size, &st, &err) == 0) {
        accepted = true;
        char *text = annot_resize_status_encode(&st, &err);
        if (text == NULL || annot_resize_status_decode(text, strlen(text), &st2, &err) != 0 ||
            memcmp(&st, &st2, sizeof st) != 0)
            abort();
        free(text);
    } else if (err.msg[0] == '\0') {
        abort();
    }
    /* The name validators (names.c) on the input as one string: whatever they accept
     * can safely name a file, an environment value or a log field. An accepted decision
     * names only such containers and nodes. */
    char *name = malloc(size + 1);
    if (name == NULL)
        abort();
    memcpy(name, data, size);
    name[size] = '\0';
    bool label = annot_dns_label(name), sub = annot_dns_subdomain(name);
    if ((label && (!sub || strlen(name) > ANNOT_LABEL_MAX || strchr(name, '.'))) ||
        (sub && (strlen(name) > ANNOT_SUBDOMAIN_MAX || strstr(name, "..") ||
                 strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-.") != strlen(name))) ||
        annot_pod_uid(name) != label)
        abort();
    /* A time it accepts prints back to the same text. */
    int64_t t = annot_kube_time(name);
    if (t != -1) {
        time_t tt = (time_t)t;
        struct tm tm;
        char back[32];
        if (t < 0 || gmtime_r(&tt, &tm) == NULL ||
            strftime(back, sizeof back, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 || strcmp(back, name))
            abort();
    }
    free(name);
    if (annot_decision_decode((const char *)data, size, &dec, &err) == 0) {
        if (!annot_dns_subdomain(dec.node))
            abort();
        for (unsigned i = 0; i < dec.container_count; i++)
            if (!annot_dns_label(dec.containers[i].name))
                abort();
    }
    vg_fuzz_report(accepted); /* as a node inventory, a pod decision or a refusal list */
    return 0;
}
