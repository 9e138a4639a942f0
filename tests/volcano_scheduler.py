#!/usr/bin/env python3
"""A stand-in for Volcano's scheduler, for what it does on the wire with vGPU pods.

Volcano (volcano-sh/volcano) places GPU-sharing pods itself, in its deviceshare plugin,
and hands the decision to the node's device plugin through annotations. This module does
the same against an API server (tests/kube_api_server.py or any other), so that vgpu's
device plugin in Volcano mode can be tested without Volcano. It follows volcano-sh/volcano
at commit ed72c7c815a9fd547a787134676f73d42e9d049c (2026-08-20; "head" below), and
v1.15.0 for the older way of writing the decision ("v1.15"). The functions below name the
Go function of pkg/scheduler/api/devices/nvidia/vgpu/ (utils.go, device_info.go,
hamicore.go, type.go) or pkg/scheduler/plugins/util/nodelock/nodelock.go they follow.

What it keeps of Volcano, on purpose, quirks included (docs/volcano.md lists them):
- decode_node_devices: entries split on ':'; an entry without ',' is skipped (the empty
  one after the last ':'), one with fewer than 6 fields rejects the whole node; a card's
  index is its position; numbers that do not parse are 0 (Go's ignored Atoi error).
- check_node (checkNodeGPUSharingPredicateAndScore): per GPU-requesting container, the
  cards in sorted_indices' order; a card fits when UsedNum < Number, free memory covers
  the request, UsedCore + cores <= 100, a 100-core request finds the card empty, a 0-core
  request does not join a card at 100, the Type contains "NVIDIA" and matches
  nvidia.com/use-gputype / nouse-gputype. A fitted card is charged at once (TryAddPod),
  so the pod's next container sees it. Health is not looked at (Volcano does not).
- Usage is rebuilt from the pods' volcano.sh/vgpu-ids-new (AddResource): a segment
  charges the first card whose UUID its UUID contains, and a pod is charged once per card
  (HAMICoreFactory.AddPod returns early for a pod already in the card's map).
- Scores (GPUScore, after the card was charged): binpack 100 x UsedMem / Memory;
  spread 100 for a card whose UsedNum is then 0. The node with the highest sum wins; ties
  go to the first node by name (Volcano adds its other plugins' scores; none here).
- The decision: vgpu-node, vgpu-time, bind-time (Unix seconds), vgpu-ids-new =
  devices-to-allocate = encode_pod_devices(...), bind-phase "allocating". head writes
  them on the Binding; v1.15 with a strategic-merge PATCH of the pod, then the Binding.
- Node lock (deviceshare.NodeLockEnable): node annotation "hamivgpu" = RFC 3339 time.
  A node that carries one is refused, also past 5 minutes: LockNode calls setNodeLock for
  an expired lock, which refuses any lock present. The device plugin removes it.
- release: a failed placement deletes the six pod annotations unless bind-phase is
  "success" (JSON merge patch with nulls), and the lock this placement took.
- Eligible nodes, head: non-zero volcano.sh/vgpu-number, vgpu-cores and vgpu-memory in
  status.allocatable. v1.15: the handshake annotation volcano.sh/node-vgpu-handshake
  (missing: ignored; "Deleted...": ignored; "Requesting_<t>" more than 60 s old: rewritten
  "Deleted_<now>", ignored; otherwise rewritten "Requesting_<now>").

Python 3 standard library only. As a program:
    volcano_scheduler.py --server http://127.0.0.1:PORT [--token T] [--generation head|v1.15]
        [--policy binpack|spread|] [--node-lock] NS/POD...
places each pod and prints "NS/POD NODE DEVICES" (exit 1 naming the reason otherwise).
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse

REGISTER = "volcano.sh/node-vgpu-register"
HANDSHAKE = "volcano.sh/node-vgpu-handshake"
NODE_LOCK = "hamivgpu"
VGPU_NODE = "volcano.sh/vgpu-node"
VGPU_TIME = "volcano.sh/vgpu-time"
BIND_TIME = "volcano.sh/bind-time"
IDS_NEW = "volcano.sh/vgpu-ids-new"
TO_ALLOCATE = "volcano.sh/devices-to-allocate"
BIND_PHASE = "volcano.sh/bind-phase"
MODE = "volcano.sh/vgpu-mode"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"
DECISION_KEYS = (VGPU_NODE, VGPU_TIME, BIND_TIME, IDS_NEW, TO_ALLOCATE, BIND_PHASE)
# The names current Volcano requires in a node's Allocatable, whatever the ConfigMap says.
ALLOCATABLE = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-cores", "volcano.sh/vgpu-memory")
# config.NvidiaConfig's defaults (volcano-vgpu-device-config, section nvidia:).
DEFAULT_NAMES = {"count": "volcano.sh/vgpu-number", "memory": "volcano.sh/vgpu-memory",
                 "percentage": "volcano.sh/vgpu-memory-percentage",
                 "cores": "volcano.sh/vgpu-cores"}


class Unschedulable(Exception):
    pass


def _atoi(s):
    """Go's strconv.Atoi with the error ignored: 0 for anything but a decimal integer."""
    body = s[1:] if s[:1] in ("+", "-") else s
    return int(s) if body.isdigit() and body.isascii() else 0


