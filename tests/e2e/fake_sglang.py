"""A loopback stand-in for one SGLang server, enough for a T1 run to join it by URL.

It answers the native endpoints T1 calls, in their recorded JSON shapes: ``/health_generate``,
``/update_weight_version``, ``/generate`` (ids out, one log-prob per id, routing rows of ``prompt + output -
1 - start_len`` rows of ``[L, k]``, the weight version it holds), pause, continue, flush and
``/update_weights_from_disk`` (which must name a written HF checkpoint). What it does not do: run a model.
Its output ids are fixed and its log-probs and routing are made up, so a run against it checks the loop's
plumbing (joining, versions, publication), not the sampler's numbers.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from t1_r3 import encode_routed_experts


class FakeSGLangServer:
    """One fake server on ``127.0.0.1`` (a free port); ``url`` is its base URL.

    Args:
        layers: L of the recipe's model (rows are ``[L, k]``).
        top_k: k of the recipe's model.
        experts: E of the recipe's model (expert ids lie below it).
        output_ids: the ids every answer starts with; the request's first stop id ends it.

    Attributes:
        generated: ``/generate`` requests answered (the model check's probe included).
        versions: the weight versions loaded by ``/update_weights_from_disk``, in order.
        log: the paths requested, in order.
    """

    def __init__(self, *, layers: int, top_k: int, experts: int, output_ids: tuple[int, ...] = (16, 17)):
        self.layers, self.top_k, self.experts = layers, top_k, experts
        self.output_ids = list(output_ids)
        self.version = "default"
        self.generated = 0
        self.versions: list[str] = []
        self.problems: list[str] = []
        self.log: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def send(self, status, answer):
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.log.append(self.path)
                self.send(200, "") if self.path in ("/health", "/health_generate") else self.send(404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                with fake._lock:
                    fake.log.append(self.path)
                    self.send(*fake.handle(self.path, body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, path: str, body: dict) -> tuple[int, object]:
        if path == "/generate":
            return self.generate(body)
        if path in ("/pause_generation", "/continue_generation"):
            return 200, {}
        if path == "/flush_cache":
            return 200, "Cache flushed."
        if path == "/update_weight_version":
            self.version = body["new_version"]
            return 200, {"success": True, "new_version": self.version}
        if path == "/update_weights_from_disk":
            if not (Path(body["model_path"]) / "config.json").exists():
                self.problems.append(f"no HF checkpoint at {body['model_path']}")
                return 400, {"success": False, "message": "no checkpoint"}
            self.version = body["weight_version"]
            self.versions.append(self.version)
            return 200, {"success": True, "message": "Succeeded to update model weights."}
        return 404, {"detail": "Not Found"}

    def generate(self, body: dict) -> tuple[int, object]:
        prompt, params = body["input_ids"], body["sampling_params"]
        stops = params.get("stop_token_ids") or []
        out = (self.output_ids + stops[:1])[: params["max_new_tokens"]]
        start = body.get("routed_experts_start_len", 0)
        rows = len(prompt) + len(out) - 1 - start
        routing = np.arange(rows * self.layers * self.top_k).reshape(rows, self.layers, self.top_k)
        meta = {
            "prompt_tokens": len(prompt),
            "completion_tokens": len(out),
            "finish_reason": {"type": "stop"} if out and out[-1] in stops else {"type": "length"},
            "weight_version": self.version,
            "output_token_logprobs": [[-0.5, t, None] for t in out],
        }
        if body.get("return_routed_experts"):
            meta["routed_experts"] = encode_routed_experts((routing % self.experts).astype(np.int32))
        self.generated += 1
        return 200, {"output_ids": out, "meta_info": meta}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
