"""The seam between the one step driver (`t1.run.driver`) and where a run's parts live (T1 §7, Appendix 12).

The driver keeps every step's bookkeeping (the plan, warm-up, admission and ``batch_shortfall``, staleness,
partial-rollout continuation, evaluation every N steps, checkpoints and resume, metrics rows, the console);
a `Runtime` answers only what differs between running in one process and running on a cluster:

- **where a trial runs**: `Runtime.run_trial` runs one trial to its end (in this process, or on a sandbox
  host generating on an engine replica), honouring ``record.parking`` when continuation is on;
- **whether rollout overlaps training**: `Runtime.train_ppo` hands back a `PendingTrain` the driver waits
  on after it has rolled out the next step's batch (a runtime whose trainer shares the process trains
  before it returns, and refuses ``runtime.mode: async`` in its `preflight`);
- **how weights are published** (`Runtime.publish`) and **how participants are probed** (`begin_rollout`,
  `end_rollout`, `row_extras`);
- **how state is checkpointed and restored** (`checkpoint_parts`, `restore`);
- **what evaluation generates on** (`evaluation_parts`).

Implementations are registered by ``runtime.kind`` in `t1.run.runtimes.RUNTIMES`: `t1.run.inprocess`
(the embedded default) and `t1.run.ray.runtime`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.console import Console

from t1.run.run_dir import RunDir
from t1.run.signals import StopToken
from t1_spec import PoolSpec
from t1_tasks import Pool, Task

if TYPE_CHECKING:
    from t1.run.resume import RunState
    from t1.run.steps import InFlight
    from t1_rollout.engine import SamplingParams
    from t1_rollout.engine.base import Engine
    from t1_rollout.trial import TrialRecord
    from t1_sandbox.base import Sandbox
    from t1_tasks import StepTasks
    from t1_tito import ChatTemplate, Sample, Tokenizer


@dataclass(frozen=True)
class RunInputs:
    """The pools a run draws from, loaded by the runtime's `Runtime.start`.

    Attributes:
        pool: the training pool.
        warmup_pool: the critic warm-up pool (the training pool unless ``critic_warmup.pool`` names one).
        warmup_pool_spec: the spec of ``warmup_pool`` (its shuffle and seed order the warm-up draws).
        validated: task id -> its row of the pools' validation records; empty without one.
    """

    pool: Pool
    warmup_pool: Pool
    warmup_pool_spec: PoolSpec
    validated: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the driver gives the runtime once the run directory exists (`Runtime.attach`).

    Attributes:
        rundir: the run directory (trajectories, verifier files).
        console: where trial lines and warnings go.
        stop: the run's stop token.
    """

    rundir: RunDir
    console: Console
    stop: StopToken


@dataclass(frozen=True)
class Publication:
    """One publication of the trainer's weights to every engine (T1 Appendix 12).

    Attributes:
        version: the weight version every engine serves after it.
        wall_s: its wall times, seconds: ``publish`` (pause to resume), and the runtime's own parts (e.g.
            ``put``, seconds spent putting the weights into Ray's object store).
        objects: copies of the weights put into a shared store (1 on Ray), or None where nothing is put.
        bytes: tensor bytes of the weights put into that store (bytes), or None where nothing is put.
    """

    version: int
    wall_s: dict[str, float]
    objects: int | None = None
    bytes: int | None = None


@dataclass(frozen=True)
class EvaluationParts:
    """What evaluation during training generates on (`t1_rollout.evaluate.ModelPolicy`).

    Attributes:
        engine: an engine serving the weights just published.
        sandbox_factory: makes one fresh, unstarted sandbox per attempt.
        tokenizer: the recipe's tokenizer.
        template: the chat template.
        version: the weight version ``engine`` serves.
    """

    engine: Engine
    sandbox_factory: Callable[[], Sandbox]
    tokenizer: Tokenizer
    template: ChatTemplate
    version: int


