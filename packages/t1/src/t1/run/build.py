"""Build a run's components from the recipe, each through its seam's registry.

The loop never names a backend class: the engine, the sandbox and the trainer backend are whatever the
registries hold for ``engine.kind``, ``sandbox.kind`` and ``trainer.backend``, each built by its own
``from_spec``. Heavy imports (torch, transformers) happen here, not when the CLI starts.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1.run.pools import load_pools, load_validation
from t1_spec import PoolSpec, Recipe
from t1_tasks import Pool

if TYPE_CHECKING:  # the parts' protocols and types; importing them at run time would load torch
    import torch

    from t1_rollout.engine import SamplingParams
    from t1_rollout.engine.base import Engine
    from t1_rollout.harness import HarnessConfig
    from t1_rollout.scheduler import SchedulerConfig
    from t1_rollout.trial import TrialLimits
    from t1_sandbox.base import Sandbox
    from t1_tito import TitoSession
    from t1_trainer.base import TrainerBackend


@dataclass
class Components:
    """Everything one run uses, built once before its first step.

    Attributes:
        pool: the training pool.
        warmup_pool: the critic warm-up pool (the training pool unless ``critic_warmup.pool`` names one).
        warmup_pool_spec: the spec of ``warmup_pool`` (its shuffle and seed order the warm-up draws).
        tito: the tokenizer and chat template session that stitches samples.
        engine: the inference engine (``engine.kind``).
        backend: the trainer backend (``trainer.backend``).
        sandbox_factory: makes one fresh sandbox per trial (``sandbox.kind``).
        sampling, harness, limits, scheduler: the rollout settings, built from the recipe's sections.
        validated: task id -> its row of the pools' validation records (``pool.validation``,
            ``critic_warmup.pool.validation``); empty without one.
    """

    pool: Pool
    warmup_pool: Pool
    warmup_pool_spec: PoolSpec
    tito: TitoSession
    engine: Engine
    backend: TrainerBackend
    sandbox_factory: Callable[[], Sandbox]
    sampling: SamplingParams
    harness: HarnessConfig
    limits: TrialLimits
    scheduler: SchedulerConfig
    validated: dict[str, Any] = dataclasses.field(default_factory=dict)


def build_engine(recipe: Recipe, actor_weights: str | Path | None = None) -> tuple[torch.nn.Module, Engine]:
    """The policy model of ``model`` (seeded, or the saved actor weights) and the engine serving it.

    Args:
        recipe: the recipe (``model``, ``engine``, ``seed``).
        actor_weights: a run directory or ``.safetensors`` file loaded into the model with
            `t1_trainer.checkpoint.load_actor`; None keeps the seeded random weights.

    Returns:
        ``(model, engine)``; the engine owns the model.

    Raises:
        FileNotFoundError: no actor weights at ``actor_weights``.
        t1_trainer.checkpoint.CheckpointMismatchError: the weights do not fit the recipe's model.
    """
    from t1_rollout.engine import ENGINES

    r = recipe
    model = build_policy(r, actor_weights)
    return model, ENGINES.load(r.engine.kind).from_spec(r.engine, model=model, seed=r.seed, recipe=r)


def build_policy(recipe: Recipe, actor_weights: str | Path | None = None) -> torch.nn.Module:
    """The policy model of ``model`` alone (seeded, or the saved actor weights), with no engine.

    Raises:
        FileNotFoundError: no actor weights at ``actor_weights``.
        t1_trainer.checkpoint.CheckpointMismatchError: the weights do not fit the recipe's model.
    """
    import torch

    from t1_policy import build_model

    model = build_model(recipe.model, seed=recipe.seed, dtype=getattr(torch, recipe.model.dtype))
    if actor_weights is not None:
        from t1_trainer.checkpoint import load_actor

        load_actor(model, actor_weights)
    return model


def default_run_id(recipe: Recipe) -> str:
    """The id that labels this run's sandboxes: ``$T1_RUN_ID``, else ``<name>-<host>-<pid>-<unix time>``."""
    here = f"{socket.gethostname()}-{os.getpid()}-{int(time.time())}"
    return os.environ.get("T1_RUN_ID") or f"{recipe.name}-{here}"


