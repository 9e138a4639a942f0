#!/usr/bin/env python3
"""A small in-memory Kubernetes API server for testing vgpu's API client (src/kube/).

Python 3 standard library only. It serves the part of the core/v1 API that vgpu's
daemons use, with the wire formats of the real kube-apiserver:

  GET    /api/v1/nodes, /api/v1/pods, /api/v1/namespaces/NS/pods    list (limit/continue)
         (events: /api/v1/events, /api/v1/namespaces/NS/events, the same way)
         ... ?watch=1&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=S
             chunked stream, one JSON event per line: {"type": ADDED|MODIFIED|DELETED|
             BOOKMARK|ERROR, "object": {...}}; a compacted RV gets an ERROR event with
             a 410 "Expired" Status (or HTTP 410 with --watch-410-http)
  (resourcequotas like configmaps, stored as written: status.used is the fixture's or the
         test's, never computed)
  (configmaps like pods: /api/v1/namespaces/NS/configmaps[/N]; GET/POST/PATCH/DELETE. A
         ConfigMap with "immutable": true refuses changes to data, binaryData and immutable
         (422), as kube-apiserver does)
  GET    /api/v1/namespaces, /api/v1/namespaces/NS  (Namespace objects from the fixture;
         POST /api/v1/namespaces creates one. NamespaceLifecycle: once the store holds any
         Namespace, creating a namespaced object in a namespace it lacks is 404
         'namespaces "NS" not found', and in one with status.phase Terminating 403)
  GET    /api/v1/nodes/N, /api/v1/namespaces/NS/pods/P
  POST   /api/v1/nodes, /api/v1/namespaces/NS/pods, .../NS/events     create (409 if exists)
  PATCH  the object paths: application/merge-patch+json and
         application/strategic-merge-patch+json (applied as a JSON merge patch; enough for
         metadata.annotations/labels); metadata.resourceVersion in the patch is a
         precondition: 409 Conflict when the object has changed
  DELETE the object paths
  GET    /api/v1/namespaces/NS/pods/P/status
  PATCH  /api/v1/namespaces/NS/pods/P/status: the status only; a strategic merge patch
         merges status.conditions by type (kept: the pod's other conditions), a JSON merge
         patch replaces them
  POST   /api/v1/namespaces/NS/pods/P/binding                       sets spec.nodeName and
         merges the Binding's metadata.annotations in one write; its metadata.uid and
         metadata.resourceVersion, when set, are preconditions (409); 409 if the pod is
         already bound or being deleted

Dynamic Resource Allocation, resource.k8s.io/v1 (cluster-scoped resourceslices and
deviceclasses, namespaced resourceclaims and resourceclaimtemplates):
  GET    /apis/resource.k8s.io/v1/resourceslices, .../deviceclasses,
         /apis/resource.k8s.io/v1[/namespaces/NS]/resourceclaims[templates]   list, watch
         (the same query parameters as above; field selectors on any field path, e.g.
         spec.nodeName=N, spec.driver=D)
  GET    .../resourceslices/N, .../deviceclasses/N, .../namespaces/NS/resourceclaims/N,
         .../namespaces/NS/resourceclaims/N/status
  POST   the collections: create; metadata.generateName gives a name with 5 random
         characters appended; apiVersion/kind, uid and metadata.generation (1) are set
  PUT    the object paths: update. A non-empty metadata.resourceVersion is a precondition
         (409 Conflict "the object has been modified", as kube-apiserver); an empty one
         overwrites unconditionally. The name must match the URL (400). metadata.generation
         is bumped when spec changes. Immutable: ResourceSlice spec.driver, spec.pool.name,
         spec.nodeName; ResourceClaim spec (422). PUT on a claim keeps its status; PUT on
         .../resourceclaims/N/status replaces only the status.
  PATCH  as for core objects (merge patch, metadata.resourceVersion precondition)
  DELETE the object paths; a DeleteOptions body's preconditions.resourceVersion and
         preconditions.uid are checked (409)
  ResourceSlices are validated on every write as kube-apiserver 1.35 does, for the limits
  a driver can run into (422 Invalid, field path in the message): spec.driver (DNS
  subdomain, <= 63), spec.pool.{name, generation, resourceSliceCount > 0}, exactly one of
  nodeName/nodeSelector/allNodes/perDeviceNodeSelection, <= 128 devices (64 when one has
  taints or consumesCounters), device names DNS labels unique in the slice, attribute and
  capacity names (C identifier <= 32, optional DNS-subdomain prefix), each attribute
  exactly one of int/bool/string/version (strings and versions <= 64, versions semver),
  capacity values quantities, attributes + capacities <= 32 per device; as 1.36 adds:
  device taints (<= 16, key a label name, value a label value, effect None, NoSchedule
  or NoExecute, timeAdded RFC 3339 and set by the server when empty), sharedCounters
  (<= 8 sets of <= 32 counters, DNS-label names, never with devices in one slice),
  consumesCounters (<= 2 per device, <= 32 counters each). ResourceClaims: request
  tolerations (<= 16, operator Exists or Equal, Exists without a value).
  RBAC (--authz) sees these with apiGroups ["resource.k8s.io"], verbs get, list, watch,
  create, update (PUT), patch, delete, and resources resourceslices, deviceclasses,
  resourceclaims, resourceclaims/status, resourceclaimtemplates.

Failure injection, through CLI flags or the admin endpoints:
  POST /admin/faults {"fail_next": N, "fail_status": 500, "delay_ms": D, "delay_next": N,
                      "drop_after_events": N, "watch_410_http": bool, "watch_paused": bool}
       fail_next: the next N API requests answer fail_status with a Status body;
       delay_ms: the next delay_next API requests (all if 0) wait D ms before answering
       (each counted in /admin/stats "delayed" when it starts to wait);
       drop_after_events: every watch is cut (no final chunk) after sending N events;
       watch_paused: open watches hold new events back (a slow watch) until it is false;
       fail_after: the failing requests are carried out first and only their answer is
       replaced (a write that happened although the client saw an error);
       "match": "TEXT" limits fail_next and delay_ms to requests whose "METHOD path?query"
       contains TEXT (e.g. "POST /api/v1/namespaces/default/pods/p/binding"); "" = all.
  POST /admin/inject {"action": "drop"|"expire"|"malformed"|"oversized"|"error",
                      "bytes": N}     once, on every watch open now
  POST /admin/compact                 forget every event so far: old RVs get 410
  POST /admin/reset                   clear all faults
  POST /admin/allocate {"namespace": NS, "name": CLAIM, "node": N, "driver": D,
                        "devices": {"REQUEST": ["DEVICE", ...]}}
       the tests' allocator (function allocate: first fit, taints and tolerations as
       KEP-5055 says, shared counters never exceeded as KEP-4815 says) writes the claim's
       status.allocation; 409 when a request cannot be met
  GET  /version  {"major", "minor", "gitVersion"} from --k8s-version (default 1.36), which
       the DRA driver reads to choose device taints
  GET  /admin/stats                   request counters, open watches, current RV

Authentication and RBAC (opt-in, --authz FILE; off by default, every request allowed):
  {"tokens": {"TOKEN": "USER", ...},
   "rules": {"USER": [{"verbs": [...], "apiGroups": [""], "resources": ["pods",
             "pods/binding", ...], "resourceNames": [...], "namespace": null|"NS"}, ...]}}
  A request without a known "Authorization: Bearer TOKEN" is 401; one no rule of its user
  allows is 403 with kube-apiserver's Status ("pods is forbidden: User \"U\" cannot list
  resource \"pods\" in API group \"\" at the cluster scope"). Verbs as RBAC names them:
  get, list, watch (a GET with watch=1), create (POST; pods/binding for a binding),
  patch, delete; "*" matches any verb, resource or group. A rule's namespace null is a
  ClusterRoleBinding's (everywhere), "NS" a RoleBinding's (that namespace only); a rule
  with resourceNames allows only requests naming one of them. GET /admin/stats lists
  the refusals under "forbidden" ("USER VERB RESOURCE NAMESPACE/NAME"). The /admin
  endpoints and /healthz need no token.

Objects come from --fixture FILE ({"nodes": [...], "pods": [...], and any of
"resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"}) and/or are generated
with --nodes N --gpus-per-node G --pods P (issue 6's benchmark: 5000 nodes, 8 GPUs).
--port 0 picks a free port; --port-file writes it once the server listens. --tls-cert,
--tls-key and --tls-client-ca serve https and can require client certificates.
"""
import argparse
import collections
import copy
import json
import random
import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KINDS = {"nodes": "Node", "pods": "Pod", "events": "Event", "configmaps": "ConfigMap",
         "namespaces": "Namespace", "resourcequotas": "ResourceQuota"}
