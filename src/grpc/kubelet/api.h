/* kubelet's device-plugin API v1beta1: the generated protobuf-c messages plus the
 * constants from k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 (constants.go) and the
 * full gRPC method paths, which is how src/grpc/ dispatches. Link vgpu_kubelet_api. */
#ifndef VGPU_GRPC_KUBELET_API_H
#define VGPU_GRPC_KUBELET_API_H

#include "grpc/kubelet/api.pb-c.h" /* generated at build time from api.proto */

#define GRPC_KUBELET_API_VERSION        "v1beta1"
#define GRPC_KUBELET_DEVICE_PLUGIN_PATH "/var/lib/kubelet/device-plugins/"
#define GRPC_KUBELET_SOCKET             GRPC_KUBELET_DEVICE_PLUGIN_PATH "kubelet.sock"
#define GRPC_KUBELET_HEALTHY            "Healthy"
#define GRPC_KUBELET_UNHEALTHY          "Unhealthy"
#define GRPC_KUBELET_PRESTART_TIMEOUT_S 30

#define GRPC_KUBELET_REGISTER        "/v1beta1.Registration/Register"
#define GRPC_KUBELET_GET_OPTIONS     "/v1beta1.DevicePlugin/GetDevicePluginOptions"
#define GRPC_KUBELET_LIST_AND_WATCH  "/v1beta1.DevicePlugin/ListAndWatch"
#define GRPC_KUBELET_PREFERRED_ALLOC "/v1beta1.DevicePlugin/GetPreferredAllocation"
#define GRPC_KUBELET_ALLOCATE        "/v1beta1.DevicePlugin/Allocate"
#define GRPC_KUBELET_PRESTART        "/v1beta1.DevicePlugin/PreStartContainer"

#endif
