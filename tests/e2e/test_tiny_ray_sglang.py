"""`recipes/tiny-ray.yaml` with ``engine.kind: sglang``: each Ray engine replica joins one server by URL.

Two fake servers (`fake_sglang.FakeSGLangServer`) stand in for SGLang: replica i is the client of
``engine.urls[i]``, every trial generates on its replica's server, and each publication reaches every server
through the SGLang client's own ``disk`` update (paused, loaded, flushed, resumed) under the trainer's next
version. The fakes run no model: their log-probs and routing are made up, so the run checks joining,
versions and publication, not what is learned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_sglang import FakeSGLangServer  # noqa: E402  (a helper module beside this test)

pytestmark = [pytest.mark.e2e, pytest.mark.ray]


def test_ray_replicas_join_sglang_servers_by_url_and_publish_to_each(
    tmp_path, tiny_ray, no_ray_left, rows_of
):
    servers = [FakeSGLangServer(layers=4, top_k=2, experts=8) for _ in range(2)]  # tiny-cpu's L, k, E
    try:
        run, summary = tiny_ray(
            tmp_path / "runs",
            [
                "engine.kind=sglang",
                f"engine.urls=[{servers[0].url},{servers[1].url}]",
                "engine.replicas=2",
                "engine.weight_sync=disk",
                f"engine.weights_dir={tmp_path / 'weights'}",
                "ppo.steps=2",
            ],
        )
    finally:
        for s in servers:
            s.close()
    assert json.loads((summary.run_dir / "status.json").read_text())["status"] == "finished"
    rows = rows_of(summary.run_dir)
    assert [row["weight_version_after"] for row in rows] == [1, 2]
    assert all(min(row["replica_requests"]) > 0 for row in rows)  # both replicas served every step
    for i, s in enumerate(servers):
        assert s.problems == []
        assert s.generated > 1, f"server {i} answered only the model check"  # the probe is one request
        assert s.versions == ["1", "2"]  # each publication reached this server, in order
        assert s.log[:3] == ["/health_generate", "/update_weight_version", "/generate"]  # joined as v0
        loads = [j for j, p in enumerate(s.log) if p == "/update_weights_from_disk"]
        for j in loads:  # quiesced around every load, the prefix cache flushed after it
            assert s.log[j - 1] == "/pause_generation" and s.log[j + 1 : j + 3] == [
                "/flush_cache",
                "/continue_generation",
            ]
        assert (tmp_path / "weights" / f"replica-{i}" / "v2" / "config.json").exists()
    no_ray_left(run)