def decode_node_devices(text):
    """decodeNodeDevices: (list of card dicts, mode) or (None, "") for a node Volcano
    ignores. Card: index, uuid, number, memory, type, health, used_num, used_mem,
    used_core, pods (uids charged)."""
    if ":" not in text:
        return None, ""
    cards, mode = [], "hami-core"
    for index, entry in enumerate(text.split(":")):
        if "," not in entry:
            continue
        items = entry.split(",")
        if len(items) < 6:
            return None, ""
        cards.append({"index": index, "uuid": items[0], "number": _atoi(items[1]),
                      "memory": _atoi(items[2]), "type": items[3],
                      "health": items[4].lower() in ("1", "t", "true"),
                      "used_num": 0, "used_mem": 0, "used_core": 0, "pods": set()})
        mode = "mig" if items[5] == "mig" else "hami-core"
    return cards, mode


def encode_pod_devices(per_container):
    """encodePodDevices: per container "UUID,NVIDIA,MEM,CORES:" per device, joined by ';'."""
    return ";".join("".join("%s,%s,%d,%d:" % (d["uuid"], d["type"], d["mem"], d["cores"])
                            for d in devs) for devs in per_container)


def decode_pod_devices(text):
    """DecodePodDevices: a list per container of {uuid, type, mem, cores}; a device whose
    numbers do not parse is skipped."""
    if not text:
        return []
    out = []
    for part in text.split(";"):
        devs = []
        for entry in part.split(":"):
            if "," not in entry:
                continue
            f = entry.split(",")
            if len(f) < 4 or not f[2].isdigit() or not f[3].isdigit():
                continue
            devs.append({"uuid": f[0], "type": f[1], "mem": int(f[2]), "cores": int(f[3])})
        out.append(devs)
    return out


def _quantity_int(q):
    """resource.Quantity.AsInt64 for the plain integers Volcano's resources use."""
    if isinstance(q, int):
        return q, True
    try:
        return int(str(q)), True
    except ValueError:
        return 0, False


def resource_requests(pod, names=DEFAULT_NAMES):
    """ExtractResourceRequest: one request per container that has the count or the memory
    resource in its limits: {nums, mem, percentage (101: none), cores}."""
    out = []
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if names["count"] in limits:
            nums = _quantity_int(limits[names["count"]])[0]
        elif names["memory"] in limits:
            nums = 1
        else:
            continue

        def pick(name):
            v = limits.get(name, requests.get(name))
            if v is None:
                return None
            n, ok = _quantity_int(v)
            return n if ok else None
        mem = pick(names["memory"]) or 0
        pct = pick(names["percentage"])
        pct = 101 if pct is None else pct
        if pct == 101 and mem == 0:
            pct = 100
        out.append({"container": c.get("name"), "nums": nums, "mem": mem, "percentage": pct,
                    "cores": pick(names["cores"]) or 0})
    return out