DRA_GROUP, DRA_VERSION = "resource.k8s.io", "v1"
DRA_KINDS = {"resourceslices": "ResourceSlice", "deviceclasses": "DeviceClass",
             "resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate"}
# Workloads that own pods (apps/v1, batch/v1): create, get, list, delete, enough for a
# pod's ownerReferences to point at something (the DRA webhook reads them back).
WORKLOAD_KINDS = {"replicasets": ("apps/v1", "ReplicaSet"),
                  "statefulsets": ("apps/v1", "StatefulSet"),
                  "daemonsets": ("apps/v1", "DaemonSet"),
                  "deployments": ("apps/v1", "Deployment"),
                  "jobs": ("batch/v1", "Job"), "cronjobs": ("batch/v1", "CronJob")}
ALL_KINDS = dict(KINDS, **DRA_KINDS, **{k: v[1] for k, v in WORKLOAD_KINDS.items()})
NAMESPACED = {"pods", "events", "configmaps", "resourcequotas", "resourceclaims",
              "resourceclaimtemplates"} | set(WORKLOAD_KINDS)


def api_version(kind):
    return "%s/%s" % (DRA_GROUP, DRA_VERSION) if kind in DRA_KINDS else "v1"


def qualified(kind):
    """The resource as kube-apiserver's messages name it: pods, resourceslices.resource.k8s.io."""
    return "%s.%s" % (kind, DRA_GROUP) if kind in DRA_KINDS else kind


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[mkMGTPE]|)$")


def dns_subdomain(text, limit=253):
    return isinstance(text, str) and 0 < len(text) <= limit and \
        all(DNS_LABEL.match(p) for p in text.split("."))


def qualified_name_error(name):
    """Why a device attribute or capacity name is invalid, or None (QualifiedName)."""
    if not isinstance(name, str) or not name:
        return "Required value"
    domain, _, ident = name.rpartition("/")
    if "/" in name and not dns_subdomain(domain, 63):
        return "Invalid value: %r: the domain must be a DNS subdomain of at most 63 " \
            "characters" % name
    if len(ident) > 32 or not C_IDENTIFIER.match(ident):
        return "Invalid value: %r: a C identifier of at most 32 characters is required" % name
    return None


def too_many(items, path, limit):
    """A list or map past limit items: the API server's error for it (none within)."""
    if len(items) <= limit:
        return []
    return ["%s: Too many: %d: must have at most %d items" % (path, len(items), limit)]


def validate_resource_slice(obj):
    """The ResourceSlice rules of kube-apiserver 1.35 (resource/v1) a driver can run into:
    a list of "field: problem" strings, empty when valid."""
    errs = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return ["spec: Required value"]
    driver = spec.get("driver")
    if not dns_subdomain(driver, 63):
        errs.append("spec.driver: Invalid value: %r: a lowercase DNS subdomain of at most "
                    "63 characters is required" % (driver,))
    pool = spec.get("pool")
    if not isinstance(pool, dict):
        errs.append("spec.pool: Required value")
    else:
        name = pool.get("name")
        if not isinstance(name, str) or not name or len(name) > 253 or \
                not all(dns_subdomain(p) for p in name.split("/")):
            errs.append("spec.pool.name: Invalid value: %r" % (name,))
        gen = pool.get("generation")
        if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
            errs.append("spec.pool.generation: Invalid value: %r: must be a non-negative "
                        "integer" % (gen,))
        count = pool.get("resourceSliceCount")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            errs.append("spec.pool.resourceSliceCount: Invalid value: %r: must be greater "
                        "than zero" % (count,))
    chosen = [f for f in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
              if spec.get(f) not in (None, False, "")]
    if len(chosen) != 1:
        errs.append("spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, "
                    "`allNodes`, `perDeviceNodeSelection` is required")
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        return errs + ["spec.devices: Invalid value: must be a list"]
    limit = 128
    if any(isinstance(d, dict) and (d.get("taints") or d.get("consumesCounters"))
           for d in devices):
        limit = 64
    errs += too_many(devices, "spec.devices", limit)
    errs += validate_counters(spec, devices)
    seen = set()
    for i, dev in enumerate(devices):
        path = "spec.devices[%d]" % i
        if not isinstance(dev, dict):
            errs.append(path + ": Invalid value: must be an object")
            continue
        errs += validate_taints(dev.get("taints"), path + ".taints")
        errs += validate_consumes(dev.get("consumesCounters"), path + ".consumesCounters")
        name = dev.get("name")
        if not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            errs.append(path + ".name: Invalid value: %r: a lowercase RFC 1123 label is "
                        "required" % (name,))
        elif name in seen:
            errs.append(path + ".name: Duplicate value: %r" % name)
        seen.add(name)
        attrs = dev.get("attributes") or {}
        caps = dev.get("capacity") or {}
        if not isinstance(attrs, dict) or not isinstance(caps, dict):
            errs.append(path + ": Invalid value: attributes and capacity must be maps")
            continue
        if len(attrs) + len(caps) > 32:
            errs.append(path + ": Too many: %d: must have at most 32 attributes and "
                        "capacities combined" % (len(attrs) + len(caps)))
        for key, value in attrs.items():
            apath = "%s.attributes[%s]" % (path, key)
            why = qualified_name_error(key)
            if why:
                errs.append(apath + ": " + why)
            typed = [t for t in ("int", "bool", "string", "version")
                     if isinstance(value, dict) and value.get(t) is not None]
            if len(typed) != 1 or len(value) != 1:
                errs.append(apath + ": Invalid value: exactly one value must be specified")
                continue
            t, v = typed[0], value[typed[0]]
            ok = {"int": isinstance(v, int) and not isinstance(v, bool),
                  "bool": isinstance(v, bool),
                  "string": isinstance(v, str) and len(v) <= 64,
                  "version": isinstance(v, str) and len(v) <= 64 and bool(SEMVER.match(v))}[t]
            if not ok:
                errs.append("%s.%s: Invalid value: %r" % (apath, t, v))
        for key, value in caps.items():
            cpath = "%s.capacity[%s]" % (path, key)
            why = qualified_name_error(key)
            if why:
                errs.append(cpath + ": " + why)
            if not isinstance(value, dict) or not isinstance(value.get("value"), str) or \
                    not QUANTITY.match(value["value"]):
                errs.append(cpath + ".value: Invalid value: a quantity is required")
                continue
            policy = value.get("requestPolicy")
            if policy is not None:
                if dev.get("allowMultipleAllocations") is not True:
                    errs.append(cpath + ".requestPolicy: Forbidden: only for devices with "
                                "allowMultipleAllocations")
                rng = policy.get("validRange") if isinstance(policy, dict) else None
                if rng is not None and policy.get("validValues") is not None:
                    errs.append(cpath + ".requestPolicy: Invalid value: validValues and "
                                "validRange are exclusive")
                for field, text in list((rng or {}).items()) + \
                        [("default", (policy or {}).get("default"))]:
                    if text is not None and (not isinstance(text, str) or
                                             not QUANTITY.match(text)):
                        errs.append("%s.requestPolicy.%s: Invalid value: %r"
                                    % (cpath, field, text))
                if rng is not None and rng.get("min") is None:
                    errs.append(cpath + ".requestPolicy.validRange.min: Required value")
    return errs


# ---- 1.36: device taints (KEP-5055) and partitionable devices (KEP-4815) ----------------

LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
MAX_TAINTS, MAX_TOLERATIONS = 16, 16
MAX_COUNTER_SETS, MAX_COUNTERS, MAX_CONSUMPTIONS = 8, 32, 2


