"""The runtime section: which loop runs a recipe, what each refuses, and how a Ray run is placed (no Ray)."""

from pathlib import Path

import pytest

from t1.run.preflight import preflight
from t1.run.ray.placement import placement_for
from t1.run.runtimes import RUNTIMES, runtime_problems
from t1_spec import RuntimeSpec, load_recipe

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "tiny-cpu.yaml"
TINY_RAY = REPO / "recipes" / "tiny-ray.yaml"


def test_default_runtime_keeps_every_recipe_embedded_and_sync():
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        if not path.name.startswith("tiny-ray"):
            assert recipe.runtime == RuntimeSpec(), path.name
    assert RuntimeSpec().kind == "embedded" and RuntimeSpec().mode == "sync"


def test_registry_names_both_runtimes():
    assert RUNTIMES.kinds() == ("embedded", "ray")
    assert RUNTIMES.load("embedded").__name__ == "InProcessRuntime"
    assert RUNTIMES.load("ray").__name__ == "RayRuntime"


def test_embedded_refuses_async_with_the_reason():
    recipe = load_recipe(TINY, ["runtime.mode=async"])
    (line,) = runtime_problems(recipe)
    assert line.startswith("runtime.mode 'async'")
    assert "one process" in line and "runtime.kind to ray" in line
    assert line in preflight(recipe).problems


def test_tiny_ray_passes_the_preflight():
    verdict = preflight(load_recipe(TINY_RAY))
    assert verdict.ok, verdict.message()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("engine.device=cuda", "engine.device 'cuda'"),
        # data-parallel ranks: the torch backend and GAE only, and at least one sample per rank
        ("runtime.ray.trainer_workers=3", "runtime.ray.trainer_workers 3: rollout.admitted 2 samples"),
        (
            "runtime.ray.trainer_workers=2 ppo.advantage.estimator=grpo ppo.advantage.group_size=2 "
            "ppo.samples_per_task=2 rollout.launched=4 rollout.admitted=4 critic_warmup.enabled=false",
            "runtime.ray.trainer_workers 2: advantage.estimator 'grpo' over ranks is not built",
        ),
    ],
)
def test_ray_refuses_what_it_does_not_run_by_name(override, field):
    lines = runtime_problems(load_recipe(TINY_RAY, override.split()))
    assert any(line.startswith(field) for line in lines), lines


def test_data_parallel_ranks_of_the_megatron_backend_are_refused_by_name():
    recipe = load_recipe(
        REPO / "recipes" / "t1-122b.yaml",
        ["runtime.kind=ray", "runtime.ray.engine_replicas=8", "runtime.ray.trainer_workers=2"],
    )
    lines = runtime_problems(recipe)
    refused = "runtime.ray.trainer_workers 2: data-parallel ranks are built for trainer.backend 'torch' only"
    assert any(line.startswith(refused) for line in lines), lines


def test_two_trainer_ranks_pass_the_preflight_and_the_dp2_recipe_is_tiny_ray_with_two_ranks():
    dp2 = load_recipe(REPO / "recipes" / "tiny-ray-dp2.yaml")
    assert dp2.runtime.ray.trainer_workers == 2 and dp2.runtime.mode == "async"
    assert dp2.runtime.max_staleness == 1
    verdict = preflight(dp2)
    assert verdict.ok, verdict.message()
    assert not runtime_problems(load_recipe(TINY_RAY, ["runtime.ray.trainer_workers=2"]))


def test_the_rendezvous_port_is_a_tcp_port_or_zero():
    from t1_spec import RecipeError

    assert load_recipe(TINY_RAY, ["runtime.ray.trainer_port=29500"]).runtime.ray.trainer_port == 29500
    for bad in ("-1", "65536"):
        with pytest.raises(RecipeError, match="trainer_port"):
            load_recipe(TINY_RAY, [f"runtime.ray.trainer_port={bad}"])
    with pytest.raises(RecipeError, match="trainer_address"):
        load_recipe(TINY_RAY, ["runtime.ray.trainer_address=''"])


def test_the_rendezvous_address_is_a_host_without_scheme_or_port():
    from t1_spec import RecipeError

    for good in ("10.0.0.7", "::1", "fe80::1", "head-0", "head-0.cluster.local", "node7."):
        recipe = load_recipe(TINY_RAY, [f"runtime.ray.trainer_address='{good}'"])
        assert recipe.runtime.ray.trainer_address == good
    for bad in ("tcp://10.0.0.7", "10.0.0.7:29500", "head 0", "-head", "head_0", "a..b", "x" * 64):
        with pytest.raises(RecipeError, match="trainer_address.*not an IP address or a DNS host name"):
            load_recipe(TINY_RAY, [f"runtime.ray.trainer_address='{bad}'"])


