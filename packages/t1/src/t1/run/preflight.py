"""One preflight for `t1 recipe validate` and `t1 train`: can this recipe run here, and does its plan fit?

The spec has already checked the paper's rules, and refused the settings no machine runs, when a recipe
loads (so ``t1 recipe validate --spec-only`` refuses them too). The preflight adds what only the run knows,
in one place, so that validate and train give the same answer in the same words:

1. **Backends built.** Each seam's registry (``engine.kind``, ``sandbox.kind``, ``trainer.backend``) must
   hold the kind the recipe names; the backend it picks then says, through its own ``preflight(recipe)``,
   which of the recipe's settings it does not run and what this machine lacks for it (bubblewrap, a visible
   CUDA device).
2. **Loop features usable here.** The evaluation suites load here, and the chat template has the thinking
   mode ``evaluation.thinking`` asks for.
3. **Capacity.** The capacity model must admit the plan (T1 §7.1, Eq. 21), the same rule as ``t1 plan check``.
4. **Inputs.** The pools load (with their ``limit`` and ``audit``) and hold a step of distinct tasks, and
   ``logging.run_root`` can hold a run directory (`t1.run.pools`); these are refusals of this machine
   (exit 1: the recipe is valid, the path is not usable here).

Settings that the spec requires but the embedded run does not act on are not refused; they are listed as
notes, printed by validate and train alike, so no setting is ignored silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from t1.run.pools import pool_problems, run_root_problem
from t1.run.runtimes import runtime_problems
from t1_spec import Recipe, Registry


@dataclass(frozen=True)
class Preflight:
    """The preflight's verdict on one recipe.

    Attributes:
        problems: one line per reason the run cannot start here, each beginning with the recipe field.
        notes: settings the recipe carries that this run accepts but does not act on, one line each.
        invalid: one line per path in the recipe that cannot be used (a pool that does not load or is too
            small for one step, an unwritable ``logging.run_root``): not runnable here, exit 1.
    """

    problems: tuple[str, ...]
    notes: tuple[str, ...]
    invalid: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether `t1 train` would start this recipe."""
        return not self.problems and not self.invalid

    def message(self) -> str:
        """The refusal, as `t1 train` and `t1 recipe validate` print it (invalid paths first)."""
        return "t1 train cannot run this recipe here:\n  - " + "\n  - ".join(self.invalid + self.problems)


class PreflightError(RuntimeError):
    """The preflight refused a recipe; raised before any sandbox starts or any run directory is written.

    Attributes:
        preflight: the verdict, with every problem found.
    """

    def __init__(self, preflight: Preflight) -> None:
        self.preflight = preflight
        super().__init__(preflight.message())


class PreflightInputError(PreflightError, ValueError):
    """A refusal that includes a path of the recipe unusable on this machine (`Preflight.invalid`): exit 1."""


def registries() -> tuple[tuple[str, Registry], ...]:
    """``(recipe field, registry)`` for every backend seam, in the order the run builds them."""
    from t1_rollout.engine import ENGINES
    from t1_rollout.harness import HARNESSES
    from t1_sandbox import SANDBOXES
    from t1_trainer.base import TRAINER_BACKENDS

    return (
        ("engine.kind", ENGINES),
        ("sandbox.kind", SANDBOXES),
        ("trainer.backend", TRAINER_BACKENDS),
        ("rollout.harness.kind", HARNESSES),
    )


def backend_kinds(recipe: Recipe) -> dict[str, str]:
    """The kind the recipe names for each backend seam, keyed by its recipe field."""
    return {
        "engine.kind": recipe.engine.kind,
        "sandbox.kind": recipe.sandbox.kind,
        "trainer.backend": recipe.trainer.backend,
        "rollout.harness.kind": recipe.rollout.harness.kind,
    }


def loop_problems(recipe: Recipe) -> list[str]:
    """Settings of ``recipe`` that the run loop cannot run here, one line each.

    What no machine runs (partial-rollout continuation on Ray, with groups or with checkpoints; a category
    mix; a launch count that splits a group) is the spec's to refuse (`t1_spec.Recipe`), so that
    ``t1 recipe validate --spec-only`` refuses it too; what is left here depends on this machine's files.
    """
    return evaluation_problems(recipe)