def label_key_error(key):
    """Why key is not a label name (an optional DNS-subdomain prefix, a name <= 63)."""
    if not isinstance(key, str) or not key:
        return "Required value"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not dns_subdomain(prefix, 253):
        return "Invalid value: %r: prefix part must be a DNS subdomain" % key
    if len(name) > 63 or not LABEL_NAME.match(name):
        return "Invalid value: %r: name part must consist of alphanumeric characters, '-', " \
            "'_' or '.', and must start and end with an alphanumeric character" % key
    return None


def label_value_ok(value):
    return isinstance(value, str) and (value == "" or (len(value) <= 63 and
                                                       bool(LABEL_NAME.match(value))))


def validate_taints(taints, path):
    """DeviceTaint: key a label name, value a label value, effect None|NoSchedule|NoExecute,
    timeAdded RFC 3339 when set; at most 16 per device."""
    if taints is None:
        return []
    if not isinstance(taints, list):
        return [path + ": Invalid value: must be a list"]
    errs = []
    errs += too_many(taints, path, MAX_TAINTS)
    for i, t in enumerate(taints):
        tpath = "%s[%d]" % (path, i)
        if not isinstance(t, dict):
            errs.append(tpath + ": Invalid value: must be an object")
            continue
        why = label_key_error(t.get("key"))
        if why:
            errs.append(tpath + ".key: " + why)
        if not label_value_ok(t.get("value", "")):
            errs.append("%s.value: Invalid value: %r: a valid label value is required"
                        % (tpath, t.get("value")))
        if t.get("effect") not in TAINT_EFFECTS:
            errs.append("%s.effect: %s" % (tpath, "Required value" if not t.get("effect") else
                                           "Unsupported value: %r: supported values: "
                                           "\"NoExecute\", \"NoSchedule\", \"None\""
                                           % t.get("effect")))
        if t.get("timeAdded") is not None and (not isinstance(t["timeAdded"], str) or
                                               not RFC3339.match(t["timeAdded"])):
            errs.append("%s.timeAdded: Invalid value: %r" % (tpath, t.get("timeAdded")))
    return errs


def validate_counter_map(counters, path):
    errs = []
    if not isinstance(counters, dict) or not counters:
        return [path + ": Required value"]
    errs += too_many(counters, path, MAX_COUNTERS)
    for name, c in counters.items():
        if not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            errs.append("%s[%s]: Invalid value: a lowercase RFC 1123 label is required"
                        % (path, name))
        if not isinstance(c, dict) or not isinstance(c.get("value"), str) or \
                not QUANTITY.match(c["value"]):
            errs.append("%s[%s].value: Invalid value: a quantity is required" % (path, name))
    return errs


def validate_counters(spec, devices):
    """sharedCounters: <= 8 sets of <= 32 counters, names DNS labels unique in the slice;
    a slice has devices or sharedCounters, never both."""
    sets = spec.get("sharedCounters")
    if sets is None:
        return []
    if not isinstance(sets, list):
        return ["spec.sharedCounters: Invalid value: must be a list"]
    errs = []
    if devices:
        errs.append("spec: Invalid value: only one of `devices` and `sharedCounters` may be set")
    errs += too_many(sets, "spec.sharedCounters", MAX_COUNTER_SETS)
    seen = set()
    for i, cs in enumerate(sets):
        path = "spec.sharedCounters[%d]" % i
        name = cs.get("name") if isinstance(cs, dict) else None
        if not isinstance(name, str) or len(name) > 63 or not DNS_LABEL.match(name):
            errs.append(path + ".name: Invalid value: %r: a lowercase RFC 1123 label is "
                        "required" % (name,))
        elif name in seen:
            errs.append(path + ".name: Duplicate value: %r" % name)
        seen.add(name)
        errs += validate_counter_map(cs.get("counters") if isinstance(cs, dict) else None,
                                     path + ".counters")
    return errs


def validate_consumes(consumes, path):
    """consumesCounters: <= 2 per device, each a counterSet name and <= 32 counters."""
    if consumes is None:
        return []
    if not isinstance(consumes, list):
        return [path + ": Invalid value: must be a list"]
    errs = []
    errs += too_many(consumes, path, MAX_CONSUMPTIONS)
    for i, c in enumerate(consumes):
        cpath = "%s[%d]" % (path, i)
        name = c.get("counterSet") if isinstance(c, dict) else None
        if not isinstance(name, str) or not DNS_LABEL.match(name):
            errs.append(cpath + ".counterSet: Invalid value: %r" % (name,))
        errs += validate_counter_map(c.get("counters") if isinstance(c, dict) else None,
                                     cpath + ".counters")
    return errs


def validate_resource_claim(obj):
    """The request fields the tests' allocator reads: exactly.tolerations (<= 16, operator
    Exists|Equal, Exists with no value, effect None|NoSchedule|NoExecute or empty)."""
    errs = []
    reqs = (((obj.get("spec") or {}).get("devices") or {}).get("requests")) or []
    for i, req in enumerate(reqs if isinstance(reqs, list) else []):
        exactly = req.get("exactly") if isinstance(req, dict) else None
        tols = (exactly or {}).get("tolerations")
        if tols is None:
            continue
        path = "spec.devices.requests[%d].exactly.tolerations" % i
        if not isinstance(tols, list):
            errs.append(path + ": Invalid value: must be a list")
            continue
        errs += too_many(tols, path, MAX_TOLERATIONS)
        for k, t in enumerate(tols):
            tpath = "%s[%d]" % (path, k)
            if not isinstance(t, dict):
                errs.append(tpath + ": Invalid value: must be an object")
                continue
            op = t.get("operator", "Equal")
            if op not in ("Exists", "Equal"):
                errs.append("%s.operator: Unsupported value: %r" % (tpath, op))
            if t.get("key"):
                why = label_key_error(t["key"])
                if why:
                    errs.append(tpath + ".key: " + why)
            elif op != "Exists":
                errs.append(tpath + ".operator: Invalid value: an empty key needs Exists")
            if op == "Exists" and t.get("value"):
                errs.append(tpath + ".value: Invalid value: must be empty when operator is "
                            "Exists")
            if not label_value_ok(t.get("value", "")):
                errs.append(tpath + ".value: Invalid value: %r" % (t.get("value"),))
            if t.get("effect") not in (None, "") + TAINT_EFFECTS:
                errs.append("%s.effect: Unsupported value: %r" % (tpath, t.get("effect")))
    return errs


UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(text):
    """A whole quantity ("79Gi", "132", "1") as an int; fractions are not needed here."""
    m = re.match(r"^(\d+)([KMGTPE]i|[kMGTPE]|)$", text or "")
    if not m:
        raise ApiError(422, "Invalid", "quantity %r is not a whole number with a suffix" % text)
    return int(m.group(1)) * UNITS[m.group(2)]


def tolerates(tolerations, taint):
    """A toleration matches a taint as KEP-5055 says: same key (or an empty key with
    Exists), Exists or Equal value, and an empty effect or the same effect."""
    for t in tolerations or []:
        if t.get("key") and t["key"] != taint.get("key"):
            continue
        if t.get("operator", "Equal") == "Equal" and t.get("value", "") != taint.get("value", ""):
            continue
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        return True
    return False