class PendingTrain(Protocol):
    """A training step submitted to the trainer; `result` waits for it."""

    def result(self) -> tuple[dict[str, Any], float]:
        """The step's metrics (plain JSON values) and its wall time in the trainer, seconds."""
        ...


@dataclass(frozen=True)
class Trained:
    """A `PendingTrain` already done (a trainer in the driver's process trains before it returns)."""

    metrics: dict[str, Any]
    train_s: float

    def result(self) -> tuple[dict[str, Any], float]:
        """The step's metrics and wall time (seconds)."""
        return self.metrics, self.train_s


class Runtime(Protocol):
    """Where a run's engines, trainer and sandboxes live; the driver's only view of them (see the module).

    Built by ``from_spec(recipe, resolved)``; ``preflight(recipe)`` (a classmethod, cheap) lists what the
    runtime cannot run of the recipe here, one line each.
    """

    kind: str
    start_wall_s: dict[str, float]
    """Wall times of the runtime's start-up stages, seconds (e.g. ``ray_start``, ``actors``)."""

    def start(self) -> RunInputs:
        """Load the pools and build (or place) every part; before the run directory exists."""
        ...

    def attach(self, context: RunContext) -> None:
        """Take the run directory, console and stop token, once they exist."""
        ...

    def describe(self) -> str:
        """A few words for the run's first console line (e.g. ``" on Ray (async, 2 engine replicas)"``)."""
        ...

    def begin_rollout(self, label: str) -> None:
        """Before a batch of ``label`` is collected (e.g. reclaim lost participants)."""
        ...

    async def run_trial(
        self, task: Task, record: TrialRecord, sampling: SamplingParams, label: str
    ) -> TrialRecord:
        """Run one trial of ``task`` to its end, filling ``record`` (which it returns).

        It never raises for a trial's own failure; with ``record.parking`` set it parks at a turn boundary
        when asked (partial-rollout continuation).
        """
        ...

    def end_rollout(self) -> int:
        """After a batch: attempts re-queued during it (lost participants); raises when none are left."""
        ...

    def train_ppo(
        self, samples: Sequence[Sample], *, staleness: int, continuation_lag: int, max_staleness: int
    ) -> PendingTrain:
        """Submit one PPO step (`t1_trainer.step.ppo_step` with these staleness checks)."""
        ...

    def train_critic(self, samples: Sequence[Sample]) -> PendingTrain:
        """Submit one critic warm-up step (`t1_trainer.step.critic_warmup_step`)."""
        ...

    def publish(self) -> Publication:
        """Publish the trainer's weights to every engine, generation quiesced (T1 Appendix 12)."""
        ...

    def row_extras(self, step: int, batch: InFlight, publication: Publication) -> dict[str, Any]:
        """The runtime's own keys of a PPO step's metrics row (e.g. each replica's requests)."""
        ...

    def evaluation_parts(self, publication_version: int) -> EvaluationParts:
        """An engine on the current weights, a sandbox factory and the template, for evaluation."""
        ...

    def checkpoint_parts(self, checkpoint: Path) -> dict[str, Any]:
        """Write the trainer's part of a checkpoint; return the keyword arguments `save_state` takes for it.

        (``backend`` and ``engine``, or ``trainer`` and ``weight_version``; `t1.run.resume.save_state`.)
        """
        ...

    def restore(self, state: RunState, stream: StepTasks) -> None:
        """Load a checkpoint's trainer part, give every engine its weights and version, set the stream."""
        ...

    def save_weights(self, run_dir: Path) -> None:
        """Save the final actor and critic weights under ``run_dir``."""
        ...

    def close(self) -> None:
        """Stop every part the runtime started, on every exit path (idempotent)."""
        ...


__all__ = [
    "EvaluationParts",
    "PendingTrain",
    "Publication",
    "RunContext",
    "RunInputs",
    "Runtime",
    "Trained",
]
