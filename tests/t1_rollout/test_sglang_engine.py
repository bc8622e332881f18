"""The SGLang engine against a local fake server: requests, answers, version checks, publication order."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from t1_r3 import RoutingMismatchError, encode_routed_experts
from t1_rollout.engine import Engine, EngineError, EngineStateError, SamplingParams
from t1_rollout.engine.sglang import SGLangEngine, SGLangReplicas
from t1_rollout.engine.sglang.weights import (
    DiskPublisher,
    DistributedPublisher,
    TensorPublisher,
    apply_update,
    buckets,
)

L, K, E = 3, 2, 8
REPO = Path(__file__).resolve().parents[2]
WEIGHT_ENDPOINTS = (
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/init_weights_update_group",
    "/update_weights_from_distributed",
)


class FakeSGLang:
    """Loopback server answering SGLang's native endpoints in their recorded JSON shapes.

    It keeps a weight version (the label its answers carry), checks every request body it gets, and logs
    (path, body) in arrival order; ``fail`` names weight endpoints that answer ``success: false``.
    """

    def __init__(self, version="0"):
        self.log: list[tuple[str, dict]] = []
        self.version = version
        self.fail: set[str] = set()
        self.extra_rows = 0
        self.layers = L
        self.bad_requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, answer):
                data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.log.append((self.path, {}))
                if self.path in ("/health", "/health_generate"):
                    return self._send(200, "")
                if self.path == "/get_model_info":
                    return self._send(
                        200, {"model_path": "/m", "is_generation": True, "weight_version": fake.version}
                    )
                self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.log.append((self.path, body))
                status, answer = fake.handle(self.path, body)
                self._send(status, answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self):
        return [p for p, _ in self.log]

    def handle(self, path, body):
        if path == "/generate":
            return self.generate(body)
        if path in ("/pause_generation", "/continue_generation"):
            return 200, {}
        if path == "/flush_cache":
            return 200, "Cache flushed.\nPlease check backend logs for more details."
        if path == "/update_weight_version":
            self.version = body["new_version"]
            return 200, {"success": True, "new_version": body["new_version"]}
        if path in WEIGHT_ENDPOINTS:
            if path in self.fail:
                return 200, {"success": False, "message": "Failed to update weights: shape mismatch"}
            problem = self.check_update(path, body)
            if problem:
                self.bad_requests.append(problem)
                return 400, {"success": False, "message": problem}
            if "weight_version" in body:
                self.version = body["weight_version"]
            return 200, {"success": True, "message": "Succeeded to update model weights."}
        return 404, {"detail": "Not Found"}

    @staticmethod
    def check_update(path, body):
        if path == "/update_weights_from_distributed":
            n = len(body["names"])
            if not (n == len(body["dtypes"]) == len(body["shapes"])) or not body["group_name"]:
                return "names, dtypes and shapes differ in length"
        if path == "/init_weights_update_group":
            keys = {"master_address", "master_port", "rank_offset", "world_size", "group_name", "backend"}
            if set(body) != keys:
                return f"init_weights_update_group keys {sorted(body)}"
        if path == "/update_weights_from_disk" and not body.get("model_path"):
            return "no model_path"
        if path == "/update_weights_from_tensor" and not isinstance(
            body.get("serialized_named_tensors"), list
        ):
            return "serialized_named_tensors is not a list"
        return None

    def generate(self, body):
        prompt = body["input_ids"]
        if not all(isinstance(i, int) for i in prompt) or "text" in body:
            return 400, {"error": "input_ids must be ints and no text"}
        out = [prompt[-1] + 1, prompt[-1] + 2, 248046][: body["sampling_params"]["max_new_tokens"]]
        start = body.get("routed_experts_start_len", 0)
        rows = len(prompt) + len(out) - 1 - start + self.extra_rows
        routing = (np.arange(rows * self.layers * K).reshape(rows, self.layers, K) % E).astype(np.int32)
        meta = {
            "id": "abc",
            "prompt_tokens": len(prompt),
            "completion_tokens": len(out),
            "cached_tokens": 0,
            "finish_reason": {"type": "length"} if len(out) < 3 else {"type": "stop", "matched": 248046},
            "weight_version": self.version,
            "e2e_latency": 0.01,
            "output_token_logprobs": [[-0.5 - i, t, None] for i, t in enumerate(out)],
        }
        if body.get("return_routed_experts"):
            meta["routed_experts"] = encode_routed_experts(routing)
        return 200, {"text": "", "output_ids": out, "meta_info": meta}

    def close(self):
        self.server.shutdown()


@pytest.fixture
def fake():
    server = FakeSGLang()
    yield server
    server.close()


def client(fake, **kw):
    return SGLangEngine(fake.url, num_layers=L, top_k=K, num_experts=E, **kw)


async def test_answer_of_the_expected_version_is_parsed_with_its_routing(fake):
    gen = await client(fake).generate(
        [5, 6, 7, 8], SamplingParams(max_new_tokens=16), routed_experts_start_len=1
    )
    assert gen.weight_version == 0 and gen.output_ids == [9, 10, 248046]
    assert gen.routed_experts.shape == (4 + 3 - 1 - 1, L, K)  # rows = tokens - 1 - start_len
    assert gen.routed_experts[1].ravel().tolist() == [6, 7, 0, 1, 2, 3]  # arange % 8, row 1
    body = fake.log[0][1]
    assert body["input_ids"] == [5, 6, 7, 8] and body["return_logprob"] is True
    assert body["return_routed_experts"] is True and body["routed_experts_start_len"] == 1


async def test_answer_of_another_weight_version_is_refused_naming_both(fake):
    fake.version = "3"
    with pytest.raises(EngineError, match=r"weight_version '3' but T1 expects version 0"):
        await client(fake).generate([1, 2], SamplingParams())


async def test_answer_without_weight_version_is_refused(fake):
    fake.version = None
    with pytest.raises(EngineError, match="no meta_info.weight_version"):
        await client(fake).generate([1, 2], SamplingParams())


async def test_routing_rows_not_tokens_minus_one_are_refused_on_arrival(fake):
    fake.extra_rows = -1  # one row short: the last prompt token's routing missing
    with pytest.raises(RoutingMismatchError, match="rows"):
        await client(fake).generate([1, 2, 3], SamplingParams())


def test_server_of_another_model_fails_the_model_check(fake):
    from t1_rollout.engine.sglang.launch import check_model, wait_ready

    fake.layers = 5  # serves L = 5, the recipe says L = 3
    server = client(fake)
    wait_ready(server, grace_s=5)
    with pytest.raises(EngineError, match=r"does not serve the recipe's model \(L = 3, k = 2"):
        check_model(server)


def test_readiness_deadline_is_the_liveness_grace():
    from t1_rollout.engine.sglang.launch import wait_ready

    server = SGLangEngine("http://127.0.0.1:9", num_layers=L, top_k=K, probe_deadline_s=0.2)
    with pytest.raises(EngineError, match=r"not ready within liveness.probe_grace_s = 0.5 s"):
        wait_ready(server, grace_s=0.5, period_s=0.1)


class RecordingPublisher:
    def __init__(self, log, fail=False):
        self.log, self.fail = log, fail

    def publish(self, servers, state_dict, weight_version):
        self.log.append(("publish", weight_version))
        if self.fail:
            raise EngineError("transfer failed")


def test_publication_pauses_updates_flushes_and_continues_in_that_order(fake):
    from t1_trainer.publish import publish_weights

    class Backend:
        def export_weights(self):
            return {"w": torch.ones(2)}

    engine = client(fake, publisher=disk_stub())
    publish_weights(Backend(), [engine])
    assert fake.paths() == [
        "/pause_generation",
        "/update_weights_from_disk",
        "/flush_cache",
        "/continue_generation",
    ]
    assert engine.weight_version == 1 and fake.version == "1"


def disk_stub():
    import tempfile

    return DiskPublisher(tempfile.mkdtemp(), lambda sd, path: path.mkdir(parents=True))


def test_failed_update_still_continues_and_the_server_is_refused_until_fixed(fake):
    from t1_trainer.publish import publish_weights

    class Backend:
        def export_weights(self):
            return {"w": torch.ones(2)}

    fake.fail.add("/update_weights_from_disk")
    engine = client(fake, publisher=disk_stub())
    with pytest.raises(EngineError, match="shape mismatch"):
        publish_weights(Backend(), [engine])
    assert fake.paths() == ["/pause_generation", "/update_weights_from_disk", "/continue_generation"]
    assert engine.weight_version == 0 and "version 1 failed" in engine.broken
    with pytest.raises(EngineError, match="serves no usable weights"):
        asyncio.run(engine.generate([1, 2], SamplingParams()))
    fake.fail.clear()
    publish_weights(Backend(), [engine])  # a later update that succeeds makes it usable again
    assert engine.broken is None and engine.weight_version == 1
    assert asyncio.run(engine.generate([1, 2], SamplingParams())).weight_version == 1


def test_update_while_generating_is_refused(fake):
    with pytest.raises(EngineStateError, match="not paused"):
        apply_update([client(fake)], RecordingPublisher([]), {}, weight_version=1)


def test_disk_update_writes_the_version_then_the_server_loads_it(fake, tmp_path):
    written = []

    def write(state_dict, path):
        path.mkdir(parents=True)
        written.append((sorted(state_dict), path))

    engine = client(fake, publisher=DiskPublisher(tmp_path, write))
    (tmp_path / "v0").mkdir()
    engine.pause()
    engine.update_weights({"a": torch.zeros(1)}, weight_version=1)
    assert written == [(["a"], tmp_path / "v1")]
    body = dict(fake.log)["/update_weights_from_disk"]
    assert body == {
        "model_path": str(tmp_path / "v1"),
        "flush_cache": True,
        "abort_all_requests": False,
        "weight_version": "1",
    }
    assert not (tmp_path / "v0").exists()  # the previous version is removed once the new one is served


def test_buckets_respect_the_byte_size_and_keep_order():
    sd = {f"p{i}": torch.zeros(n, dtype=torch.float32) for i, n in enumerate([10, 10, 30, 5, 5])}
    got = [[n for n, _ in b] for b in buckets(sd, bucket_bytes=80)]  # 4 B per element
    assert got == [["p0", "p1"], ["p2"], ["p3", "p4"]]  # p2 (120 B) alone, above the size


class FakeBroadcaster:
    master_address, master_port = "10.0.0.1", 29555

    def __init__(self):
        self.groups, self.sent = [], []

    def init_group(self, world_size, group_name):
        self.groups.append((world_size, group_name))

    def broadcast(self, bucket, group_name):
        self.sent.append([n for n, _ in bucket])


def test_distributed_update_forms_one_group_then_sends_each_bucket(fake):
    second = FakeSGLang()
    try:
        b = FakeBroadcaster()
        pub = DistributedPublisher(b, bucket_bytes=16)
        servers = [client(fake, tp=2), client(second, tp=4)]
        for s in servers:
            s.pause()
        sd = {"x": torch.zeros(2, 2, dtype=torch.bfloat16), "y": torch.zeros(4), "z": torch.zeros(1)}
        apply_update(servers, pub, sd, weight_version=1)
        apply_update(servers, pub, sd, weight_version=2)
        assert b.groups == [(1 + 2 + 4, "t1_weight_update")]  # trainer rank 0 + every TP rank, once
        inits = [body for p, body in fake.log + second.log if p == "/init_weights_update_group"]
        assert sorted(i["rank_offset"] for i in inits) == [1, 3] and {i["world_size"] for i in inits} == {7}
        assert inits[0]["master_address"] == "10.0.0.1" and inits[0]["backend"] == "nccl"
        assert b.sent == [["x"], ["y"], ["z"]] * 2  # 8 B, 16 B, 4 B against 16 B buckets
        updates = [body for p, body in fake.log if p == "/update_weights_from_distributed"]
        assert [u["names"] for u in updates[:3]] == b.sent[:3]
        assert updates[0]["dtypes"] == ["bfloat16"] and updates[0]["shapes"] == [[2, 2]]
        assert [u.get("weight_version") for u in updates[:3]] == [None, None, "1"]  # label with the last
        assert [u["flush_cache"] for u in updates[:3]] == [False, False, True]
        assert fake.paths()[-1] == "/flush_cache" and fake.version == second.version == "2"
        assert fake.bad_requests == second.bad_requests == []
    finally:
        second.close()


def test_tensor_update_serializes_each_bucket_per_tp_rank(fake):
    calls = []

    def serialize(named):
        calls.append([n for n, _ in named])
        return "b64:" + ",".join(n for n, _ in named)

    engine = client(fake, tp=2, publisher=TensorPublisher(serialize, bucket_bytes=1 << 20))
    engine.pause()
    engine.update_weights({"a": torch.zeros(3), "b": torch.zeros(3)}, weight_version=4)
    body = dict(fake.log)["/update_weights_from_tensor"]
    assert body["serialized_named_tensors"] == ["b64:a,b", "b64:a,b"] and body["weight_version"] == "4"
    assert calls == [["a", "b"], ["a", "b"]]
    assert fake.paths()[-1] == "/flush_cache" and engine.weight_version == 4


async def test_replicas_keep_a_trajectory_on_one_server_and_spread_new_ones(fake):
    second = FakeSGLang()
    try:
        replicas = SGLangReplicas([client(fake), client(second)], publisher=None)
        assert isinstance(replicas, Engine)

        async def trajectory():
            for _ in range(3):
                await replicas.generate([1, 2], SamplingParams(max_new_tokens=1))
                await asyncio.sleep(0)

        await asyncio.gather(trajectory(), trajectory())
        per_server = [fake.paths().count("/generate"), second.paths().count("/generate")]
        assert per_server == [3, 3]  # one trajectory each, all three turns on its server
        replicas.close()
    finally:
        second.close()


def test_replicas_from_spec_join_running_servers_and_label_version_zero(tiny_model_spec, tmp_path):
    from t1_policy import build_model
    from t1_spec import load_recipe

    servers = [FakeSGLang(version="default"), FakeSGLang(version="default")]
    for s in servers:
        s.layers = 4  # tiny-cpu's L = 4
    try:
        recipe = load_recipe(
            REPO / "recipes" / "tiny-cpu.yaml",
            [
                "engine.kind=sglang",
                f"engine.urls=[{servers[0].url},{servers[1].url}]",
                "engine.replicas=2",
                "engine.weight_sync=disk",
                f"engine.weights_dir={tmp_path}",
            ],
        )
        model = build_model(recipe.model, seed=0)
        engine = SGLangReplicas.from_spec(recipe.engine, model=model, seed=0, recipe=recipe)
        try:
            assert engine.weight_version == 0 and [s.num_layers for s in engine.servers] == [4, 4]
            for s in servers:
                assert s.paths()[:3] == ["/health_generate", "/update_weight_version", "/generate"]
                assert s.version == "0"
            engine.pause()
            engine.update_weights(model.state_dict(), weight_version=1)
            assert (tmp_path / "v1" / "config.json").exists()  # HF checkpoint written once for both
            assert [s.paths()[-2:] for s in servers] == [["/update_weights_from_disk", "/flush_cache"]] * 2
        finally:
            engine.close()
    finally:
        for s in servers:
            s.close()
