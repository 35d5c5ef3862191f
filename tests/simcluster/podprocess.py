"""A program the process-runtime tests run in pods (stdlib only, so it starts at once):

    podprocess.py serve --host=H --port=P [--tls-cert=F --tls-key=F] [--deny=PREFIX]
    podprocess.py exit CODE

``serve`` answers GET /env (its environment), GET /read?env=NAME (the file named by that variable),
GET /self (its own pod, read from the API server with the in-cluster token and CA under $SA_DIR),
GET /healthz (500 while $SICK is set) and, with --deny, POST /validate as an admission webhook that
refuses objects whose name starts with PREFIX."""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPTIONS: dict[str, str] = {}


class Handler(BaseHTTPRequestHandler):
    def _answer(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        path, _, query = self.path.partition("?")
        if path == "/healthz":
            self._answer(500 if os.environ.get("SICK") else 200, {})
        elif path == "/env":
            self._answer(200, dict(os.environ))
        elif path == "/read":
            with open(os.environ[query.removeprefix("env=")]) as file:
                self._answer(200, {"content": file.read()})
        elif path == "/self":
            self._answer(200, read_own_pod())
        else:
            self._answer(404, {})

    def do_POST(self) -> None:  # noqa: N802
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        name = request["object"]["metadata"].get("name", "")
        allowed = not name.startswith(OPTIONS.get("deny", "\0"))
        response: dict[str, Any] = {"uid": request["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": f"{name} refused by the pod's webhook"}
        self._answer(
            200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        print(format % args, flush=True)


def read_own_pod() -> Any:
    sa_dir = os.environ["SA_DIR"]
    with open(os.path.join(sa_dir, "token")) as file:
        token = file.read()
    with open(os.path.join(sa_dir, "namespace")) as file:
        namespace = file.read()
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/pods/{os.environ['HOSTNAME']}"
    context = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        return json.loads(response.read())


def main() -> None:
    if sys.argv[1] == "exit":
        print(f"exiting with {sys.argv[2]}", flush=True)
        sys.exit(int(sys.argv[2]))
    for arg in sys.argv[2:]:
        key, _, value = arg.removeprefix("--").partition("=")
        OPTIONS[key] = value
    server = ThreadingHTTPServer((OPTIONS["host"], int(OPTIONS["port"])), Handler)
    if "tls-cert" in OPTIONS:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(OPTIONS["tls-cert"], OPTIONS["tls-key"])
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"listening on {OPTIONS['host']}:{OPTIONS['port']}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