def evaluation_problems(recipe: Recipe) -> list[str]:
    """What stops the recipe's ``evaluation`` section from running (T1 §6), one line each.

    Checked whenever the section is used: ``evaluation.enabled`` or any ``t1 eval`` run. Every suite must
    be a pool source that loads here (nothing is downloaded at run time, so a benchmark name is refused),
    and ``evaluation.thinking`` needs a chat template with a thinking mode.
    """
    e = recipe.evaluation
    problems = []
    if e.enabled:
        names = [s for s in e.suites if not _is_pool_path(s)]
        if names:
            problems.append(
                f"evaluation.suites {', '.join(repr(s) for s in names)}: not a directory; a benchmark name "
                "cannot be resolved here (nothing is downloaded at run time): give a directory of task "
                "bundles (a local copy of the benchmark) or builtin:mini"
            )
        for s in e.suites:
            why = suite_problem(s) if _is_pool_path(s) else None
            if why is not None:
                problems.append(f"evaluation.suites {s!r}: {why}")
    if e.thinking and not template_has_thinking():
        problems.append(
            "evaluation.thinking: the chat template (t1_tito.ChatTemplate) renders the same prompt with "
            "and without thinking; set it to false"
        )
    return problems


def _is_pool_path(source: str) -> bool:
    from pathlib import Path

    return source.startswith("builtin:") or Path(source).is_dir()


def suite_problem(source: str) -> str | None:
    """Why the pool source ``source`` does not load here (its error on one line), or None when it loads."""
    from t1_tasks import TaskError, load_pool

    try:
        load_pool(source)
    except (TaskError, ValueError, OSError) as exc:
        return " ".join(str(exc).split())
    return None


def template_has_thinking() -> bool:
    """Whether the chat template opens a think block when thinking is on (its prompt differs)."""
    from t1_tito import ChatTemplate

    template, messages = ChatTemplate(), [{"role": "user", "content": "x"}]
    on = template.render(messages, add_generation_prompt=True, thinking=True)
    return on != template.render(messages, add_generation_prompt=True, thinking=False)


def loop_notes(recipe: Recipe) -> list[str]:
    """Settings the run accepts but does not act on, one line each (printed, never silent)."""
    ro = recipe.rollout
    if recipe.runtime.kind == "ray":
        lv = recipe.liveness
        return [
            f"liveness: engine replicas and sandbox hosts probed after {lv.probe_grace_s:g} s, every "
            f"{lv.probe_period_s:g} s, lost after {lv.probe_deadline_s:g} s unanswered; the trainer worker "
            "is not probed (its loss fails the run)"
        ]
    return [
        f"rollout.per_node_cap {ro.per_node_cap}: one rollout worker in this process, bounded by "
        f"rollout.concurrency ({ro.concurrency})",
        "liveness: the embedded run has no remote participants to probe",
    ]


def eval_overlap_problems(recipe: Recipe) -> list[str]:
    """The closest near-duplicate of a training task in the recipe's evaluation pools, as one line (T1 §3).

    Every suite of ``evaluation.suites`` (enabled or not: a listed suite is an evaluation pool) that loads as
    a pool source is compared with ``pool`` (its first ``pool.limit`` tasks) by ``t1_tasks.find_overlaps``
    at ``pool.max_eval_overlap``; a suite that does not load is left to `evaluation_problems`. Small pools
    are compared exactly, pair by pair (the mini pool against itself: about 10 ms).

    Returns:
        One problem line naming the closest pair, the number of pairs and the threshold, or an empty list.
    """
    from t1_tasks import Pool, TaskError, find_overlaps, load_pool

    def loaded(source: str, limit: int | None = None) -> Pool | None:
        try:
            return load_pool(source, limit=limit, strict=False)
        except (TaskError, ValueError, OSError):
            return None

    suites = [p for p in map(loaded, recipe.evaluation.suites) if p is not None]
    train = loaded(recipe.pool.source, recipe.pool.limit) if suites else None
    if train is None:
        return []
    threshold = recipe.pool.max_eval_overlap
    pairs = find_overlaps(train, suites, threshold=threshold, method="auto")
    if not pairs:
        return []
    p = pairs[0]
    command = " ".join(["t1 tasks overlap", train.source, *(s.source for s in suites)])
    return [
        f"pool: task {p.train_task} of {p.train_source} is a near-duplicate of task {p.eval_task} of "
        f"{p.eval_source} (Jaccard {p.exact_jaccard:.2f} on {p.parts} >= pool.max_eval_overlap "
        f"{threshold:g}; {len(pairs)} pair{'s' * (len(pairs) != 1)} in all, `{command}` lists them): remove "
        "the training tasks from the pool or the suite from evaluation.suites"
    ]


