/* Helpers shared by the placement core's files; not part of the public API. */
#ifndef VGPU_PLACEMENT_INTERNAL_H
#define VGPU_PLACEMENT_INTERNAL_H

#include "placement/placement.h"

/* Memory the request charges on this card (MiB), from gpu_mem_mib or gpu_mem_pct. */
uint64_t place_gpu_mem_need(const struct place_gpu *g, const struct place_request *r);

/* Whether one card can take one share of the request (type, UUID, health, slots,
 * exclusivity, compute, memory). */
bool place_gpu_usable(const struct place_gpu *g, const struct place_request *r);

/* Whether the node's own resources (CPU, memory, labels) admit the request. */
bool place_node_resources_fit(const struct place_node *n, const struct place_request *r);

#endif
