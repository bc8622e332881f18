"""Supervised warm start of the actor from expert trajectories, run by ``t1 sft`` (T1 §6, before PPO).

The paper's run starts PPO from the RST-38k SFT checkpoint (49.4% on Terminal-Bench 2.1, T1 §6, Fig. 9); it
gives no SFT hyperparameters. The defaults here are chosen for the tiny CPU model and say so. The section is
optional: a recipe without it has no SFT phase, and ``t1 sft`` refuses it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if
from t1_spec.pool import PoolSpec


class SftSpec(Spec):
    """Where the expert trajectories come from, how the actor is fitted to them and where the weights go.

    ``t1 sft RECIPE`` stitches every expert trajectory with the run's own tokenizer, chat template and TITO
    session, so the sequences are exactly what an RL rollout of the same turns would give, and trains the
    actor by cross-entropy on the assistant (loss-mask) tokens only. It writes ``<output>/weights/`` in the
    layout ``t1 train`` reads with ``model.init: checkpoint`` and ``model.checkpoint: <output>``.
    """

    source: Literal["reference_solutions", "trajectories"] = "reference_solutions"
    """Where the expert turns come from. ``reference_solutions``: each task's ``solution/solve.sh`` is typed
    by a scripted agent as one harness action (commands, then ``task_complete`` and its confirmation) in a
    fresh sandbox, and the task's verifier grades the result, as in an RL trial. ``trajectories``: recorded
    conversations from the JSONL file ``trajectories`` (format in ``docs/sft.md``)."""

    pool: PoolSpec | None = None
    """Tasks whose reference solutions are replayed (``source: reference_solutions``); ``None`` = the recipe's
    own pool."""

    trajectories: str | None = None
    """JSONL file of recorded trajectories, one conversation per line (``source: trajectories`` only; a
    relative path resolves against the current working directory). ``None`` otherwise."""

    require_pass: bool = True
    """Keep a reference trajectory only when the verifier passed every assertion it reported, so the actor
    is never fitted to a run that failed (RST validates each reference solution in a fresh sandbox, T1 §3.1).
    ``False`` keeps every finished trajectory."""

    init: Literal["random", "checkpoint"] = "random"
    """Weights SFT starts from: ``random`` (the seeded initialisation of the recipe's ``model`` section and
    ``seed``) or ``checkpoint`` (the actor file under ``checkpoint``). Independent of ``model.init``, which
    names what ``t1 train`` starts from (usually this section's ``output``)."""

    checkpoint: str | None = None
    """Run directory or ``.safetensors`` file of the starting weights when ``init`` is ``checkpoint``; must
    be ``None`` when ``init`` is ``random``."""

    output: str | None = None
    """Directory ``t1 sft`` writes (``metrics.jsonl``, ``expert.jsonl``, ``weights/actor.safetensors``);
    ``None`` = ``<logging.run_root>/<name>-sft``. Point ``model.checkpoint`` at it to start PPO from it."""

    epochs: int = Field(default=40, gt=0)
    """Passes over the expert trajectories (epochs). 40, chosen: the tiny CPU model reaches a cross-entropy
    near 0.1 per token in about 40 epochs on the nine mini-pool solutions (the paper gives none)."""

    batch_size: int = Field(default=1, gt=0)
    """Trajectory chunks per optimizer step (samples); gradients accumulate over them and the loss is the
    token mean over the batch's assistant tokens. 1, chosen."""

    lr: float = Field(default=1.0e-3, gt=0)
    """Peak AdamW learning rate, reached at the end of the warm-up. 1.0e-3, chosen for the tiny randomly
    initialised model (a pretrained model wants far less, e.g. 1e-5)."""

    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    """Learning rate at the last step as a fraction of ``lr`` (ratio): cosine decay from ``lr`` down to
    ``lr * min_lr_ratio``. 0.1, chosen: a constant rate over many epochs let the fit drift back up."""

    warmup_fraction: float = Field(default=0.05, ge=0, lt=1)
    """Share of the optimizer steps spent raising the rate linearly from 0 to ``lr`` (fraction). 0.05,
    chosen."""

    adam_betas: tuple[float, float] = (0.9, 0.98)
    """AdamW (beta1, beta2). (0.9, 0.98), as the PPO updates (T1 §4.5)."""

    weight_decay: float = Field(default=0.0, ge=0)
    """Decoupled weight decay of the matrices (norms and 1-D gates are never decayed). 0.0, chosen: a few
    hundred steps on a handful of trajectories."""

    max_grad_norm: float = Field(default=1.0, gt=0)
    """Global gradient-norm clip per optimizer step. 1.0, as ``ppo.max_grad_norm``."""

    @model_validator(mode="after")
    def _check(self) -> SftSpec:
        raise_if(sft_violations(self))
        return self


def sft_violations(s: SftSpec) -> list[Violation]:
    """Rules of ``SftSpec`` (field paths relative to the ``sft`` section)."""
    v: list[Violation] = []
    if (s.source == "trajectories") != (s.trajectories is not None):
        v.append(
            Violation(
                "sft.trajectories_file",
                "trajectories",
                f"source is {s.source!r} but trajectories is {s.trajectories!r}: give the JSONL file with "
                "source: trajectories, and no file with source: reference_solutions",
            )
        )
    if (s.init == "checkpoint") != bool(s.checkpoint):
        v.append(
            Violation(
                "sft.init_checkpoint",
                "checkpoint",
                f"init is {s.init!r} but checkpoint is {s.checkpoint!r}: init: checkpoint needs a "
                "checkpoint path, init: random takes none",
            )
        )
    return v


__all__ = ["SftSpec", "sft_violations"]
