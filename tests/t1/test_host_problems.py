"""`t1 train` says up front what the machine lacks and what the embedded loop does not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1.training import HostNotReady, Trainer, host_problems, unbuilt_parts
from t1_spec import load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def test_missing_bubblewrap_is_named_with_how_to_install_it(monkeypatch):
    import t1_rollout.sandbox._host as host

    monkeypatch.setattr(host.shutil, "which", lambda name: None)
    (line,) = host_problems(load_recipe(TINY))
    assert line.startswith("sandbox.kind 'local'") and "apt-get install bubblewrap" in line
    with pytest.raises(HostNotReady, match="bubblewrap"):
        Trainer(load_recipe(TINY), {})


def test_a_cuda_device_torch_cannot_see_is_refused_naming_the_field():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    problems = host_problems(load_recipe(TINY, ["trainer.device=cuda:0"]))
    assert problems and problems[0].startswith("trainer.device 'cuda:0'")


def test_unbuilt_ppo_settings_are_listed_up_front():
    lines = unbuilt_parts(
        load_recipe(TINY, ["ppo.routing_replay=false", "ppo.kl_coef=0.1", "ppo.normalize_advantages=true"])
    )
    assert [line.split()[0] for line in lines] == ["ppo.normalize_advantages:", "ppo.kl_coef"]
