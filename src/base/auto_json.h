/* VG_AUTO_JSON: a jansson reference released (json_decref) at scope exit; see base/auto.h.
 * Header-only, so base itself does not link jansson. */
#ifndef VGPU_BASE_AUTO_JSON_H
#define VGPU_BASE_AUTO_JSON_H

#include <jansson.h>

#include "base/auto.h"

static inline void vg_json_decrefp(json_t **j)
{
    json_decref(*j);
    *j = NULL;
}

#define VG_AUTO_JSON __attribute__((cleanup(vg_json_decrefp)))

#endif