def allocate(store, claim, node=None, devices_wanted=None, driver=None):
    """The tests' allocator, kube-scheduler's rule for what these tests need: per request
    (exactly: count, default 1) devices of the node's pools in slice-name then listed
    order, first fit; a device is skipped when another claim holds it (unless it allows
    multiple allocations), when it has a NoSchedule or NoExecute taint the request does
    not tolerate (None is informational), or when its consumesCounters do not fit what
    the pool's sharedCounters have left after every allocated device (counters are never
    exceeded). devices_wanted {request: [names]} restricts a request to those devices.
    Returns the status.allocation; ApiError 409 when a request cannot be satisfied."""
    slices = sorted(store.objects["resourceslices"].values(),
                    key=lambda s: s["metadata"]["name"])
    if node:
        slices = [s for s in slices if s["spec"].get("nodeName") == node]
    if driver:
        slices = [s for s in slices if s["spec"].get("driver") == driver]
    remaining, candidates = {}, []
    for s in slices:
        spec = s["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        for cs in spec.get("sharedCounters") or []:
            remaining[key + (cs["name"],)] = {n: quantity(c["value"])
                                              for n, c in cs["counters"].items()}
        for d in spec.get("devices") or []:
            candidates.append((key, d))
    used = set()
    for other in store.objects["resourceclaims"].values():
        if other is claim:
            continue
        for r in (((other.get("status") or {}).get("allocation") or {}).get("devices") or {}) \
                .get("results") or []:
            used.add((r["driver"], r["pool"], r["device"]))

    def consume(key, dev, apply):
        for c in dev.get("consumesCounters") or []:
            left = remaining.get(key + (c["counterSet"],))
            if left is None:
                raise ApiError(409, "Conflict", "device %s consumes unknown counter set %s"
                               % (dev["name"], c["counterSet"]))
            for n, v in c["counters"].items():
                if n not in left or left[n] < quantity(v["value"]):
                    return False
        if apply:
            for c in dev.get("consumesCounters") or []:
                left = remaining[key + (c["counterSet"],)]
                for n, v in c["counters"].items():
                    left[n] -= quantity(v["value"])
        return True

    for key, dev in candidates:  # what allocated devices already consume
        if key + (dev["name"],) in used:
            consume(key, dev, True)
    results = []
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        exactly = req.get("exactly") or {}
        count = int(exactly.get("count", 1))
        want = (devices_wanted or {}).get(req["name"])
        got = 0
        for key, dev in candidates:
            if got == count:
                break
            full = key + (dev["name"],)
            if want is not None and dev["name"] not in want:
                continue
            if full in used and not dev.get("allowMultipleAllocations"):
                continue
            if any(t.get("effect") in ("NoSchedule", "NoExecute") and
                   not tolerates(exactly.get("tolerations"), t) for t in dev.get("taints") or []):
                continue
            if not consume(key, dev, True):
                continue
            used.add(full)
            results.append({"request": req["name"], "driver": key[0], "pool": key[1],
                            "device": dev["name"]})
            got += 1
        if got < count:
            raise ApiError(409, "Conflict", "cannot allocate all claims: request %s wants %d "
                           "devices, %d fit" % (req["name"], count, got))
    return {"devices": {"results": results}}


def status_body(code, reason, message, status="Failure"):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status,
            "message": message, "reason": reason, "code": code}


class ApiError(Exception):
    def __init__(self, code, reason, message):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def field_value(obj, path):
    for part in path.split("."):
        if not isinstance(obj, dict):
            return ""
        obj = obj.get(part)
    return "" if obj is None else str(obj)


