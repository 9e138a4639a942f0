/* kubelet's plugin-registration, DRA (v1, also used for v1beta1) and DRA health
 * (v1alpha1) messages, generated at build time by protoc-c from src/dra/proto/. Link
 * vgpu_dra_api. */
#ifndef VGPU_DRA_PROTO_H
#define VGPU_DRA_PROTO_H

#include "dra/proto/dra.pb-c.h"
#include "dra/proto/dra_health.pb-c.h"
#include "dra/proto/pluginregistration.pb-c.h"

#endif