def _type_ok(annotations, card_type):
    """checkType + checkGPUtype: the card's Type contains "NVIDIA"; use-gputype (any of a
    comma list, case-insensitive substring) must match, else nouse-gputype must not."""
    if "NVIDIA" not in card_type:
        return False
    up = card_type.upper()
    if USE_TYPE in annotations:
        return any(v.upper() in up for v in annotations[USE_TYPE].split(","))
    if NOUSE_TYPE in annotations:
        return not any(v.upper() in up for v in annotations[NOUSE_TYPE].split(","))
    return True


def sorted_indices(cards, policy):
    """sortedDeviceIndicesByPolicy: positions into cards. binpack: most used memory first;
    spread: fewest holders first (ties: lower index); otherwise the highest index first."""
    idx = list(range(len(cards)))
    if policy == "binpack":
        return sorted(idx, key=lambda i: (-cards[i]["used_mem"], cards[i]["index"]))
    if policy == "spread":
        return sorted(idx, key=lambda i: (cards[i]["used_num"], cards[i]["index"]))
    return sorted(idx, key=lambda i: -cards[i]["index"])


def gpu_score(policy, card):
    if policy == "binpack":
        return 100.0 * card["used_mem"] / card["memory"] if card["memory"] else 0.0
    if policy == "spread":
        return 100.0 if card["used_num"] == 0 else 0.0
    return 0.0


