"""The project's service under test: a tiny HTTP JSON API that also reads YAML (PyYAML,
which the image's recipe installs: service.toml).

python3 app.py PORT
"""

import json
import platform
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import yaml


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            versions = {"python": platform.python_version(), "yaml": yaml.__version__}
            self._answer(200, {"status": "ok", **versions})
        else:
            self._answer(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.headers.get("Content-Type") == "application/yaml":
            self._answer(200, {"echo": yaml.safe_load(body)})
        else:
            self._answer(200, {"echo": json.loads(body or b"null")})


if __name__ == "__main__":
    HTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
