"""A minimal stand-in for the API server's resource.k8s.io/v1 ResourceClaims, for the DRA
plugin's tests: GET /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME answers
the claim put there (404 with a Status otherwise) and counts the reads. Standard library
only; runs in a thread of the test.
"""
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = re.compile(r"^/apis/resource\.k8s\.io/v1/namespaces/([^/]+)/resourceclaims/([^/?]+)$")


class ClaimsApi:
    def __init__(self):
        self.claims = {}  # (namespace, name) -> object
        self.gets = {}  # (namespace, name) -> count
        self.lock = threading.Lock()
        self.delay = 0.0  # seconds each answer waits (concurrency tests)
        self.delays = {}  # (namespace, name) -> seconds that claim's answer waits
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections kept, as the API server does
            disable_nagle_algorithm = True  # headers and body leave at once

            def log_message(self, *args):
                pass

            def do_GET(self):
                m = PATH.match(self.path)
                obj = None
                if m:
                    key = (m.group(1), m.group(2))
                    with api.lock:
                        api.gets[key] = api.gets.get(key, 0) + 1
                        obj = api.claims.get(key)
                wait = api.delays.get(key, api.delay) if m else api.delay
                if wait:
                    threading.Event().wait(wait)
                if obj is None:
                    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "resourceclaims not found", "reason": "NotFound",
                            "code": 404}
                    code = 404
                else:
                    body, code = obj, 200
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # many claims read at once: no SYN dropped

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, obj):
        m = obj["metadata"]
        with self.lock:
            self.claims[(m["namespace"], m["name"])] = obj

    def get_count(self, namespace, name):
        with self.lock:
            return self.gets.get((namespace, name), 0)

    def kubeconfig(self, path):
        with open(path, "w") as f:
            f.write("apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                    "clusters:\n- name: c\n  cluster:\n    server: %s\n"
                    "contexts:\n- name: t\n  context:\n    cluster: c\n    user: u\n"
                    "users:\n- name: u\n  user:\n    token: x\n" % self.url)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def claim(uid, name, results, namespace="default", allocated=True):
    """A ResourceClaim object as the scheduler leaves it."""
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"namespace": namespace, "name": name, "uid": uid},
           "spec": {"devices": {"requests": []}}, "status": {}}
    if allocated:
        obj["status"]["allocation"] = {"devices": {"results": results}}
    return obj