def sandbox_factory(recipe: Recipe, run_id: str | None = None) -> Callable[[], Sandbox]:
    """Makes one fresh, unstarted sandbox of ``sandbox.kind`` per call.

    Each gets the section and what its backend takes from the run (``Sandbox.run_options``: the run id,
    the recipe's creation pacing); ``run_id`` defaults to `default_run_id`.
    """
    from t1_sandbox import SANDBOXES

    sandbox_cls = SANDBOXES.load(recipe.sandbox.kind)
    options = sandbox_cls.run_options(recipe, run_id=run_id or default_run_id(recipe))
    return lambda: sandbox_cls.from_spec(recipe.sandbox, **options)


def build_tito(recipe: Recipe) -> TitoSession:
    """The TITO session of the recipe: its tokenizer (``model.tokenizer``), the chat template, ``tito``."""
    from t1_tito import ChatTemplate, TitoSession, load_tokenizer

    return TitoSession(
        load_tokenizer(recipe.model.tokenizer),
        ChatTemplate(),
        repair=recipe.tito.repair,
        normalize_max_s=recipe.tito.normalize_max_s,
        normalize_max_u=recipe.tito.normalize_max_u,
    )


def build(recipe: Recipe) -> Components:
    """Load the pools, the tokenizer, the policy model, the engine and the trainer backend.

    The engine and the trainer's actor start from the same weights (one build, one deep copy): seeded, or
    the actor file of ``model.checkpoint`` with ``model.init: checkpoint`` (e.g. what ``t1 sft`` wrote), so
    the first step's samples are scored by exactly the sampler's policy; the critic's body starts from them
    too.

    Raises:
        ValueError: a pool does not load or is too small for one step (`t1.run.pools.load_pools`).
    """
    from t1_rollout.engine import SamplingParams
    from t1_rollout.harness import HarnessConfig
    from t1_rollout.scheduler import SchedulerConfig
    from t1_rollout.trial import TrialLimits
    from t1_trainer.base import TRAINER_BACKENDS

    r = recipe
    pool, warmup_pool, warm = load_pools(r)
    make_sandbox = sandbox_factory(r)  # before the model: the local launch server starts with the run
    tito = build_tito(r)
    model, engine = build_engine(r, r.model.checkpoint if r.model.init == "checkpoint" else None)
    backend = TRAINER_BACKENDS.load(r.trainer.backend).from_spec(r, actor=copy.deepcopy(model))
    return Components(
        pool=pool,
        warmup_pool=warmup_pool,
        warmup_pool_spec=warm,
        tito=tito,
        engine=engine,
        backend=backend,
        sandbox_factory=make_sandbox,
        sampling=SamplingParams.from_spec(
            r.engine.sampling, max_new_tokens=r.rollout.max_new_tokens, seed=r.seed
        ),
        harness=HarnessConfig.from_spec(r.rollout),
        limits=TrialLimits.from_spec(r.rollout),
        scheduler=SchedulerConfig.from_spec(r.rollout, samples_per_task=r.ppo.samples_per_task),
        validated=validated_rows(r, pool, warmup_pool, warm),
    )


def validated_rows(recipe: Recipe, pool: Pool, warmup_pool: Pool, warm: PoolSpec) -> dict[str, Any]:
    """Task id -> validation row, from ``pool.validation`` and the warm-up pool's (`load_validation`)."""
    rows: dict[str, Any] = {}
    pairs = [("pool", recipe.pool, pool)]
    if warm is not recipe.pool:
        pairs.append(("critic_warmup.pool", warm, warmup_pool))
    for name, spec, p in pairs:
        record = load_validation(name, spec, p)
        if record is not None:
            rows.update({t.id: record.get(t.id) for t in p if record.get(t.id) is not None})
    return rows
