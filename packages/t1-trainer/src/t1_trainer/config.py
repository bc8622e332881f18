"""The PPO settings the trainer consumes, with the paper's defaults and the checks T1 imposes.

`t1_spec` owns the recipe's PPO section; this module turns it into the flat, frozen `PpoHyperparams` the
trainer reads, so the backend does not depend on the recipe's layout. `PpoHyperparams.from_spec` accepts any
object with the attributes below (the recipe spec, or a `PpoHyperparams` itself).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from t1_trainer.errors import TrainerConfigError

__all__ = ["PpoHyperparams", "check_ppo_settings"]


@dataclass(frozen=True)
class PpoHyperparams:
    """PPO settings of one run; defaults are the paper's (T1 §4.5, `002_*.txt` "Critic Warm-Up and PPO ...").

    Attributes:
        gamma: GAE discount (T1: 1.0).
        lam: GAE lambda (T1: 1.0).
        clip_eps: actor ratio clip epsilon (T1: 0.2).
        value_clip: critic clip epsilon_v around the pre-update values (T1: 0.2).
        actor_lr: actor learning rate (T1: 1.0e-6).
        critic_lr: critic learning rate (T1: 1.5e-5, 15x the actor's).
        adam_betas: Adam (beta1, beta2) (T1: (0.9, 0.98)).
        weight_decay: decoupled weight decay, AdamW (T1: 0.1).
        max_grad_norm: global gradient-norm clip per optimizer step (1.0, chosen; the paper is silent).
        ppo_epochs: optimizer passes over each step's batch (one update per batch in the paper); each pass
            accumulates the gradient of every sample (micro-batches of one) and takes one optimizer step.
        kl_coef: KL penalty coefficient (T1: 0, disabled).
        load_balancing_coef: MoE auxiliary load-balancing loss coefficient (T1: 0).
        normalize_advantages: whiten advantages per batch (T1 §5.2: off; refused when on).
        estimator: ``"gae"`` (T1) or ``"grpo"`` (ablation).
        routing_replay: replay the sampler's recorded routing in the actor's forward (R3, T1 §4.3).
    """

    gamma: float = 1.0
    lam: float = 1.0
    clip_eps: float = 0.2
    value_clip: float = 0.2
    actor_lr: float = 1.0e-6
    critic_lr: float = 1.5e-5
    adam_betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1
    kl_coef: float = 0.0
    load_balancing_coef: float = 0.0
    normalize_advantages: bool = False
    estimator: str = "gae"
    routing_replay: bool = True

    @classmethod
    def from_spec(cls, spec: Any, **overrides: Any) -> PpoHyperparams:
        """Build from a recipe's PPO spec (`t1_spec.PPOSpec`, or any object/dict with these names); check it.

        The spec's nested ``advantage`` section (``estimator``, ``gamma``, ``lam``) is flattened; attributes
        the spec lacks keep the paper's default; ``overrides`` win over both.

        Raises:
            TrainerConfigError: see `check_ppo_settings`.
        """
        if isinstance(spec, cls) and not overrides:
            check_ppo_settings(spec)
            return spec
        values: dict[str, Any] = {}
        advantage = spec.get("advantage") if isinstance(spec, dict) else getattr(spec, "advantage", None)
        if advantage is not None:
            for name in ("estimator", "gamma", "lam"):
                got = advantage.get(name) if isinstance(advantage, dict) else getattr(advantage, name, None)
                if got is not None:
                    values[name] = got
        for f in fields(cls):
            if isinstance(spec, dict):
                if f.name in spec:
                    values[f.name] = spec[f.name]
            elif spec is not None and hasattr(spec, f.name):
                values[f.name] = getattr(spec, f.name)
        values.update(overrides)
        if "adam_betas" in values:
            values["adam_betas"] = tuple(float(b) for b in values["adam_betas"])
        hp = cls(**values)
        check_ppo_settings(hp)
        return hp


def check_ppo_settings(hp: PpoHyperparams) -> None:
    """Refuse settings the T1 trainer does not implement or that contradict the paper.

    Rules: with routing replay on, KL and the load-balancing loss must be 0 (T1 §4.3: the replayed policy and
    a reference routed by its own TopK differ in routing source, and an auxiliary loss would push the live
    router away from the recorded selection); KL and the load-balancing loss are not built at all; advantage
    normalization must be off (T1 §5.2); the estimator must be ``gae`` or ``grpo``.

    Raises:
        TrainerConfigError: naming the setting and how to fix it.
    """
    if hp.routing_replay and hp.kl_coef != 0.0:
        raise TrainerConfigError(
            f"ppo.kl_coef={hp.kl_coef} with routing replay on: T1 §4.3 requires KL off under R3; "
            "set kl_coef: 0"
        )
    if hp.routing_replay and hp.load_balancing_coef != 0.0:
        raise TrainerConfigError(
            f"ppo.load_balancing_coef={hp.load_balancing_coef} with routing replay on: T1 §4.3 requires "
            "the MoE load-balancing loss off under R3; set load_balancing_coef: 0"
        )
    if hp.kl_coef != 0.0 or hp.load_balancing_coef != 0.0:
        raise TrainerConfigError(
            "ppo.kl_coef / ppo.load_balancing_coef != 0: the torch trainer builds neither loss "
            "(T1 runs with both at 0); set them to 0"
        )
    if hp.normalize_advantages:
        raise TrainerConfigError(
            "ppo.normalize_advantages=true: T1 §5.2 keeps advantages unnormalized (normalizing would rescale "
            "away cross-task differences); advantage whitening is not built, set it to false"
        )
    if hp.estimator not in ("gae", "grpo"):
        raise TrainerConfigError(f"ppo.estimator={hp.estimator!r}: expected 'gae' or 'grpo'")
    if hp.ppo_epochs < 1:
        raise TrainerConfigError(f"ppo.ppo_epochs={hp.ppo_epochs}: must be >= 1")