def check_node(pod, cards, mode, policy="", names=DEFAULT_NAMES):
    """checkNodeGPUSharingPredicateAndScore on cards (charged in place: pass a copy to
    keep them). (per-container device lists, score); Unschedulable with Volcano's
    reason otherwise."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    if annotations.get(MODE) is not None and annotations[MODE] != mode:
        raise Unschedulable("pod required sharing mode %s is not the same as the node mode %s"
                            % (annotations[MODE], mode))
    reqs = resource_requests(pod, names)
    score, per_container = 0.0, []
    for req in reqs:
        if req["nums"] > len(cards):
            raise Unschedulable("no enough gpu cards on node")
        left, devs = req["nums"], []
        for i in sorted_indices(cards, policy):
            card = cards[i]
            if card["number"] <= card["used_num"]:
                continue
            mem = int(card["memory"] * req["percentage"] / 100.0) if req["percentage"] != 101 \
                else req["mem"]
            if card["memory"] - card["used_mem"] < mem:
                continue
            if card["used_core"] + req["cores"] > 100:
                continue
            if req["cores"] == 100 and card["used_num"] > 0:
                continue
            if card["used_core"] == 100 and req["cores"] == 0:
                continue
            if not _type_ok(annotations, card["type"]):
                continue
            card["used_num"] += 1
            card["used_mem"] += mem
            card["used_core"] += req["cores"]
            if left > 0:
                left -= 1
                devs.append({"uuid": card["uuid"], "type": "NVIDIA", "mem": mem,
                             "cores": req["cores"]})
                score += gpu_score(policy, card)
            if left == 0:
                break
        if left > 0:
            raise Unschedulable("not enough gpu fitted on this node")
        per_container.append(devs)
    return per_container, score


def charge(cards, pod):
    """AddResource for one pod: each segment of its vgpu-ids-new charges the first card
    whose UUID it contains, once per pod and card."""
    uid = pod.get("metadata", {}).get("uid") or pod["metadata"]["name"]
    ids = (pod.get("metadata", {}).get("annotations") or {}).get(IDS_NEW)
    if ids is None:
        return
    for devs in decode_pod_devices(ids):
        for d in devs:
            for card in cards:
                if card["uuid"] in d["uuid"]:
                    if uid not in card["pods"]:
                        card["pods"].add(uid)
                        card["used_num"] += 1
                        card["used_mem"] += d["mem"]
                        card["used_core"] += d["cores"]
                    break


# ---- the scheduler against an API server ------------------------------------------------


class Api:
    def __init__(self, server, token=None):
        u = urllib.parse.urlparse(server)
        self.host, self.port, self.token = u.hostname, u.port or 80, token

    def call(self, method, path, body=None, ctype="application/json"):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            headers = {"Content-Type": ctype}
            if self.token:
                headers["Authorization"] = "Bearer " + self.token
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, json.loads(data) if data else None
        finally:
            conn.close()

    def ok(self, method, path, body=None, ctype="application/json"):
        status, obj = self.call(method, path, body, ctype)
        if status >= 300:
            raise Unschedulable("%s %s: %d %s" % (method, path, status,
                                                  (obj or {}).get("message", "")))
        return obj


class Scheduler:
    """Places vGPU pods as Volcano's deviceshare plugin does (module comment).
    generation: "head" (decision on the Binding) or "v1.15" (PATCH, then Binding)."""

    def __init__(self, api, generation="head", policy="", node_lock=False,
                 names=DEFAULT_NAMES, clock=time.time):
        if generation not in ("head", "v1.15"):
            raise ValueError("generation: head or v1.15")
        self.api, self.generation, self.policy = api, generation, policy
        self.node_lock, self.names, self.clock = node_lock, names, clock

    def _eligible(self, node):
        meta = node.get("metadata", {})
        ann = meta.get("annotations") or {}
        if REGISTER not in ann:
            return False
        if self.generation == "head":
            alloc = (node.get("status") or {}).get("allocatable") or {}
            return all(_quantity_int(alloc.get(n, 0))[0] > 0 for n in ALLOCATABLE)
        hs = ann.get(HANDSHAKE)
        if hs is None or "Deleted" in hs:
            return False
        now = self.clock()
        if "Requesting" in hs:
            try:
                then = time.mktime(time.strptime(hs.split("_", 1)[1], "%Y.%m.%d %H:%M:%S"))
            except (ValueError, IndexError):
                then = 0  # Go's time.Parse error ignored: the zero time, long ago
            if now > then + 60:
                self._patch_node(meta["name"], {HANDSHAKE: "Deleted_" + _stamp(now)})
                return False
            return True
        self._patch_node(meta["name"], {HANDSHAKE: "Requesting_" + _stamp(now)})
        return True

    def _patch_node(self, name, annotations, rv=None):
        meta = {"annotations": annotations}
        if rv is not None:
            meta["resourceVersion"] = rv
        return self.api.ok("PATCH", "/api/v1/nodes/" + name, {"metadata": meta},
                           "application/strategic-merge-patch+json")

    def cards(self, node, pods):
        """The node's cards with the usage of the pods Volcano counts on it."""
        name = node["metadata"]["name"]
        cards, mode = decode_node_devices((node["metadata"].get("annotations") or {})[REGISTER])
        if not cards:
            return None, ""
        for p in pods:
            ann = p["metadata"].get("annotations") or {}
            on = (p.get("spec") or {}).get("nodeName") or ann.get(VGPU_NODE)
            phase = (p.get("status") or {}).get("phase")
            if on == name and phase not in ("Succeeded", "Failed"):
                charge(cards, p)
        return cards, mode

    def lock(self, node):
        """nodelock.LockNode: refused while the node carries the lock annotation."""
        ann = node["metadata"].get("annotations") or {}
        name = node["metadata"]["name"]
        if NODE_LOCK in ann:
            raise Unschedulable("node %s is locked" % name)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        self._patch_node(name, {NODE_LOCK: stamp}, node["metadata"].get("resourceVersion"))

    def schedule(self, ns, name):
        """Places one pod: (node name, annotations written). Unschedulable otherwise,
        with nothing left behind."""
        pod = self.api.ok("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        nodes = self.api.ok("GET", "/api/v1/nodes")["items"]
        pods = self.api.ok("GET", "/api/v1/pods")["items"]
        best, reasons = None, []
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            if not self._eligible(node):
                continue
            cards, mode = self.cards(node, [p for p in pods if p["metadata"].get("uid") !=
                                            pod["metadata"].get("uid")])
            if cards is None:
                continue
            try:
                devs, score = check_node(pod, cards, mode, self.policy, self.names)
            except Unschedulable as e:
                reasons.append("%s: %s" % (node["metadata"]["name"], e))
                continue
            if best is None or score > best[2]:
                best = (node, devs, score)
        if best is None:
            raise Unschedulable("no node fits pod %s/%s (%s)" % (ns, name,
                                                                 "; ".join(reasons) or
                                                                 "no vGPU node"))
        node, devs, _ = best
        return node["metadata"]["name"], self.bind(pod, node, devs)

    def bind(self, pod, node, devs):
        """Allocate (device_info.go) and the bind: the annotations on the Binding (head) or
        PATCHed first (v1.15). On a failure, release."""
        ns, name = pod["metadata"].get("namespace", "default"), pod["metadata"]["name"]
        node_name = node["metadata"]["name"]
        now = str(int(self.clock()))
        ids = encode_pod_devices(devs)
        annotations = {VGPU_NODE: node_name, VGPU_TIME: now, IDS_NEW: ids, TO_ALLOCATE: ids,
                       BIND_PHASE: "allocating", BIND_TIME: now}
        locked = False
        try:
            if self.node_lock:
                self.lock(node)
                locked = True
            binding = {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": name, "namespace": ns},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}
            if self.generation == "v1.15":
                self.api.ok("PATCH", "/api/v1/namespaces/%s/pods/%s" % (ns, name),
                            {"metadata": {"annotations": annotations}},
                            "application/strategic-merge-patch+json")
            else:
                binding["metadata"]["annotations"] = annotations
            self.api.ok("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (ns, name), binding)
        except Unschedulable:
            self.release(ns, name, node_name if locked else None)
            raise
        return annotations

    def release(self, ns, name, locked_node=None):
        """Deletes the decision unless the device plugin reported success, and the lock
        this placement took."""
        status, pod = self.api.call("GET", "/api/v1/namespaces/%s/pods/%s" % (ns, name))
        ann = (pod or {}).get("metadata", {}).get("annotations") or {} if status == 200 else {}
        if status == 200 and ann.get(BIND_PHASE) != "success" and \
                any(k in ann for k in DECISION_KEYS):
            self.api.call("PATCH", "/api/v1/namespaces/%s/pods/%s" % (ns, name),
                          {"metadata": {"annotations": {k: None for k in DECISION_KEYS}}},
                          "application/merge-patch+json")
        if locked_node is not None:
            self.api.call("PATCH", "/api/v1/nodes/" + locked_node,
                          {"metadata": {"annotations": {NODE_LOCK: None}}},
                          "application/merge-patch+json")


def _stamp(t):
    return time.strftime("%Y.%m.%d %H:%M:%S", time.localtime(t))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--token")
    ap.add_argument("--generation", default="head", choices=("head", "v1.15"))
    ap.add_argument("--policy", default="", choices=("", "binpack", "spread"))
    ap.add_argument("--node-lock", action="store_true")
    ap.add_argument("pods", nargs="+", metavar="NS/POD")
    a = ap.parse_args(argv)
    s = Scheduler(Api(a.server, a.token), a.generation, a.policy, a.node_lock)
    rc = 0
    for ref in a.pods:
        ns, _, name = ref.rpartition("/")
        try:
            node, ann = s.schedule(ns or "default", name)
            print("%s %s %s" % (ref, node, ann[IDS_NEW]))
        except Unschedulable as e:
            print("%s: %s" % (ref, e), file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