def parse_selector(text):
    """Equality selectors only: 'a=b,c!=d' -> [(key, op, value)]."""
    out = []
    for term in filter(None, (text or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key.strip(), "!=", value.strip()))
        elif "==" in term:
            key, value = term.split("==", 1)
            out.append((key.strip(), "=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            out.append((key.strip(), "=", value.strip()))
        else:
            raise ApiError(400, "BadRequest", "unsupported selector term %r" % term)
    return out


class Filter:
    def __init__(self, kind, namespace, query):
        self.kind, self.namespace = kind, namespace
        self.fields = parse_selector(query.get("fieldSelector", [""])[0])
        self.labels = parse_selector(query.get("labelSelector", [""])[0])

    def match(self, obj):
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        for key, op, value in self.fields:
            if (field_value(obj, key) == value) != (op == "="):
                return False
        labels = meta.get("labels") or {}
        for key, op, value in self.labels:
            if (labels.get(key) == value) != (op == "="):
                return False
        return True


class Store:
    def __init__(self, event_window):
        self.cond = threading.Condition()
        self.rv = 1
        self.objects = {kind: {} for kind in ALL_KINDS}
        self.events = collections.deque()  # (rv, kind, obj, type)
        self.compacted = 0  # events with rv <= compacted are gone
        self.event_window = event_window
        self.faults = {"fail_next": 0, "fail_status": 500, "delay_ms": 0, "delay_next": 0,
                       "match": "", "fail_after": False,
                       "drop_after_events": 0, "watch_410_http": False, "watch_paused": False}
        self.inject_gen = 0
        self.inject = None
        self.stats = collections.Counter()
        self.active_watches = 0
        self.forbidden = []  # --authz: "USER VERB RESOURCE NS/NAME" of each 403

    # Called with the lock held.
    def _record(self, kind, etype, obj):
        self.events.append((self.rv, kind, obj, etype))
        while len(self.events) > self.event_window:
            old = self.events.popleft()
            self.compacted = old[0]
        self.cond.notify_all()

    def _bump(self, obj):
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)

    @staticmethod
    def key(kind, obj):
        meta = obj.get("metadata", {})
        if kind in NAMESPACED:
            return "%s/%s" % (meta.get("namespace", "default"), meta.get("name", ""))
        return meta.get("name", "")

    @staticmethod
    def validate(kind, obj):
        if kind == "resourceclaims":
            errs = validate_resource_claim(obj)
            if errs:
                raise ApiError(422, "Invalid", 'ResourceClaim.resource.k8s.io "%s" is invalid: '
                               "%s" % (obj.get("metadata", {}).get("name", ""),
                                       ", ".join(errs)))
        if kind == "resourceslices":
            errs = validate_resource_slice(obj)
            if errs:
                raise ApiError(422, "Invalid", 'ResourceSlice.resource.k8s.io "%s" is invalid: '
                               "%s" % (obj.get("metadata", {}).get("name", ""),
                                       ", ".join(errs)))
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for dev in obj["spec"].get("devices") or []:
                for t in dev.get("taints") or []:
                    t.setdefault("timeAdded", now)  # set by the server when empty

    def check_namespace(self, kind, meta):
        """kube-apiserver's NamespaceLifecycle admission, once namespaces are modelled."""
        if kind not in NAMESPACED or not self.objects["namespaces"]:
            return
        ns = meta.get("namespace", "default")
        obj = self.objects["namespaces"].get(ns)
        if obj is None:
            raise ApiError(404, "NotFound", 'namespaces "%s" not found' % ns)
        if (obj.get("status") or {}).get("phase") == "Terminating":
            raise ApiError(403, "Forbidden", 'unable to create new content in namespace %s '
                           "because it is being terminated" % ns)

    def create(self, kind, obj, record=True):
        with self.cond:
            meta = obj.setdefault("metadata", {})
            if kind in DRA_KINDS and not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(
                    random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            if not meta.get("name"):
                raise ApiError(422, "Invalid", "metadata.name: Required value")
            if kind in NAMESPACED:
                meta.setdefault("namespace", "default")
                if record:
                    self.check_namespace(kind, meta)
            if kind == "namespaces":
                obj.setdefault("status", {}).setdefault("phase", "Active")
            if kind in DRA_KINDS:
                obj["apiVersion"], obj["kind"] = api_version(kind), DRA_KINDS[kind]
                meta["generation"] = 1
                meta.pop("resourceVersion", None)
                self.validate(kind, obj)
            key = self.key(kind, obj)
            if key in self.objects[kind]:
                raise ApiError(409, "AlreadyExists",
                               '%s "%s" already exists' % (qualified(kind), meta["name"]))
            meta.setdefault("uid", "uid-%s-%d" % (kind, self.rv + 1))
            self._bump(obj)
            self.objects[kind][key] = obj
            if record:
                self._record(kind, "ADDED", obj)
            return obj

    def get(self, kind, key):
        obj = self.objects[kind].get(key)
        if obj is None:
            raise ApiError(404, "NotFound", '%s "%s" not found' % (kind, key.split("/")[-1]))
        return obj

    def patch(self, kind, key, patch):
        with self.cond:
            old = self.get(kind, key)
            want = (patch.get("metadata") or {}).get("resourceVersion") \
                if isinstance(patch, dict) else None
            if want is not None and want != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict",
                               'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and "
                               "try again" % (kind, key.split("/")[-1]))
            new = merge_patch(copy.deepcopy(old), patch)
            if kind == "configmaps" and old.get("immutable") is True and any(
                    old.get(f) != new.get(f) for f in ("data", "binaryData", "immutable")):
                raise ApiError(422, "Invalid", 'ConfigMap "%s" is invalid: data: Forbidden: '
                               "field is immutable when `immutable` is set"
                               % key.split("/")[-1])
            new.setdefault("metadata", {})
            for fixed in ("name", "namespace", "uid"):
                if fixed in old["metadata"]:
                    new["metadata"][fixed] = old["metadata"][fixed]
            if kind in DRA_KINDS:
                self.check_update(kind, old, new)
            self._bump(new)
            self.objects[kind][key] = new
            self._record(kind, "MODIFIED", new)
            return new

    def bind(self, ns, name, binding):
        """pods/binding as kube-apiserver 1.27+ does it (BindingREST.Create): the name must
        match the URL; a non-empty metadata.uid and metadata.resourceVersion are
        preconditions (409 Conflict, nothing written); a pod being deleted or already
        bound is a 409 on pods/binding; otherwise spec.nodeName is set, the Binding's
        metadata.annotations are merged into the pod's and the PodScheduled condition is
        set to True, all in one write (one MODIFIED event)."""
        with self.cond:
            if not isinstance(binding, dict):
                raise ApiError(400, "BadRequest", "body must be a Binding object")
            meta = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest",
                               "name in URL does not match name in Binding object")
            target = binding.get("target")
            if not isinstance(target, dict) or target.get("kind", "Node") != "Node" \
                    or not target.get("name"):
                raise ApiError(422, "Invalid",
                               'Binding.core "%s" is invalid: target.name: Required value'
                               % name)
            annotations = meta.get("annotations") or {}
            if not isinstance(annotations, dict) or \
                    not all(isinstance(v, str) for v in annotations.values()):
                raise ApiError(400, "BadRequest", "metadata.annotations must map to strings")
            key = "%s/%s" % (ns, name)
            pod = self.get("pods", key)
            prefix = 'Operation cannot be fulfilled on pods "%s": ' % name
            uid, rv = meta.get("uid") or "", meta.get("resourceVersion") or ""
            if uid and uid != pod["metadata"].get("uid", ""):
                raise ApiError(409, "Conflict", prefix + "Precondition failed: UID in "
                               "precondition: %s, UID in object meta: %s"
                               % (uid, pod["metadata"].get("uid", "")))
            if rv and rv != pod["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", prefix + "Precondition failed: ResourceVersion "
                               "in precondition: %s, ResourceVersion in object meta: %s"
                               % (rv, pod["metadata"]["resourceVersion"]))
            prefix = 'Operation cannot be fulfilled on pods/binding "%s": ' % name
            if pod["metadata"].get("deletionTimestamp"):
                raise ApiError(409, "Conflict", prefix + "pod %s is being deleted, cannot be "
                               "assigned to a host" % name)
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(409, "Conflict", prefix + 'pod %s is already assigned to node "%s"'
                               % (name, bound))
            new = copy.deepcopy(pod)
            new.setdefault("spec", {})["nodeName"] = target["name"]
            if annotations:
                new["metadata"].setdefault("annotations", {}).update(annotations)
            status = new.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or []
                          if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True"})
            status["conditions"] = conditions
            self._bump(new)
            self.objects["pods"][key] = new
            self._record("pods", "MODIFIED", new)
            self.stats["bindings"] += 1

    def check_update(self, kind, old, new):
        """Immutable fields, validation and metadata.generation of a DRA object write."""
        name = old["metadata"]["name"]
        immutable = {"resourceslices": ("driver", "pool.name", "nodeName"),
                     "resourceclaims": ("",)}.get(kind, ())
        for field in immutable:
            if field_value(old.get("spec"), field) != field_value(new.get("spec"), field) \
                    if field else old.get("spec") != new.get("spec"):
                raise ApiError(422, "Invalid", '%s.%s "%s" is invalid: spec%s: Invalid value: '
                               "field is immutable" % (DRA_KINDS[kind], DRA_GROUP, name,
                                                      "." + field if field else ""))
        self.validate(kind, new)
        generation = old["metadata"].get("generation", 1)
        if old.get("spec") != new.get("spec"):
            generation += 1
        new["metadata"]["generation"] = generation

    def update(self, kind, key, name, obj, subresource=""):
        """PUT: replaces the object (or its status) with a resourceVersion precondition."""
        with self.cond:
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
                raise ApiError(400, "BadRequest", "body must be an object")
            meta = obj.setdefault("metadata", {})
            if meta.get("name", "") != name:
                raise ApiError(400, "BadRequest", "the name of the object (%s) does not match "
                               "the name on the URL (%s)" % (meta.get("name", ""), name))
            old = self.get(kind, key)
            if meta.get("namespace", old["metadata"].get("namespace")) != \
                    old["metadata"].get("namespace"):
                raise ApiError(400, "BadRequest", "the namespace of the object does not match "
                               "the namespace on the request")
            want = meta.get("resourceVersion") or ""
            if want and want != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict",
                               'Operation cannot be fulfilled on %s "%s": the object has been '
                               "modified; please apply your changes to the latest version and "
                               "try again" % (qualified(kind), name))
            if subresource == "status":
                new = copy.deepcopy(old)
                new["status"] = copy.deepcopy(obj.get("status"))
                if new["status"] is None:
                    del new["status"]
            else:
                new = copy.deepcopy(obj)
                if kind == "resourceclaims":  # the main resource does not write status
                    new.pop("status", None)
                    if "status" in old:
                        new["status"] = copy.deepcopy(old["status"])
            new["apiVersion"], new["kind"] = api_version(kind), DRA_KINDS[kind]
            for fixed in ("name", "namespace", "uid", "generateName"):
                if fixed in old["metadata"]:
                    new["metadata"][fixed] = old["metadata"][fixed]
            self.check_update(kind, old, new)
            self._bump(new)
            self.objects[kind][key] = new
            self._record(kind, "MODIFIED", new)
            self.stats["updates"] += 1
            return new

    def delete(self, kind, key, options=None):
        with self.cond:
            old = self.get(kind, key)
            pre = (options or {}).get("preconditions") if isinstance(options, dict) else None
            if isinstance(pre, dict):
                name = old["metadata"].get("name", "")
                for field, have in (("uid", old["metadata"].get("uid", "")),
                                    ("resourceVersion", old["metadata"]["resourceVersion"])):
                    if pre.get(field) and pre[field] != have:
                        raise ApiError(409, "Conflict",
                                       'Operation cannot be fulfilled on %s "%s": Precondition '
                                       "failed: %s in precondition: %s, %s in object meta: %s"
                                       % (qualified(kind), name, field[0].upper() + field[1:],
                                          pre[field], field[0].upper() + field[1:], have))
            gone = copy.deepcopy(old)
            del self.objects[kind][key]
            self._bump(gone)
            self._record(kind, "DELETED", gone)
            return gone

    def compact(self):
        with self.cond:
            self.compacted = self.rv
            self.events.clear()


