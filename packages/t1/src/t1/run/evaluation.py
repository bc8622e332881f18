"""Evaluation during training: the suites of ``evaluation.suites`` on the weights just published (T1 §6).

The driver (`t1.run.driver`) calls `evaluate_suites` every ``evaluation.every_steps`` PPO steps, after the
publication; the runtime gives the engine and the sandboxes (`t1.run.runtime.Runtime.evaluation_parts`:
the run's own engine in process, a live replica on Ray).
"""

from __future__ import annotations

import asyncio

from rich.console import Console

from t1.run import console as out
from t1.run.run_dir import RunDir
from t1.run.runtime import EvaluationParts
from t1.run.signals import StopToken, run_interruptible
from t1_spec import Recipe


def evaluate_suites(
    recipe: Recipe,
    parts: EvaluationParts,
    step: int,
    *,
    rundir: RunDir,
    runner: asyncio.Runner,
    stop: StopToken,
    console: Console,
) -> None:
    """Run the model policy on every ``evaluation.suites`` pool with ``parts.engine``'s weights (T1 §6).

    One ``{"phase": "evaluation", "step": ..., "suite": ...}`` row per suite goes to ``metrics.jsonl``
    (the figures of `t1_rollout.eval_metrics.summarize`) and one line to the console. Evaluation samples
    with its own seeds (`t1_rollout.evaluate.ModelPolicy.attempt_seed`) and draws no training task, so
    the training's rows do not depend on it; its verifier files go to ``evaluation/step-NNNN/``.

    Args:
        recipe: the run's recipe.
        parts: the engine, sandbox factory and template to evaluate with.
        step: the PPO step just trained (0-based).
        rundir: the run directory.
        runner: the run's event loop.
        stop: the run's stop token (checked before each suite).
        console: where the line goes.
    """
    from t1_rollout.evaluate import EvalSettings, ModelPolicy, evaluate_pool
    from t1_tasks import load_pool
    from t1_tito import TitoSession

    r = recipe
    settings = EvalSettings.from_recipe(r)
    tito = TitoSession(parts.tokenizer, parts.template, thinking=r.evaluation.thinking)
    for i, suite in enumerate(r.evaluation.suites):
        stop.check()
        policy = ModelPolicy(
            engine=parts.engine,
            tito=tito,
            settings=settings,
            sandbox_factory=parts.sandbox_factory,
            reward_spec=r.reward,
            seed=r.seed,
            label=f"eval-step-{step:04d}-{suite}",
        )
        report = run_interruptible(
            evaluate_pool(
                load_pool(suite),
                policy,
                attempts=settings.attempts,
                concurrency=settings.concurrency,
                total_timeout_s=settings.total_timeout_s,
                work_dir=rundir.root / "evaluation" / f"step-{step:04d}" / f"suite-{i}",
            ),
            runner,
        )
        row = {
            "phase": "evaluation",
            "step": step,
            "suite": suite,
            "weight_version": parts.version,
            **report.summary(),
            "wall_s": report.wall_s,
        }
        rundir.append_metrics(row)
        k = settings.attempts
        console.print(
            f"[bold]evaluation[/] after step {step + 1} on {suite}: resolved "
            f"{out.fmt(row['resolved_rate'])}, reward {out.fmt(row['mean_reward'])}, pass@{k} "
            f"{out.fmt(row['pass_at_k'][k])} over {row['trials']} trials ({row['failed']} failed) in "
            f"{report.wall_s:.1f} s",
            highlight=False,
        )
        out.print_warnings(console, row)


__all__ = ["evaluate_suites"]
