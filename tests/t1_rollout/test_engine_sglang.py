import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from t1_r3 import RoutingMismatchError, encode_routed_experts
from t1_rollout.engine import Engine, EngineError, SamplingParams
from t1_rollout.engine.sglang import SGLangEngine

L, K = 3, 2


class FakeSGLang:
    """A tiny HTTP server answering /generate in SGLang's shapes (meta_info, base64 routed_experts)."""

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        self.status = 200
        self.drop_routing = False
        self.extra_rows = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((self.path, body))
                if fake.status != 200:
                    self.send_response(fake.status)
                    self.end_headers()
                    self.wfile.write(b"overloaded")
                    return
                answer = fake.answer(body) if self.path == "/generate" else {}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body):
        prompt = body["input_ids"]
        out = [prompt[-1] + 1, prompt[-1] + 2, 248046]
        start = body.get("routed_experts_start_len", 0)
        rows = len(prompt) + len(out) - 1 - start + self.extra_rows
        routing = (np.arange(rows * L * K).reshape(rows, L, K) % 8).astype(np.int32)
        meta = {
            "id": "abc",
            "prompt_tokens": len(prompt),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "finish_reason": {"type": "stop", "matched": 248046},
            "weight_version": "7",
            "e2e_latency": 0.01,
            "output_token_logprobs": [[-0.5 - i, t, None] for i, t in enumerate(out)],
        }
        if body.get("return_routed_experts") and not self.drop_routing:
            meta["routed_experts"] = encode_routed_experts(routing)
        return {"text": "x", "output_ids": out, "meta_info": meta}

    def close(self):
        self.server.shutdown()


@pytest.fixture
def fake():
    server = FakeSGLang()
    yield server
    server.close()


async def test_generate_sends_native_request_and_parses_answer(fake):
    engine = SGLangEngine(fake.url, num_layers=L, top_k=K, num_experts=8, weight_version=7)  # fake serves "7"
    assert isinstance(engine, Engine)
    gen = await engine.generate(
        [5, 6, 7, 8],
        SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=16, stop_token_ids=(248046,), seed=3),
        routed_experts_start_len=2,
    )
    path, body = fake.requests[0]
    assert path == "/generate" and body["input_ids"] == [5, 6, 7, 8]
    assert body["return_logprob"] is True and body["return_routed_experts"] is True
    assert body["routed_experts_start_len"] == 2
    assert body["sampling_params"] == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "max_new_tokens": 16,
        "stop_token_ids": [248046],
        "sampling_seed": 3,
    }
    assert gen.output_ids == [9, 10, 248046] and gen.output_logprobs == [-0.5, -1.5, -2.5]
    assert gen.routed_experts.shape == (4 + 3 - 1 - 2, L, K) and gen.routed_experts.dtype == np.uint8  # E = 8
    assert gen.routed_experts[0, 0].tolist() == [0, 1]
    assert gen.weight_version == 7 and gen.finish_reason == "stop" and gen.routed_experts_start_len == 2


async def test_missing_routing_is_a_routing_error(fake):
    fake.drop_routing = True
    engine = SGLangEngine(fake.url, num_layers=L, top_k=K, weight_version=7)
    with pytest.raises(RoutingMismatchError, match="enable-return-routed-experts"):
        await engine.generate([1, 2], SamplingParams())


async def test_misaligned_rows_are_a_routing_error(fake):
    fake.extra_rows = 1
    engine = SGLangEngine(fake.url, num_layers=L, top_k=K, weight_version=7)
    with pytest.raises(RoutingMismatchError, match="rows"):
        await engine.generate([1, 2], SamplingParams())


async def test_wrong_layer_count_is_a_routing_error(fake):
    engine = SGLangEngine(fake.url, num_layers=4, top_k=K, weight_version=7)  # server's model has L = 3
    with pytest.raises(RoutingMismatchError):
        await engine.generate([1, 2, 3, 4], SamplingParams())


async def test_http_failure_is_an_engine_error(fake):
    fake.status = 503
    engine = SGLangEngine(fake.url, num_layers=L, top_k=K)
    with pytest.raises(EngineError, match="HTTP 503: overloaded"):
        await engine.generate([1, 2], SamplingParams())


async def test_unreachable_server_is_an_engine_error():
    engine = SGLangEngine("http://127.0.0.1:9", num_layers=L, top_k=K, timeout_s=2)
    with pytest.raises(EngineError, match="unreachable"):
        await engine.generate([1, 2], SamplingParams())


def test_pause_and_resume_call_sglang_endpoints(fake):
    engine = SGLangEngine(fake.url, num_layers=L, top_k=K)
    engine.pause()
    engine.resume()
    assert [p for p, _ in fake.requests] == ["/pause_generation", "/continue_generation"]
    assert fake.requests[0][1] == {"mode": "abort"}


def test_update_weights_needs_pause_and_a_publisher(fake):
    # update_weights is built now (tests/t1_rollout/test_sglang_engine.py); without a pause it is refused
    from t1_rollout.engine import EngineStateError

    engine = SGLangEngine(fake.url, num_layers=L, top_k=K)
    with pytest.raises(EngineStateError, match="not paused"):
        engine.update_weights({}, weight_version=1)
    engine.pause()
    with pytest.raises(EngineError, match="weight publisher"):
        engine.update_weights({}, weight_version=1)


def test_min_p_reaches_sglang_only_when_on():
    def params(**kw):
        return SGLangEngine.request_payload(
            [1, 2],
            SamplingParams(**kw),
            return_logprob=True,
            return_routed_experts=False,
            routed_experts_start_len=0,
        )["sampling_params"]

    assert "min_p" not in params()
    assert params(min_p=0.05, top_k=20)["min_p"] == 0.05 and params(min_p=0.05, top_k=20)["top_k"] == 20
