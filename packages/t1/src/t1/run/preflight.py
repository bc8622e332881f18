"""One preflight for `t1 recipe validate` and `t1 train`: can this recipe run here, and does its plan fit?

The spec has already checked the paper's rules when a recipe loads. The preflight adds what only the run
knows, in one place, so that validate and train give the same answer in the same words:

1. **Backends built.** Each seam's registry (``engine.kind``, ``sandbox.kind``, ``trainer.backend``) must
   hold the kind the recipe names; the backend it picks then says, through its own ``preflight(recipe)``,
   which of the recipe's settings it does not run and what this machine lacks for it (bubblewrap, a visible
   CUDA device).
2. **Loop features built.** Settings the run loop itself does not implement yet are refused by name.
3. **Capacity.** The capacity model must admit the plan (T1 §7.1, Eq. 21), the same rule as ``t1 plan check``.

Settings that the spec requires but the embedded run does not act on are not refused; they are listed as
notes, printed by validate and train alike, so no setting is ignored silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from t1_spec import Recipe, Registry


@dataclass(frozen=True)
class Preflight:
    """The preflight's verdict on one recipe.

    Attributes:
        problems: one line per reason the run cannot start here, each beginning with the recipe field.
        notes: settings the recipe carries that this run accepts but does not act on, one line each.
    """

    problems: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether `t1 train` would start this recipe."""
        return not self.problems

    def message(self) -> str:
        """The refusal, as `t1 train` and `t1 recipe validate` print it."""
        return "t1 train cannot run this recipe here:\n  - " + "\n  - ".join(self.problems)


class PreflightError(RuntimeError):
    """The preflight refused a recipe; raised before any sandbox starts or any run directory is written.

    Attributes:
        preflight: the verdict, with every problem found.
    """

    def __init__(self, preflight: Preflight) -> None:
        self.preflight = preflight
        super().__init__(preflight.message())


def registries() -> tuple[tuple[str, Registry], ...]:
    """``(recipe field, registry)`` for every backend seam, in the order the run builds them."""
    from t1_rollout.engine import ENGINES
    from t1_rollout.sandbox import SANDBOXES
    from t1_trainer.base import TRAINER_BACKENDS

    return (
        ("engine.kind", ENGINES),
        ("sandbox.kind", SANDBOXES),
        ("trainer.backend", TRAINER_BACKENDS),
    )


def backend_kinds(recipe: Recipe) -> dict[str, str]:
    """The kind the recipe names for each backend seam, keyed by its recipe field."""
    return {
        "engine.kind": recipe.engine.kind,
        "sandbox.kind": recipe.sandbox.kind,
        "trainer.backend": recipe.trainer.backend,
    }


def loop_problems(recipe: Recipe) -> list[str]:
    """Settings of ``recipe`` that the run loop itself does not implement yet, one line each."""
    problems = []
    if recipe.tito.repair != "strict":
        problems.append(
            f"tito.repair '{recipe.tito.repair}': not built yet; t1_tito stitches the strict case and splits "
            "every other boundary into a new chunk (use 'strict')"
        )
    if recipe.model.init != "random":
        problems.append(
            f"model.init '{recipe.model.init}': loading a checkpoint is not built yet (use 'random')"
        )
    if recipe.evaluation.enabled:
        problems.append("evaluation.enabled: periodic held-out evaluation is not built yet (set it to false)")
    if recipe.logging.tensorboard:
        problems.append(
            "logging.tensorboard: not built yet; metrics.jsonl holds every metric (set it to false)"
        )
    if recipe.pool.category_mix:
        problems.append(
            "pool.category_mix: re-weighting the pool by category is not built yet (set it to null)"
        )
    if recipe.trainer.checkpoint_optimizer:
        problems.append(
            "trainer.checkpoint_optimizer: saving optimizer state is not built yet; checkpoints hold the "
            "actor and critic weights only, as in the paper (T1 §7) (set it to false)"
        )
    if recipe.ppo.samples_per_task != 1:
        problems.append(
            f"ppo.samples_per_task {recipe.ppo.samples_per_task}: group sampling (GRPO groups) is not built "
            "into the embedded loop yet; the paper's PPO uses one sample per task (T1 §5.2)"
        )
    return problems


def loop_notes(recipe: Recipe) -> list[str]:
    """Settings the embedded run accepts but does not act on, one line each (printed, never silent)."""
    ro = recipe.rollout
    return [
        f"rollout.compaction_threshold_tokens {ro.compaction_threshold_tokens}: context compaction is not "
        f"built; an episode that would overflow rollout.context_tokens ({ro.context_tokens}) ends with "
        "finish 'context_exhausted'",
        f"rollout.per_node_cap {ro.per_node_cap}: one rollout worker in this process, bounded by "
        f"rollout.concurrency ({ro.concurrency})",
        "liveness: the embedded run has no remote participants to probe",
    ]


def capacity_problem(recipe: Recipe) -> str | None:
    """The capacity model's refusal of the recipe's plan (T1 §7.1, Eq. 21), or ``None`` when it fits."""
    from t1_capacity import admit_recipe

    verdict = admit_recipe(recipe)
    return None if verdict.ok else f"plan: {verdict.message}"


def preflight(recipe: Recipe) -> Preflight:
    """Every reason ``recipe`` cannot run here, found without building a model or starting a sandbox.

    Returns:
        The `Preflight`: registries first (a missing backend, then what the chosen backends refuse), then
        the loop's unbuilt settings, then the capacity model's verdict.
    """
    problems: list[str] = []
    kinds = backend_kinds(recipe)
    for field, registry in registries():
        missing = registry.problem(kinds[field])
        if missing is not None:
            problems.append(missing)
            continue
        problems += registry.load(kinds[field]).preflight(recipe)
    problems += loop_problems(recipe)
    refused = capacity_problem(recipe)
    if refused is not None:
        problems.append(refused)
    return Preflight(problems=tuple(problems), notes=tuple(loop_notes(recipe)))


def require(recipe: Recipe) -> Preflight:
    """`preflight`, raising when the recipe cannot run.

    Raises:
        PreflightError: listing every problem, before any work.
    """
    verdict = preflight(recipe)
    if not verdict.ok:
        raise PreflightError(verdict)
    return verdict
