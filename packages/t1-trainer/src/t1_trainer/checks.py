"""The torch trainer backend's preflight without importing torch: what it cannot run of a recipe, per line.

`t1_trainer.torch_backend.TorchBackend.preflight` returns `torch_preflight`, and `TRAINER_BACKENDS` names it
as the ``torch`` kind's light check (`t1_spec.Registry.preflight`), so `t1 recipe validate` gives the
backend's verdict without loading torch: the checks read only the recipe, and the device check imports torch
only for a CUDA device (`t1_policy.device_problem`).
"""

from __future__ import annotations

from t1_policy.device import device_problem
from t1_spec import PPOSpec, Recipe

__all__ = ["one_device_plan", "torch_preflight", "unbuilt_ppo"]


def torch_preflight(recipe: Recipe) -> list[str]:
    """What the torch backend cannot run of ``recipe`` on this machine, one line each (empty: runnable).

    Checks, without building a model: a CUDA ``trainer.device`` that torch does not see here, a plan of more
    than one training device (this backend runs on one), and the PPO settings this backend does not build
    (advantage normalization, which T1 §5.2 leaves off; a KL or load-balancing loss, which T1 runs at 0).
    ``micro_batch_size > 1`` is built here: packed micro-batches (`t1_trainer.packing`). The paper's rule
    that routing replay forbids both losses is the spec's (`t1_spec.PPOSpec`), so a recipe that reaches here
    with a non-zero coefficient has replay off.

    Returns:
        Lines starting with the recipe field path, e.g. ``"ppo.normalize_advantages: advantage whitening is
        not built; ..."``.
    """
    unseen = device_problem("trainer.device", recipe.trainer.device)
    return ([unseen] if unseen else []) + one_device_plan(recipe) + unbuilt_ppo(recipe.ppo)


def unbuilt_ppo(ppo: PPOSpec, backend: str = "torch") -> list[str]:
    """The PPO settings the torch and megatron trainers do not build, one line each led by the field path.

    Args:
        ppo: the recipe's PPO section.
        backend: the ``trainer.backend`` the lines name (both backends share these limits, except that only
            ``torch`` packs micro-batches of more than one sample).
    """
    problems = []
    if ppo.normalize_advantages:
        problems.append(
            f"ppo.normalize_advantages: advantage whitening is not built in the {backend} trainer; T1 §5.2 "
            "keeps advantages unnormalized (set it to false)"
        )
    for name, value, loss in (
        ("kl_coef", ppo.kl_coef, "KL"),
        ("load_balancing_coef", ppo.load_balancing_coef, "load-balancing"),
    ):
        if value:
            problems.append(
                f"ppo.{name} {value}: the {backend} trainer builds no {loss} loss; T1 runs with it at 0 "
                "(set it to 0)"
            )
    if backend != "torch" and ppo.micro_batch_size != 1:
        problems.append(
            f"ppo.micro_batch_size {ppo.micro_batch_size}: the {backend} trainer feeds one variable-length "
            "sample per micro-batch (it packs none); set micro_batch_size: 1"
        )
    return problems


def one_device_plan(recipe: Recipe) -> list[str]:
    """The plan's refusal when it asks for more than the one training device the torch backend uses."""
    p = recipe.plan
    degrees = (("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("dp", p.dp), ("ep", p.ep), ("etp", p.etp))
    if p.training_devices == 1 and all(d == 1 for _, d in degrees):
        return []
    shown = " ".join(f"{name} {d}" for name, d in degrees)
    return [
        f"plan: the torch trainer trains on one device, and this plan asks for {p.training_devices} training "
        f"devices ({shown}); set every degree to 1 and plan.devices to 1 + plan.inference_devices "
        "(`t1 plan check` prices any plan without running it)"
    ]