def generate(store, nodes, gpus, pods):
    for i in range(nodes):
        devices = [{"id": "GPU-%08d-%02d" % (i, g), "index": g, "count": 10, "devmem": 81559,
                    "devcore": 100, "type": "NVIDIA H100 80GB HBM3", "mode": "hami-core",
                    "health": True} for g in range(gpus)]
        store.create("nodes", {
            "metadata": {"name": "node-%05d" % i,
                         "labels": {"kubernetes.io/hostname": "node-%05d" % i, "gpu": "on"},
                         "annotations": {"hami.io/node-nvidia-register": json.dumps(devices)}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus * 10), "cpu": "64"},
                       "allocatable": {"nvidia.com/gpu": str(gpus * 10), "cpu": "64"}}},
            record=False)
    for i in range(pods):
        store.create("pods", {
            "metadata": {"name": "pod-%05d" % i, "namespace": "default"},
            "spec": {"schedulerName": "vgpu-scheduler", "containers": [
                {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}}, record=False)


class Handler(BaseHTTPRequestHandler):
    fail_after = 0  # set by apply_faults: answer with this status after the request ran
    protocol_version = "HTTP/1.1"
    server_version = "vgpu-test-apiserver/1"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("kube_api_server: " + (fmt % args) + "\n")

    # ---- plumbing ---------------------------------------------------------------

    def send_json(self, code, body):
        if self.fail_after:  # the request was carried out; its answer is lost
            code, self.fail_after = self.fail_after, 0
            body = status_body(code, "InternalError", "injected failure (HTTP %d)" % code)
        self.send_bytes(code, json.dumps(body, separators=(",", ":")).encode())

    def send_bytes(self, code, data):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        # Headers and body in one write: as two small writes on a keep-alive connection,
        # the body waits for the client's delayed ACK (Nagle), ~40 ms per request.
        self._headers_buffer.append(b"\r\n")
        self.wfile.write(b"".join(self._headers_buffer) + data)
        self._headers_buffer = []

    def send_error_status(self, code, reason, message):
        self.send_json(code, status_body(code, reason, message))

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 16 << 20:
            raise ApiError(413, "RequestEntityTooLarge", "body too large")
        data = self.rfile.read(length) if length else b""
        try:
            return json.loads(data) if data else None
        except ValueError as e:
            raise ApiError(400, "BadRequest", "body is not JSON: %s" % e)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")

    def drop(self):
        """Cuts the connection in the middle of a chunked body."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PUT(self):
        self.dispatch("PUT")

    def dispatch(self, method):
        self.fail_after = 0
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        store = self.server.store
        try:
            if parts[:1] == ["admin"]:
                return self.admin(method, parts[1:])
            if url.path == "/healthz":
                return self.send_json(200, {"ok": True})
            if url.path == "/version":
                major, minor = self.server.k8s_version
                return self.send_json(200, {"major": major, "minor": minor,
                                            "gitVersion": "v%s.%s.0" % (major, minor.rstrip("+")),
                                            "platform": "linux/amd64"})
            if self.server.authz is not None:
                self.authorize(method, parts, query)
            self.apply_faults(store, method)
            if parts[:3] == ["apis", DRA_GROUP, DRA_VERSION]:
                return self.dispatch_dra(method, parts[3:], query)
            if len(parts) >= 3 and parts[0] == "apis" and \
                    "%s/%s" % (parts[1], parts[2]) in {v[0] for v in WORKLOAD_KINDS.values()}:
                return self.dispatch_workload(method, parts, query)
            if parts[:2] != ["api", "v1"]:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            rest = parts[2:]
            namespace = None
            if len(rest) == 2 and rest[0] == "namespaces":
                rest = ["namespaces", rest[1]]  # the Namespace object itself
            elif len(rest) >= 2 and rest[0] == "namespaces":
                namespace, rest = rest[1], rest[2:]
            if not rest or rest[0] not in KINDS or \
                    (rest[0] in ("nodes", "namespaces") and namespace):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            kind = rest[0]
            if len(rest) == 1:
                if method == "GET":
                    if query.get("watch", ["0"])[0] in ("1", "true"):
                        return self.watch(kind, namespace, query)
                    return self.list(kind, namespace, query)
                if method == "POST":
                    obj = self.read_body()
                    if not isinstance(obj, dict):
                        raise ApiError(400, "BadRequest", "body must be an object")
                    if namespace is not None:
                        obj.setdefault("metadata", {})["namespace"] = namespace
                    return self.send_json(201, store.create(kind, obj))
                raise ApiError(405, "MethodNotAllowed", "method not allowed")
            name = rest[1]
            key = "%s/%s" % (namespace or "default", name) if kind in NAMESPACED else name
            if len(rest) == 3 and kind == "pods" and rest[2] == "binding" and method == "POST":
                store.bind(namespace or "default", name, self.read_body())
                return self.send_json(201, status_body(201, "", "", status="Success"))
            if len(rest) == 3 and kind == "pods" and rest[2] == "status":
                return self.pod_status(method, store, key)
            if len(rest) != 2:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            if method == "GET":
                with store.cond:
                    return self.send_json(200, store.get(kind, key))
            if method == "PATCH":
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if ctype not in ("application/merge-patch+json",
                                 "application/strategic-merge-patch+json"):
                    raise ApiError(415, "UnsupportedMediaType",
                                   "the body of the request was in an unknown format - "
                                   "accepted media types include: "
                                   "application/merge-patch+json, "
                                   "application/strategic-merge-patch+json")
                patch = self.read_body()
                if not isinstance(patch, dict):
                    raise ApiError(400, "BadRequest", "patch must be an object")
                store.stats["patches"] += 1
                return self.send_json(200, store.patch(kind, key, patch))
            if method == "DELETE":
                return self.send_json(200, store.delete(kind, key))
            raise ApiError(405, "MethodNotAllowed", "method not allowed")
        except ApiError as e:
            self.read_rest_of_body()
            self.send_error_status(e.code, e.reason, e.message)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def pod_status(self, method, store, key):
        """pods/NAME/status as kube-apiserver serves it: GET the pod; PATCH writes the
        status only (spec and the rest of the patch are ignored, as the status strategy
        does). A strategic merge patch merges status.conditions by their type (the
        patchMergeKey of PodStatus.Conditions), keeping the others; a JSON merge patch
        replaces the list."""
        if method == "GET":
            with store.cond:
                return self.send_json(200, store.get("pods", key))
        if method != "PATCH":
            raise ApiError(405, "MethodNotAllowed", "method not allowed")
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            raise ApiError(415, "UnsupportedMediaType",
                           "the body of the request was in an unknown format - accepted media "
                           "types include: application/merge-patch+json, "
                           "application/strategic-merge-patch+json")
        patch = self.read_body()
        if not isinstance(patch, dict) or not isinstance(patch.get("status", {}), dict):
            raise ApiError(400, "BadRequest", "patch must be an object")
        status = copy.deepcopy(patch.get("status") or {})
        with store.cond:
            old = store.get("pods", key)
            conds = status.pop("conditions", None)
            if conds is not None:
                if not isinstance(conds, list) or not all(
                        isinstance(c, dict) and isinstance(c.get("type"), str) for c in conds):
                    raise ApiError(422, "Invalid", "status.conditions: each needs a type")
                merged = conds
                if ctype == "application/strategic-merge-patch+json":
                    merged = [c for c in (old.get("status") or {}).get("conditions") or []
                              if c.get("type") not in {n["type"] for n in conds}]
                    for c in conds:
                        prev = [o for o in (old.get("status") or {}).get("conditions") or []
                                if o.get("type") == c["type"]]
                        merged.append(merge_patch(copy.deepcopy(prev[0]) if prev else {}, c))
                status["conditions"] = merged
            store.stats["patches"] += 1
        return self.send_json(200, store.patch("pods", key, {"status": status}))

    def read_rest_of_body(self):
        pass  # bodies are read before any error can be raised after them

    def dispatch_workload(self, method, parts, query):
        """apps/v1 and batch/v1 workloads: called from dispatch, which answers ApiErrors."""
        store = self.server.store
        rest = parts[3:]
        if len(rest) not in (3, 4) or rest[0] != "namespaces" or \
                WORKLOAD_KINDS.get(rest[2], ("",))[0] != "%s/%s" % (parts[1], parts[2]):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, kind = rest[1], rest[2]
        if len(rest) == 3:
            if method == "GET":
                return self.list(kind, namespace, query)
            if method == "POST":
                obj = self.read_body()
                if not isinstance(obj, dict):
                    raise ApiError(400, "BadRequest", "body must be an object")
                obj.setdefault("metadata", {})["namespace"] = namespace
                obj["apiVersion"], obj["kind"] = WORKLOAD_KINDS[kind]
                return self.send_json(201, store.create(kind, obj))
            raise ApiError(405, "MethodNotAllowed", "method not allowed")
        key = "%s/%s" % (namespace, rest[3])
        if method == "GET":
            with store.cond:
                return self.send_json(200, store.get(kind, key))
        if method == "DELETE":
            return self.send_json(200, store.delete(kind, key))
        raise ApiError(405, "MethodNotAllowed", "method not allowed")

    def dispatch_dra(self, method, rest, query):
        """resource.k8s.io/v1: called from dispatch, which answers the ApiErrors."""
        store = self.server.store
        not_found = ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in DRA_KINDS:
            raise not_found
        kind = rest[0]
        namespaced = kind in NAMESPACED
        if namespace is not None and not namespaced:
            raise not_found
        body = self.read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        if len(rest) == 1:
            if method == "GET":
                if query.get("watch", ["0"])[0] in ("1", "true"):
                    return self.watch(kind, namespace, query)
                return self.list(kind, namespace, query)
            if method == "POST":
                if namespaced and namespace is None:
                    raise not_found
                if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
                    raise ApiError(400, "BadRequest", "body must be an object")
                if namespace is not None:
                    meta = body.setdefault("metadata", {})
                    if meta.get("namespace", namespace) != namespace:
                        raise ApiError(400, "BadRequest", "the namespace of the provided object "
                                       "does not match the namespace sent on the request")
                    meta["namespace"] = namespace
                return self.send_json(201, store.create(kind, body))
            raise ApiError(405, "MethodNotAllowed", "method not allowed")
        if namespaced and namespace is None:
            raise not_found
        name = rest[1]
        key = "%s/%s" % (namespace, name) if namespaced else name
        subresource = rest[2] if len(rest) == 3 else ""
        if len(rest) > 3 or (subresource and (subresource != "status" or
                                              kind != "resourceclaims")):
            raise not_found
        if method == "GET":
            with store.cond:
                return self.send_json(200, store.get(kind, key))
        if method == "PUT":
            return self.send_json(200, store.update(kind, key, name, body, subresource))
        if method == "PATCH" and not subresource:
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype not in ("application/merge-patch+json",
                             "application/strategic-merge-patch+json"):
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - "
                               "accepted media types include: application/merge-patch+json, "
                               "application/strategic-merge-patch+json")
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "patch must be an object")
            store.stats["patches"] += 1
            return self.send_json(200, store.patch(kind, key, body))
        if method == "DELETE" and not subresource:
            return self.send_json(200, store.delete(kind, key, body))
        raise ApiError(405, "MethodNotAllowed", "method not allowed")

    # ---- --authz: bearer tokens and RBAC rules ---------------------------------------

    @staticmethod
    def request_attributes(method, parts, query):
        """(verb, resource, namespace, name) as kube-apiserver's RBAC sees the request;
        request_group gives the API group."""
        rest = parts[2:] if parts[:2] == ["api", "v1"] else parts
        if parts[:3] == ["apis", DRA_GROUP, DRA_VERSION]:
            rest = parts[3:]
        namespace = None
        if len(rest) == 2 and rest[0] == "namespaces":
            pass  # GET /api/v1/namespaces/NS: resource namespaces, name NS
        elif len(rest) >= 2 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = rest[0] if rest else ""
        name = rest[1] if len(rest) >= 2 else ""
        if len(rest) >= 3:
            resource += "/" + rest[2]
        if method == "GET":
            if name:
                verb = "get"
            else:
                verb = "watch" if query.get("watch", ["0"])[0] in ("1", "true") else "list"
        else:
            verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete",
                    "PUT": "update"}.get(method, method.lower())
        return verb, resource, namespace, name

    @staticmethod
    def request_group(parts):
        return DRA_GROUP if parts[:3] == ["apis", DRA_GROUP, DRA_VERSION] else ""

    def authorize(self, method, parts, query):
        authz = self.server.authz
        header = self.headers.get("Authorization") or ""
        user = authz["tokens"].get(header[7:]) if header.startswith("Bearer ") else None
        if user is None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            raise ApiError(401, "Unauthorized", "Unauthorized")
        verb, resource, namespace, name = self.request_attributes(method, parts, query)
        group = self.request_group(parts)
        for rule in authz["rules"].get(user, []):
            if not ({verb, "*"} & set(rule.get("verbs", [])) and
                    {group, "*"} & set(rule.get("apiGroups", [])) and
                    {resource, "*"} & set(rule.get("resources", []))):
                continue
            if rule.get("resourceNames") and name not in rule["resourceNames"]:
                continue
            if rule.get("namespace") is not None and rule["namespace"] != namespace:
                continue
            return
        with self.server.store.cond:
            self.server.store.forbidden.append("%s %s %s %s/%s" % (user, verb, resource,
                                                                  namespace or "", name))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        base = resource.split("/")[0]
        if group:
            base = "%s.%s" % (base, group)
        what = '%s "%s"' % (base, name) if name else base
        where = ('in the namespace "%s"' % namespace) if namespace else "at the cluster scope"
        message = ('%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" %s'
                   % (what, user, verb, resource, group, where))
        raise ApiError(403, "Forbidden", message)

    def apply_faults(self, store, method="GET"):
        with store.cond:
            store.stats["requests"] += 1
            faults = store.faults
            delay = 0
            fail = False
            if faults["match"] and faults["match"] not in "%s %s" % (method, self.path):
                pass
            elif faults["delay_ms"] > 0:
                delay = faults["delay_ms"]
                if faults["delay_next"] > 0:
                    faults["delay_next"] -= 1
                    if faults["delay_next"] == 0:
                        faults["delay_ms"] = 0
            if not faults["match"] or faults["match"] in "%s %s" % (method, self.path):
                fail = faults["fail_next"] > 0
            if fail:
                faults["fail_next"] -= 1
                store.stats["failed"] += 1
                code = faults["fail_status"]
                if faults["fail_after"]:
                    self.fail_after = code
                    fail = False
        if delay:
            with store.cond:
                store.stats["delayed"] += 1
            time.sleep(delay / 1000.0)
        if fail:
            # Drain a request body so the connection stays usable.
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            raise ApiError(code, "InternalError", "injected failure (HTTP %d)" % code)

    # ---- list and watch -----------------------------------------------------------

    def list(self, kind, namespace, query):
        store = self.server.store
        flt = Filter(kind, namespace, query)
        limit = int(query.get("limit", ["0"])[0] or 0)
        token = query.get("continue", [""])[0]
        with store.cond:
            store.stats["lists"] += 1
            if token:
                try:
                    list_rv, after = token.split(":", 1)
                    list_rv = int(list_rv)
                except ValueError:
                    raise ApiError(400, "BadRequest", "invalid continue token")
                if list_rv < store.compacted:
                    raise ApiError(410, "Expired",
                                   "The provided continue parameter is too old to display a "
                                   "consistent list result. You can start a new list without "
                                   "the continue parameter.")
            else:
                list_rv, after = store.rv, ""
            keys = sorted(k for k in store.objects[kind] if k > after)
            items, next_token = [], ""
            for k in keys:
                obj = store.objects[kind][k]
                if not flt.match(obj):
                    continue
                if limit and len(items) == limit:
                    next_token = "%d:%s" % (list_rv, items[-1][0])
                    break
                items.append((k, obj))
            body = {"kind": ALL_KINDS[kind] + "List", "apiVersion": api_version(kind),
                    "metadata": {"resourceVersion": str(list_rv)},
                    "items": [obj for _, obj in items]}
            if next_token:
                body["metadata"]["continue"] = next_token
            data = json.dumps(body, separators=(",", ":")).encode()
        self.send_bytes(200, data)

    def watch(self, kind, namespace, query):
        store = self.server.store
        flt = Filter(kind, namespace, query)
        rv_text = query.get("resourceVersion", [""])[0]
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] == "true"
        timeout = float(query.get("timeoutSeconds", ["1800"])[0] or 1800)
        deadline = time.monotonic() + timeout
        try:
            start_rv = int(rv_text) if rv_text not in ("", "0") else None
        except ValueError:
            raise ApiError(400, "BadRequest", "invalid resourceVersion %r" % rv_text)
        with store.cond:
            store.stats["watches"] += 1
            expired = start_rv is not None and start_rv < store.compacted
            if expired and store.faults["watch_410_http"]:
                raise ApiError(410, "Expired", "too old resource version: %d (%d)"
                               % (start_rv, store.compacted))
            inject_seen = store.inject_gen
            drop_after = store.faults["drop_after_events"]
            if start_rv is None:
                # No version: synthetic ADDED for everything, then changes from now.
                pending = [("ADDED", o) for o in store.objects[kind].values() if flt.match(o)]
                position = store.rv
            else:
                pending = []
                position = start_rv
            store.active_watches += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent_events = 0
        last_send = time.monotonic()
        interval = self.server.bookmark_interval

        def line(etype, obj):
            return json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() \
                + b"\n"

        try:
            if expired:
                self.chunk(line("ERROR", status_body(
                    410, "Expired", "too old resource version: %d (%d)"
                    % (start_rv, store.compacted))))
                self.chunk(b"")
                return
            while True:
                out = []
                action = None
                with store.cond:
                    if not pending:
                        now = time.monotonic()
                        wait = min(deadline - now, 0.25)
                        if interval > 0:
                            wait = min(wait, last_send + interval - now)
                        if (store.faults["watch_paused"] or not store.events or
                                store.events[-1][0] <= position) and \
                                store.inject_gen == inject_seen and wait > 0:
                            store.cond.wait(wait)
                    if store.inject_gen != inject_seen:
                        inject_seen = store.inject_gen
                        action = dict(store.inject)
                    if position < store.compacted and not pending:
                        action = {"action": "expire"}
                    fresh = []
                    for rv, ekind, obj, etype in reversed(store.events):
                        if rv <= position or store.faults["watch_paused"]:
                            break
                        fresh.append((rv, ekind, obj, etype))
                    for rv, ekind, obj, etype in reversed(fresh):
                        if ekind == kind and flt.match(obj):
                            pending.append((etype, obj))
                        position = rv
                    current_rv = store.rv
                    drop_after = store.faults["drop_after_events"]
                if action is not None:
                    if self.inject(action, store, kind):
                        return
                while pending:
                    if drop_after and sent_events >= drop_after:
                        # Deliver what was sent so far, then cut: a watch that met a
                        # burst of events must still make progress across reconnects.
                        if out:
                            self.chunk(b"".join(out))
                        store.stats["dropped"] += 1
                        self.drop()
                        return
                    etype, obj = pending.pop(0)
                    out.append(line(etype, obj))
                    sent_events += 1
                    if len(out) >= 64:
                        break
                now = time.monotonic()
                if out:
                    self.chunk(b"".join(out))
                    last_send = now
                elif bookmarks and interval > 0 and now - last_send >= interval:
                    self.chunk(line("BOOKMARK", {
                        "kind": ALL_KINDS[kind], "apiVersion": api_version(kind),
                        "metadata": {"resourceVersion": str(current_rv)}}))
                    store.stats["bookmarks"] += 1
                    last_send = now
                if now >= deadline and not pending:
                    self.chunk(b"")
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            with store.cond:
                store.active_watches -= 1

    def inject(self, action, store, kind):
        """Performs one injected watch fault; True when the stream is over."""
        name = action.get("action")
        store.stats["inject_" + str(name)] += 1
        if name == "drop":
            self.drop()
            return True
        if name == "expire":
            self.chunk(json.dumps({"type": "ERROR", "object": status_body(
                410, "Expired", "too old resource version")}).encode() + b"\n")
            self.chunk(b"")
            return True
        if name == "error":
            self.chunk(json.dumps({"type": "ERROR", "object": status_body(
                500, "InternalError", "injected watch error")}).encode() + b"\n")
            self.chunk(b"")
            return True
        if name == "malformed":
            self.chunk(b'{"type":"ADDED","object":{"metadata":\n')
            return False
        if name == "oversized":
            size = int(action.get("bytes", 17 << 20))
            head = b'{"type":"ADDED","object":{"kind":"%s","metadata":{"resourceVersion":"1"},' \
                b'"pad":"' % ALL_KINDS[kind].encode()
            self.chunk(head)
            left = size
            block = b"x" * 65536
            while left > 0:
                n = min(left, len(block))
                self.chunk(block[:n])
                left -= n
            self.chunk(b'"}}\n')
            return False
        return False

    # ---- admin --------------------------------------------------------------------

    def admin(self, method, parts):
        store = self.server.store
        body = self.read_body() if method == "POST" else None
        what = parts[0] if parts else ""
        if method == "GET" and what == "stats":
            with store.cond:
                stats = dict(store.stats)
                stats.update({"active_watches": store.active_watches, "rv": store.rv,
                              "compacted": store.compacted,
                              "nodes": len(store.objects["nodes"]),
                              "pods": len(store.objects["pods"]),
                              "resourceslices": len(store.objects["resourceslices"]),
                              "resourceclaims": len(store.objects["resourceclaims"]),
                              "deviceclasses": len(store.objects["deviceclasses"]),
                              "forbidden": list(store.forbidden)})
            return self.send_json(200, stats)
        if method != "POST":
            return self.send_error_status(405, "MethodNotAllowed", "admin: POST only")
        with store.cond:
            if what == "faults":
                for key, value in (body or {}).items():
                    if key not in store.faults:
                        return self.send_error_status(400, "BadRequest",
                                                      "unknown fault %r" % key)
                    store.faults[key] = value
                store.cond.notify_all()
            elif what == "inject":
                if not isinstance(body, dict) or body.get("action") not in (
                        "drop", "expire", "malformed", "oversized", "error"):
                    return self.send_error_status(400, "BadRequest", "unknown inject action")
                store.inject = body
                store.inject_gen += 1
                store.cond.notify_all()
            elif what == "compact":
                store.compacted = store.rv
                store.events.clear()
                store.cond.notify_all()
            elif what == "allocate":
                if not isinstance(body, dict) or not body.get("name"):
                    return self.send_error_status(400, "BadRequest",
                                                  "allocate: {namespace, name} required")
                key = "%s/%s" % (body.get("namespace", "default"), body["name"])
                try:
                    claim = store.get("resourceclaims", key)
                    stored = store.objects["resourceclaims"][key]
                    alloc = allocate(store, stored, body.get("node"), body.get("devices"),
                                     body.get("driver"))
                    claim = copy.deepcopy(claim)
                    claim["status"] = dict(claim.get("status") or {}, allocation=alloc)
                    updated = store.update("resourceclaims", key, body["name"], claim, "status")
                except ApiError as e:
                    return self.send_error_status(e.code, e.reason, e.message)
                return self.send_json(200, updated)
            elif what == "reset":
                store.faults.update({"fail_next": 0, "delay_ms": 0, "delay_next": 0,
                                     "fail_after": False, "drop_after_events": 0,
                                     "watch_410_http": False, "watch_paused": False,
                                     "match": ""})
                store.cond.notify_all()
            else:
                return self.send_error_status(404, "NotFound", "unknown admin endpoint")
            faults = dict(store.faults)
        return self.send_json(200, {"ok": True, "faults": faults})


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the listening port here")
    ap.add_argument("--fixture", help="JSON file {nodes: [...], pods: [...]}")
    ap.add_argument("--nodes", type=int, default=0, help="generate this many GPU nodes")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--pods", type=int, default=0, help="generate this many pending pods")
    ap.add_argument("--bookmark-interval", type=float, default=60.0,
                    help="seconds between bookmarks on an idle watch (0: none)")
    ap.add_argument("--event-window", type=int, default=100000,
                    help="events kept for watches; older versions get 410")
    ap.add_argument("--fail-next", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=500)
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--drop-after-events", type=int, default=0)
    ap.add_argument("--watch-410-http", action="store_true")
    ap.add_argument("--tls-cert", help="serve https with this PEM certificate chain")
    ap.add_argument("--tls-key", help="PEM private key for --tls-cert")
    ap.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    ap.add_argument("--authz", help="JSON tokens and RBAC rules to enforce (see above)")
    ap.add_argument("--k8s-version", default="1.36",
                    help="MAJOR.MINOR that GET /version reports (drivers choose features by it)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    store = Store(args.event_window)
    if args.fixture:
        with open(args.fixture) as f:
            fixture = json.load(f)
        for kind in ALL_KINDS:
            for obj in fixture.get(kind, []):
                store.create(kind, obj, record=False)
    generate(store, args.nodes, args.gpus_per_node, args.pods)
    store.faults.update({"fail_next": args.fail_next, "fail_status": args.fail_status,
                         "delay_ms": args.delay_ms, "drop_after_events": args.drop_after_events,
                         "watch_410_http": args.watch_410_http})

    server = Server((args.host, args.port), Handler)
    server.store = store
    server.bookmark_interval = args.bookmark_interval
    server.verbose = args.verbose
    major, _, minor = args.k8s_version.partition(".")
    server.k8s_version = (major, minor)
    server.authz = None
    if args.authz:
        with open(args.authz) as f:
            server.authz = json.load(f)
    if args.tls_cert:
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(args.tls_client_ca)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        import os
        os.rename(tmp, args.port_file)
    sys.stderr.write("kube_api_server: listening on http://%s:%d\n" % (args.host, port))
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