def test_ray_runs_checkpoints_and_their_resume():
    recipe = load_recipe(TINY_RAY, ["trainer.checkpoint_every=1", "trainer.checkpoint_optimizer=true"])
    assert not any("checkpoint" in line for line in runtime_problems(recipe))
    assert preflight(recipe).ok


def test_ray_refuses_a_local_cluster_smaller_than_its_placement_group():
    # tiny-ray places 2 engine replicas + 1 trainer worker + 1 sandbox host, one logical CPU each
    lines = runtime_problems(load_recipe(TINY_RAY, ["runtime.ray.num_cpus=3"]))
    assert any(line.startswith("runtime.ray.num_cpus 3: the local cluster needs 4 ") for line in lines), lines
    assert not any(
        line.startswith("runtime.ray.num_cpus")
        for line in runtime_problems(load_recipe(TINY_RAY, ["runtime.ray.num_cpus=4"]))
    )
    # a joined cluster's size is not this recipe's to check: num_cpus is ignored with an address
    joined = load_recipe(TINY_RAY, ["runtime.ray.num_cpus=1", "runtime.ray.address=auto"])
    assert not any(line.startswith("runtime.ray.num_cpus") for line in runtime_problems(joined))


def test_an_empty_ray_address_is_invalid_input_not_a_join():
    from t1_spec import RecipeError

    with pytest.raises(RecipeError, match="runtime.ray.address"):
        load_recipe(TINY_RAY, ["runtime.ray.address=''"])
    assert load_recipe(TINY_RAY, ["runtime.ray.address=auto"]).runtime.ray.address == "auto"


def test_ray_with_sglang_servers_to_launch_is_refused_by_name():
    from t1.run.ray.runtime import RayRuntime

    recipe = load_recipe(
        REPO / "recipes" / "t1-122b.yaml", ["runtime.kind=ray", "runtime.ray.engine_replicas=8"]
    )
    lines = RayRuntime.preflight(recipe)
    assert any(line.startswith("engine.kind 'sglang' on Ray with no engine.urls") for line in lines)
    assert any(line.startswith("engine.weight_sync 'distributed' on Ray") for line in lines)


def test_ray_runs_evaluation_during_training():
    evaluating = "evaluation.enabled=true evaluation.suites=[builtin:mini] evaluation.context_tokens=4096"
    lines = runtime_problems(load_recipe(TINY_RAY, evaluating.split()))
    assert not any(line.startswith("evaluation") for line in lines), lines


def test_placement_has_one_cpu_bundle_per_actor_on_a_cpu_box():
    placement = placement_for(load_recipe(TINY_RAY))
    # 2 engine replicas, 1 trainer worker, 1 sandbox host (the recipe's runtime.ray)
    assert placement.roles == {"engine": (0, 1), "trainer": (2,), "sandbox": (3,)}
    assert placement.bundles == ({"CPU": 1.0},) * 4
    assert placement.num_cpus == 4 and placement.num_gpus == 0


def test_placement_gives_the_trainer_the_training_partition_on_cuda():
    recipe = load_recipe(
        TINY_RAY,
        [
            "trainer.device=cuda",
            "plan.devices=4",
            "plan.dp=4",
            "ppo.batch_size=4",
            "rollout.launched=5",
            "runtime.ray.sandbox_hosts=3",
        ],
    )
    placement = placement_for(recipe)
    (trainer,) = placement.roles["trainer"]
    # G - n = 4 - 0 training devices (T1 §7); the embedded replicas stay on CPU bundles
    assert placement.bundles[trainer] == {"CPU": 1.0, "GPU": 4.0}
    assert all("GPU" not in placement.bundles[i] for i in placement.roles["engine"])
    assert len(placement.roles["sandbox"]) == 3


def test_placement_splits_the_training_partition_over_the_trainer_ranks_on_cuda():
    cuda = ["trainer.device=cuda", "plan.devices=4", "plan.dp=4", "ppo.batch_size=4", "rollout.launched=5"]
    placement = placement_for(load_recipe(TINY_RAY, [*cuda, "runtime.ray.trainer_workers=2"]))
    assert [placement.bundles[i] for i in placement.roles["trainer"]] == [{"CPU": 1.0, "GPU": 2.0}] * 2
    assert placement.num_gpus == 4
    lines = runtime_problems(load_recipe(TINY_RAY, [*cuda, "runtime.ray.trainer_workers=3"]))
    assert any("plan.training_devices 4 do not split evenly" in line for line in lines), lines
    on_cpu = placement_for(load_recipe(TINY_RAY, ["runtime.ray.trainer_workers=2"]))
    assert on_cpu.roles["trainer"] == (2, 3) and on_cpu.num_cpus == 5