def checkpoint_problem(recipe: Recipe) -> str | None:
    """Why ``model.checkpoint`` has no actor weights to load; ``None`` when it has (or with ``init: random``).

    The file's safetensors header is read (no torch); its names and shapes are checked against the model
    when the run builds it (`t1_trainer.checkpoint.load_actor`).

    A checkpoint that the recipe's own ``sft`` section writes gets the command that writes it.
    """
    m = recipe.model
    if m.init != "checkpoint" or m.checkpoint is None:
        return None
    from t1_trainer.checkpoint import CheckpointMismatchError, actor_weights_path, read_tensor_shapes

    try:
        read_tensor_shapes(actor_weights_path(m.checkpoint))
    except CheckpointMismatchError as exc:  # names and shapes are checked against the model when it is built
        return f"model.checkpoint {m.checkpoint!r}: {exc}"
    except FileNotFoundError as exc:
        line = f"model.checkpoint {m.checkpoint!r}: {' '.join(str(exc).split())}"
        sft = recipe.sft
        out = None if sft is None else (sft.output or f"{recipe.logging.run_root}/{recipe.name}-sft")
        if out is not None and Path(out).resolve() == Path(m.checkpoint).resolve():
            line += "; the recipe's sft section writes it: run `t1 sft RECIPE` first"
        return line
    except OSError as exc:
        return f"model.checkpoint {m.checkpoint!r}: cannot read it: {exc.strerror or exc}"
    return None


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
    from t1.run.wandb_log import wandb_problems

    problems: list[str] = []
    kinds = backend_kinds(recipe)
    for field, registry in registries():
        missing = registry.problem(kinds[field])
        if missing is not None:
            problems.append(missing)
            continue
        problems += registry.preflight(kinds[field], recipe)
    problems += runtime_problems(recipe)
    problems += loop_problems(recipe)
    problems += eval_overlap_problems(recipe)
    problems += wandb_problems(recipe.logging.wandb)
    refused = capacity_problem(recipe)
    if refused is not None:
        problems.append(refused)
    invalid = pool_problems(recipe)
    missing = checkpoint_problem(recipe)
    if missing is not None:
        invalid.append(missing)
    unwritable = run_root_problem(recipe)
    if unwritable is not None:
        invalid.append(unwritable)
    return Preflight(problems=tuple(problems), notes=tuple(loop_notes(recipe)), invalid=tuple(invalid))


def require(recipe: Recipe) -> Preflight:
    """`preflight`, raising when the recipe cannot run.

    Raises:
        PreflightInputError: listing every problem, when a path of the recipe is unusable here (exit 1).
        PreflightError: listing every problem, before any work (exit 1).
    """
    return refuse_unless_ok(preflight(recipe))


def refuse_unless_ok(verdict: Preflight) -> Preflight:
    """Raise for a refused `Preflight`; return it when the run may start.

    Raises:
        PreflightInputError: a path of the recipe is unusable here (exit 1).
        PreflightError: any other problem (exit 1).
    """
    if verdict.invalid:
        raise PreflightInputError(verdict)
    if not verdict.ok:
        raise PreflightError(verdict)
    return verdict
