/* kubelet's device-plugin API v1beta1: the generated protobuf-c messages plus the
 * constants from k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 (constants.go) and the
 * full gRPC method paths, which is how src/grpc/ dispatches. Link vgpu_kubelet_api. */
#ifndef VGPU_GRPC_KUBELET_API_H
#define VGPU_GRPC_KUBELET_API_H

#include "grpc/kubelet/api.pb-c.h" /* generated at build time from api.proto */

#define VGRPC_KUBELET_API_VERSION        "v1beta1"
#define VGRPC_KUBELET_DEVICE_PLUGIN_PATH "/var/lib/kubelet/device-plugins/"
#define VGRPC_KUBELET_SOCKET             VGRPC_KUBELET_DEVICE_PLUGIN_PATH "kubelet.sock"
#define VGRPC_KUBELET_HEALTHY            "Healthy"
#define VGRPC_KUBELET_UNHEALTHY          "Unhealthy"
#define VGRPC_KUBELET_PRESTART_TIMEOUT_S 30

#define VGRPC_KUBELET_REGISTER        "/v1beta1.Registration/Register"
#define VGRPC_KUBELET_GET_OPTIONS     "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define VGRPC_KUBELET_LIST_AND_WATCH  "/v1beta1.DevicePlugin/ListAndWatch"
#define VGRPC_KUBELET_PREFERRED_ALLOC "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define VGRPC_KUBELET_ALLOCATE        "/v1beta1.DevicePlugin/Allocate"
#define VGRPC_KUBELET_PRESTART        "/v1beta1.DevicePlugin/PreStartContainer"

#endif
