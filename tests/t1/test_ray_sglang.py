"""SGLang replicas on Ray without a cluster: the spec rule, the preflight and each actor's one server."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.run.ray.actors import replica_recipe
from t1.run.ray.placement import placement_for, ray_problems
from t1_spec import RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"
JOINED = [
    "engine.kind=sglang",
    "engine.urls=[http://10.0.0.1:30000,http://10.0.0.2:30000/]",
    "engine.replicas=2",
    "engine.weight_sync=disk",
    "engine.weights_dir=/shared/w",
]


def test_sglang_replicas_must_match_the_ray_engine_replicas_naming_both():
    with pytest.raises(RecipeError, match="runtime.ray.engine_replicas is 3 and engine.replicas is 2"):
        load_recipe(TINY_RAY, [*JOINED, "runtime.ray.engine_replicas=3"])


def test_joined_servers_with_disk_sync_pass_the_ray_preflight_on_cpu_bundles():
    recipe = load_recipe(TINY_RAY, JOINED)
    assert not [line for line in ray_problems(recipe) if "sglang" in line.lower()]
    assert placement_for(recipe).bundles == ({"CPU": 1.0},) * 4  # a replica is a client: one CPU


@pytest.mark.parametrize("sync", ["distributed", "tensor"])
def test_other_weight_syncs_on_ray_are_refused_with_the_reason(sync):
    recipe = load_recipe(TINY_RAY, [*JOINED, f"engine.weight_sync={sync}"])
    (line,) = [line for line in ray_problems(recipe) if line.startswith("engine.weight_sync")]
    assert f"'{sync}' on Ray" in line and "use engine.weight_sync: disk" in line


def test_each_replica_actor_takes_its_own_url_and_weights_directory():
    recipe = load_recipe(TINY_RAY, JOINED)
    engines = [replica_recipe(recipe, i).engine for i in (0, 1)]
    assert [e.urls for e in engines] == [["http://10.0.0.1:30000"], ["http://10.0.0.2:30000/"]]
    assert [e.replicas for e in engines] == [1, 1]
    assert [e.weights_dir for e in engines] == ["/shared/w/replica-0", "/shared/w/replica-1"]
    embedded = load_recipe(TINY_RAY)
    assert replica_recipe(embedded, 1) is embedded
