"""The in-process runtime (``runtime.kind: embedded``, the default): every part in the driver's process.

`t1.run.build.build` makes the engine, the trainer backend, the sandbox factory and the TITO session; a
trial runs on the driver's event loop against the engine, and a PPO step trains before `train_ppo` returns,
so rollout and training never overlap: every sample of step t was drawn by version t (staleness 0), and
``runtime.mode: async`` is refused (one process cannot overlap them; ``runtime.kind: ray`` does).
Publication is `t1_trainer.publish.publish_weights` to the one engine. Partial-rollout continuation needs
nothing here: a parked trial's coroutine waits on the driver's event loop, which outlives the step.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1.run.build import Components, build
from t1.run.runtime import EvaluationParts, Publication, RunContext, RunInputs, Trained
from t1.run.steps import InFlight, plain_metrics
from t1_spec import Recipe
from t1_tasks import Task

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1_rollout.engine import SamplingParams
    from t1_rollout.trial import TrialRecord
    from t1_tasks import StepTasks
    from t1_tito import Sample


class InProcessRuntime:
    """Engine, trainer and sandboxes in this process (`t1.run.runtime.Runtime`).

    Args:
        recipe: the validated recipe.
    """

    kind = "embedded"

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe
        self.parts: Components | None = None
        self.context: RunContext | None = None
        self.start_wall_s: dict[str, float] = {}

    @classmethod
    def from_spec(cls, recipe: Recipe) -> InProcessRuntime:
        """The runtime of ``recipe``."""
        return cls(recipe)

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """Only ``runtime.mode: sync``: one process cannot overlap rollout and training."""
        if recipe.runtime.mode != "sync":
            return [
                f"runtime.mode '{recipe.runtime.mode}': the in-process runtime runs rollout and training one "
                "after the other in one process, so it cannot overlap them (T1 Appendix 12); set "
                "runtime.mode to sync, or runtime.kind to ray"
            ]
        return []

    def start(self) -> RunInputs:
        """Build every part (`t1.run.build.build`)."""
        self.parts = build(self.recipe)
        p = self.parts
        return RunInputs(p.pool, p.warmup_pool, p.warmup_pool_spec, p.validated)

    def attach(self, context: RunContext) -> None:
        """Keep the run directory (verifier files go there)."""
        self.context = context

    def describe(self) -> str:
        """Nothing to add: in-process is the default."""
        return ""

    def begin_rollout(self, label: str) -> None:
        """Nothing to probe."""

    async def run_trial(
        self, task: Task, record: TrialRecord, sampling: SamplingParams, label: str
    ) -> TrialRecord:
        """`t1_rollout.trial.run_trial` against the engine, on the driver's event loop."""
        from t1_rollout.trial import run_trial

        p = self._parts()
        return await run_trial(
            task,
            sandbox_factory=p.sandbox_factory,
            engine=p.engine,
            tito=p.tito,
            sampling=sampling,
            harness=p.harness,
            limits=p.limits,
            reward_spec=self.recipe.reward,
            out_dir=self.context.rundir.verifier_dir,
            record=record,
            validated=p.validated.get(task.id),
        )

    def end_rollout(self) -> int:
        """Nothing is re-queued in one process."""
        return 0

    def train_ppo(
        self, samples: Sequence[Sample], *, staleness: int, continuation_lag: int, max_staleness: int
    ) -> Trained:
        """`t1_trainer.step.ppo_step`, here and now."""
        from t1_trainer.step import ppo_step

        t0 = time.monotonic()
        metrics = ppo_step(
            self._parts().backend,
            samples,
            self.recipe.ppo,
            staleness=staleness,
            continuation_lag=continuation_lag,
            max_staleness=max_staleness,
        )
        return Trained(plain_metrics(metrics), time.monotonic() - t0)

    def train_critic(self, samples: Sequence[Sample]) -> Trained:
        """`t1_trainer.step.critic_warmup_step`, here and now."""
        from t1_trainer.step import critic_warmup_step

        t0 = time.monotonic()
        metrics = critic_warmup_step(self._parts().backend, samples, self.recipe.ppo)
        return Trained(plain_metrics(metrics), time.monotonic() - t0)

    def publish(self) -> Publication:
        """`t1_trainer.publish.publish_weights` to the one engine."""
        from t1_trainer.publish import publish_weights

        p = self._parts()
        wall = publish_weights(p.backend, [p.engine])
        return Publication(version=p.engine.weight_version, wall_s={"publish": wall})

    def row_extras(self, step: int, batch: InFlight, publication: Publication) -> dict[str, Any]:
        """Nothing beyond the driver's keys."""
        return {}

    def evaluation_parts(self, publication_version: int) -> EvaluationParts:
        """The run's own engine and sandbox factory."""
        p = self._parts()
        return EvaluationParts(
            engine=p.engine,
            sandbox_factory=p.sandbox_factory,
            tokenizer=p.tito.tokenizer,
            template=p.tito.template,
            version=p.engine.weight_version,
        )

    def checkpoint_parts(self, checkpoint: Path) -> dict[str, Any]:
        """The backend and the engine: `t1.run.resume.save_state` writes their state itself."""
        p = self._parts()
        return {"backend": p.backend, "engine": p.engine}

    def restore(self, state: RunState, stream: StepTasks) -> None:
        """`t1.run.resume.restore`: trainer state, the engine's weights and version, the stream, RNG last."""
        from t1.run.resume import restore

        p = self._parts()
        restore(state, backend=p.backend, engine=p.engine, stream=stream)

    def save_weights(self, run_dir: Path) -> None:
        """`t1_trainer.weights.save_weights`."""
        from t1_trainer.weights import save_weights

        save_weights(self._parts().backend, run_dir)

    def close(self) -> None:
        """Stop the engine's worker thread before the process exits, on every exit path.

        The embedded engine decodes on a thread of its own; left running into interpreter shutdown, a forward
        it is inside aborts the process (``terminate called without an active exception``, exit -6 instead of
        130; after a finished run, the oversampling tail's cancelled requests can still be decoding). The
        cancelled trials' requests are dropped, so the thread ends after at most one decode step.
        """
        close = getattr(self.parts.engine, "close", None) if self.parts is not None else None
        if close is not None:
            close()

    def _parts(self) -> Components:
        if self.parts is None:
            raise RuntimeError("InProcessRuntime: start() has not built the run's parts yet")
        return self.parts


__all__ = ["InProcessRuntime"]
