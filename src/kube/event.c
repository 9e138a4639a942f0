/* Warning Events on pods (kube.h): the one shape vgpu's daemons post. */
#include "kube/kube.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "base/auto_json.h"
#include "base/str.h"

json_t *kube_warning_event(const struct kube_warning *w, time_t now, unsigned long long seq)
{
    char ts[32], name[320], field[320];
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    /* The pod's name, cut to leave room, then the component and a per-process sequence:
     * unique while the process lives, and a valid DNS subdomain like the pod's. */
    if (vg_snprintf(name, sizeof name, "%.200s.%s.%llx.%llx", w->pod, w->component,
                    (unsigned long long)now, seq) < 0)
        return NULL;
    json_t *involved = json_pack("{s:s, s:s, s:s, s:s, s:s}", "apiVersion", "v1", "kind", "Pod",
                                 "name", w->pod, "namespace", w->ns, "uid", w->uid);
    if (involved && w->container && w->container[0] &&
        vg_snprintf(field, sizeof field, "spec.containers{%s}", w->container) >= 0)
        json_object_set_new(involved, "fieldPath", json_string(field));
    const char *node = w->node ? w->node : "";
    return json_pack(
        "{s:s, s:s, s:{s:s, s:s}, s:o, s:s, s:s, s:s, s:{s:s, s:s}, s:s, s:s, s:i, s:s, s:s}",
        "apiVersion", "v1", "kind", "Event", "metadata", "name", name, "namespace", w->ns,
        "involvedObject", involved, "reason", w->reason, "message", w->message, "type", "Warning",
        "source", "component", w->component, "host", node, "firstTimestamp", ts, "lastTimestamp",
        ts, "count", 1, "reportingComponent", w->component, "reportingInstance", node);
}

int kube_post_warning(struct kube_client *client, const struct kube_warning *w,
                      unsigned long long seq, kube_response_fn done, void *arg, struct vg_err *err)
{
    char path[320];
    VG_AUTO_JSON json_t *ev = kube_warning_event(w, time(NULL), seq);
    if (!ev)
        return vg_err_set(err, -EINVAL, "Event on %s/%s: cannot form it", w->ns, w->pod);
    if (vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/events", w->ns) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "Event on %s/%s: namespace too long", w->ns, w->pod);
    return kube_post(client, path, ev, done, arg, err);
}
