"""Start-up weight: the command line and `t1 recipe validate` load no torch and no heavy optional library.

Each check runs in a fresh interpreter and reads ``sys.modules`` after the work, so an eager import anywhere
on the path (a package ``__init__``, a verb module, a backend's preflight) fails it. The light preflight
checks of the registries must give the same lines as the backends' own ``preflight`` classmethods.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from t1_spec import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
HEAVY = (
    "torch",
    "transformers",
    "matplotlib",
    "tensorboard",
    "megatron",
    "docker",
    "daytona",
    "ray",
    "sympy",
)
"""Libraries that only a run (or the backend that needs them) may import."""


def _loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; return its last stdout line (JSON) as a dict."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _heavy_probe(body: str) -> str:
    return (
        "import json, sys\n"
        f"{body}\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'heavy': heavy, 'exit': exit_code}))\n"
    )


def test_import_cli_loads_no_heavy_library():
    out = _loaded_after(_heavy_probe("import t1.cli\nexit_code = 0"))
    assert out["heavy"] == [], f"import t1.cli imports {out['heavy']}"


@pytest.mark.parametrize("start", ["random", "checkpoint"])
def test_recipe_validate_loads_no_heavy_library(start, tmp_path):
    overrides: list[str] = []
    if start == "checkpoint":  # the preflight reads the checkpoint's safetensors header, not the tensors
        from safetensors.numpy import save_file

        save_file({"w": np.zeros((2, 3), dtype=np.float32)}, tmp_path / "actor.safetensors")
        overrides = ["model.init=checkpoint", f"model.checkpoint={tmp_path / 'actor.safetensors'}"]
    body = (
        "from t1.cli import app\n"
        "try:\n"
        f"    app(['recipe', 'validate', {str(TINY)!r}, *{overrides!r}], prog_name='t1')\n"
        "    exit_code = 0\n"
        "except SystemExit as exc:\n"
        "    exit_code = exc.code\n"
    )
    out = _loaded_after(_heavy_probe(body))
    assert out["exit"] == 0, "t1 recipe validate refused the tiny recipe"
    assert out["heavy"] == [], f"t1 recipe validate imports {out['heavy']}"


def test_light_package_imports_stay_light():
    """The packages whose ``__init__`` re-exports torch-using names load them only on first access."""
    body = "import t1_trainer, t1_policy, t1.run, t1_rollout.engine\nexit_code = 0"
    assert _loaded_after(_heavy_probe(body))["heavy"] == []


def test_lazy_exports_resolve_to_the_defining_modules():
    import t1.run
    import t1_policy
    import t1_trainer
    from t1.run.driver import Run
    from t1_policy.critic import Critic
    from t1_policy.model import build_model
    from t1_trainer.step import ppo_step
    from t1_trainer.torch_backend import TorchBackend

    assert t1_trainer.TorchBackend is TorchBackend and t1_trainer.ppo_step is ppo_step
    assert t1_policy.Critic is Critic and t1_policy.build_model is build_model
    assert t1.run.Run is Run
    assert callable(t1.run.preflight)  # the function, not its submodule of the same name
    for package in (t1_trainer, t1_policy, t1.run):
        missing = [name for name in package.__all__ if not hasattr(package, name)]
        assert not missing, f"{package.__name__} lists names it cannot give: {missing}"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = t1_trainer.nope


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["trainer.device=cuda:7", "engine.device=cuda:7"],
        ["ppo.routing_replay=false", "ppo.kl_coef=0.01"],
        ["ppo.normalize_advantages=true"],
        ["plan.devices=2", "plan.dp=2"],
    ],
)
def test_light_checks_give_the_backends_own_lines(overrides):
    from t1_rollout.engine import ENGINES
    from t1_rollout.engine.embedded import EmbeddedEngine
    from t1_trainer.base import TRAINER_BACKENDS
    from t1_trainer.torch_backend import TorchBackend

    recipe = load_recipe(TINY, overrides)
    assert ENGINES.preflight("embedded", recipe) == EmbeddedEngine.preflight(recipe)
    assert TRAINER_BACKENDS.preflight("torch", recipe) == TorchBackend.preflight(recipe)
    if overrides:  # each override is one the backends refuse, so the comparison is not of two empty lists
        assert TRAINER_BACKENDS.preflight("torch", recipe)
