/* The cluster as the verbs see it (verbs.h): the API's node and pod lists, read through
 * vgpu-scheduler's own model (src/scheduler: the same inventory and decision readers, the
 * same charging, for `explain` the same filter), so what is shown is what vgpu-scheduler
 * would see. Shared by the verb files; not for the program around them.
 *
 * A list answer is checked where the verbs rely on it: an "items" array of objects. Any
 * other shape is refused with the path and what is wrong, before anything is printed. */
#ifndef VGPU_CLI_CLUSTER_H
#define VGPU_CLI_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "annot/annot.h"
#include "base/err.h"
#include "cli/cli.h"
#include "cli/verbs.h"
#include "scheduler/pod.h"
#include "scheduler/sched.h"

struct cli_cluster {
    json_t *nodes, *pods; /* the lists' items */
    struct sched_options options;
    struct sched_state *state;
    json_t *dump; /* sched_dump: {"nodes": {name: [gpu...]}} */
};

/* GETs path, a list: *items (owned) is its "items" array, each an object. */
int cli_list(const struct cli_source *src, const char *path, json_t **items, struct vg_err *err);

/* Reads /api/v1/nodes and /api/v1/pods into c (zeroed first; free it either way). */
int cli_cluster_load(const struct cli_source *src, struct cli_cluster *c, struct vg_err *err);
void cli_cluster_free(struct cli_cluster *c);

/* metadata.<key>, metadata.annotations.<key>: a string, or NULL. */
const char *cli_meta(json_t *obj, const char *key);
const char *cli_annotation(json_t *obj, const char *key);
/* Succeeded or Failed. */
bool cli_pod_finished(json_t *pod);
/* The pod's decision, when it is bound to the node the decision names. */
bool cli_pod_decision(json_t *pod, struct annot_decision *d);
/* A bound pod's decision from Volcano's volcano.sh/vgpu-ids-new (docs/volcano.md): one
 * segment per container that asks for Volcano's vGPUs, in the order of spec.containers,
 * each named after its container. False when the pod is not bound or the annotation does
 * not read as Volcano writes it (a device without its ':', more segments than GPU
 * containers, a number out of range). */
bool cli_volcano_decision(json_t *pod, struct annot_decision *d);
/* Whether a container of the pod asks for Volcano's vGPUs (volcano.sh/vgpu-number or
 * volcano.sh/vgpu-memory in its limits). */
bool cli_volcano_pod(json_t *pod);

/* A node's name and its decoded vgpu.io/gpus inventory: 1; 0 for a node without a name or
 * an inventory (not a vgpu node); the decoder's negative errno and message for an
 * inventory that does not decode. */
int cli_node_inventory(json_t *node, const char **name, struct annot_inventory *inv,
                       struct vg_err *err);

/* The scheduler's view of one GPU (memTotalMiB, memUsedMiB, coresUsed, tenants, slots),
 * or NULL. */
json_t *cli_dump_gpu(const struct cli_cluster *c, const char *node, const char *uuid);
/* A non-negative integer member, 0 otherwise. */
uint64_t cli_json_u64(json_t *obj, const char *key);
/* The index of GPU uuid on node, from its inventory; -1 when unknown. */
int cli_gpu_index(const struct cli_cluster *c, const char *node, const char *uuid);

/* The JSON of a decision and of a pod's requests, as -o json prints them. */
json_t *cli_decision_json(const struct annot_decision *d);
json_t *cli_request_json(const struct sched_container_request *r, int n);
/* "4Gi", "50%" or "all" for one container's memory request on each GPU. */
void cli_request_memory(const struct place_request *r, char *buf, size_t size);

/* t as cli_table_print prints it, or doc as -o json prints it (two-space indent, sorted
 * keys, a final newline), written to out whole; an error names what failed. */
int cli_write_table(const struct cli_table *t, FILE *out, struct vg_err *err);
int cli_write_json(json_t *doc, FILE *out, struct vg_err *err);

/* A verb's free-form output, built in memory and written out whole. */
struct cli_page {
    FILE *f;
    char *text;
    size_t len;
};
int cli_page_open(struct cli_page *p, struct vg_err *err);
/* Ends the page: text and len hold it whole. */
int cli_page_close(struct cli_page *p, struct vg_err *err);
/* Closes the page and writes it to out; an error names what failed. */
int cli_page_write(struct cli_page *p, FILE *out, struct vg_err *err);
void cli_page_free(struct cli_page *p);

#endif
