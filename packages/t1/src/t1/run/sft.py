"""The SFT phase of a recipe (``t1 sft``): expert conversations, stitched samples, the fit, the weights.

Expert conversations come from the recipe's ``sft`` section: each task's reference solution replayed by a
scripted agent through the real harness, sandbox and verifier (`t1_rollout.expert`), or a recorded JSONL
file (``docs/sft.md``). They are stitched with the run's own tokenizer, chat template and TITO session
(`t1_rollout.expert.samples_from_messages`) and fitted by `t1_trainer.sft.train_sft`.

The SFT directory (``sft.output``, default ``<logging.run_root>/<name>-sft``)::

    recipe.yaml                 the resolved recipe
    expert.jsonl                the expert conversations trained on, one per line (the JSONL input format)
    metrics.jsonl               one row per epoch: {"phase": "sft", "epoch", "sft/loss", ...}
    summary.json                counts, the first and last loss, the wall time
    weights/actor.safetensors   the fitted actor, what ``model.checkpoint: <output>`` loads in ``t1 train``
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1_spec import Recipe, SftSpec, recipe_to_yaml


@dataclass
class SftResult:
    """What one ``t1 sft`` run did.

    Attributes:
        output: the SFT directory.
        conversations: expert conversations trained on.
        dropped: ``task_id: cause`` for each reference replay left out (failed trial, or not every assertion
            passed with ``sft.require_pass``).
        samples: stitched samples (a conversation gives more than one when TITO split it).
        loss_tokens: assistant tokens per epoch.
        epochs: each epoch's metrics row (``metrics.jsonl``).
        weights: the written actor file.
        time_s: wall time, seconds (replays, stitching and training).
    """

    output: Path
    conversations: int = 0
    dropped: list[str] = field(default_factory=list)
    samples: int = 0
    loss_tokens: int = 0
    epochs: list[dict[str, Any]] = field(default_factory=list)
    weights: Path | None = None
    time_s: float = 0.0


def sft_output(recipe: Recipe) -> Path:
    """The SFT directory of ``recipe``: ``sft.output``, else ``<logging.run_root>/<name>-sft``.

    Raises:
        ValueError: the recipe has no ``sft`` section.
    """
    spec = _spec(recipe)
    return Path(spec.output) if spec.output else Path(recipe.logging.run_root) / f"{recipe.name}-sft"


def _spec(recipe: Recipe) -> SftSpec:
    if recipe.sft is None:
        raise ValueError(
            "the recipe has no sft section: add one (e.g. `sft: {source: reference_solutions}`, see "
            "docs/sft.md) or pass +sft.source=reference_solutions"
        )
    return recipe.sft


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """Recorded expert conversations, one JSON object per line: ``{"task_id", "messages", "family"?}``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not such an object, naming the file and line number.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"sft.trajectories {str(p)!r}: no such file")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"sft.trajectories {p}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            raise ValueError(f"sft.trajectories {p}:{n}: an object with a string 'task_id' is needed")
        if not isinstance(row.get("messages"), list) or not row["messages"]:
            raise ValueError(f"sft.trajectories {p}:{n}: 'messages' must be a non-empty list")
        out.append(row)
    if not out:
        raise ValueError(f"sft.trajectories {p}: no conversations")
    return out


async def _replay_all(recipe: Recipe, tito: Any, out_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Replay each task's reference solution through the harness, sandbox and verifier, a few at a time."""
    from t1.run.build import sandbox_factory
    from t1.run.pools import load_one
    from t1_rollout.engine import SamplingParams
    from t1_rollout.expert import ScriptedEngine, expert_texts
    from t1_rollout.harness import HarnessConfig
    from t1_rollout.trial import TrialLimits, run_trial

    spec = _spec(recipe)
    pool = load_one("sft.pool" if spec.pool else "pool", spec.pool or recipe.pool)
    factory = sandbox_factory(recipe)
    harness = HarnessConfig.from_spec(recipe.rollout)
    limits = TrialLimits.from_spec(recipe.rollout)
    gate = asyncio.Semaphore(recipe.rollout.concurrency)

    async def one(task: Any) -> tuple[dict[str, Any] | None, str | None]:
        if not task.has_solution:  # Harbor allows a bundle without one: there is no expert to replay
            return None, f"{task.id}: no solution/solve.sh in its bundle, so no expert trajectory"
        script = (task.solution_dir / "solve.sh").read_text(encoding="utf-8")
        texts = expert_texts(script)
        engine = ScriptedEngine(tito, texts)
        need = max(len(engine.encode(t)) for t in texts)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=max(need, harness.max_new_tokens))
        async with gate:
            rec = await run_trial(
                task,
                sandbox_factory=factory,
                engine=engine,
                tito=tito,
                sampling=sampling,
                harness=_uncapped(harness, need),
                limits=limits,
                reward_spec=recipe.reward,
                out_dir=out_dir,
            )
        if rec.status != "finished" or rec.reward is None or rec.episode is None:
            return None, f"{task.id}: {rec.cause or rec.status}"
        r = rec.reward
        if spec.require_pass and (r.total == 0 or r.passed < r.total):
            return None, f"{task.id}: the reference solution passed {r.passed} of {r.total} assertions"
        row = {
            "task_id": task.id,
            "family": task.category,
            "messages": rec.episode.messages,
            "reward": r.value,
            "passed": r.passed,
            "total": r.total,
        }
        return row, None

    results = await asyncio.gather(*(one(t) for t in pool))
    rows = [r for r, _ in results if r is not None]
    return rows, [d for _, d in results if d is not None]


def _uncapped(harness: Any, need: int) -> Any:
    """The harness limits with room for the expert's longest turn (the expert is never cut at a token cap)."""
    from dataclasses import replace

    return replace(harness, max_new_tokens=max(harness.max_new_tokens, need))


def expert_conversations(recipe: Recipe, tito: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The expert conversations of the recipe's ``sft`` section, and the replays left out with their cause.

    Raises:
        ValueError: no sft section, a pool that does not load, an unreadable trajectories file.
        FileNotFoundError: no trajectories file.
    """
    spec = _spec(recipe)
    if spec.source == "trajectories":
        assert spec.trajectories is not None  # the spec's rule
        return read_trajectories(spec.trajectories), []
    with tempfile.TemporaryDirectory(prefix="t1-sft-verifier-") as tmp:
        return asyncio.run(_replay_all(recipe, tito, Path(tmp)))


def run_sft(
    recipe: Recipe, *, overwrite: bool = False, on_epoch: Callable[[dict[str, Any]], None] | None = None
) -> SftResult:
    """Run the recipe's SFT phase end to end and write the SFT directory (module docstring).

    Args:
        recipe: a recipe with an ``sft`` section.
        overwrite: replace an existing SFT directory; without it an existing one is refused.
        on_epoch: called with each epoch's ``metrics.jsonl`` row.

    Returns:
        The `SftResult`.

    Raises:
        FileExistsError: the SFT directory exists and ``overwrite`` is off.
        ValueError: no sft section; no expert conversation survived (every replay failed); a conversation
            that does not stitch.
    """
    import torch

    from t1_policy import build_model
    from t1_rollout.expert import samples_from_messages
    from t1_tito import ChatTemplate, TitoSession, load_tokenizer
    from t1_trainer.checkpoint import load_actor
    from t1_trainer.sft import save_actor, train_sft

    t0 = time.monotonic()
    spec = _spec(recipe)
    out = sft_output(recipe)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"sft.output {str(out)!r} exists: pass --overwrite to replace it")
        shutil.rmtree(out)
    tito = TitoSession(
        load_tokenizer(recipe.model.tokenizer),
        ChatTemplate(),
        repair=recipe.tito.repair,
        normalize_max_s=recipe.tito.normalize_max_s,
        normalize_max_u=recipe.tito.normalize_max_u,
    )
    rows, dropped = expert_conversations(recipe, tito)
    if not rows:
        raise ValueError("sft: no expert conversation to train on; left out: " + "; ".join(dropped))
    samples = []
    for k, row in enumerate(rows):
        samples += samples_from_messages(
            tito,
            row["messages"],
            task_id=row["task_id"],
            trial_id=f"{row['task_id']}__expert{k}",
            family=str(row.get("family", "")),
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(recipe_to_yaml(recipe), encoding="utf-8")
    with (out / "expert.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    model = build_model(recipe.model, seed=recipe.seed, dtype=getattr(torch, recipe.model.dtype))
    if spec.init == "checkpoint":
        assert spec.checkpoint is not None  # the spec's rule
        load_actor(model, spec.checkpoint)
    result = SftResult(output=out, conversations=len(rows), dropped=dropped, samples=len(samples))
    metrics = (out / "metrics.jsonl").open("w", encoding="utf-8")

    def log(epoch: Any) -> None:
        row = epoch.to_json()
        metrics.write(json.dumps(row) + "\n")
        metrics.flush()
        result.epochs.append(row)
        if on_epoch is not None:
            on_epoch(row)

    with metrics:
        epochs = train_sft(model, samples, spec, seed=recipe.seed, device=recipe.trainer.device, on_epoch=log)
    result.weights = save_actor(model, out)
    result.loss_tokens = epochs[0].tokens
    result.time_s = time.monotonic() - t0
    summary = {
        "conversations": result.conversations,
        "dropped": dropped,
        "samples": result.samples,
        "loss_tokens_per_epoch": result.loss_tokens,
        "epochs": len(epochs),
        "loss_first": epochs[0].loss,
        "loss_last": epochs[-1].loss,
        "token_accuracy_last": epochs[-1].token_accuracy,
        "time_s": result.time_s,
        "weights": str(result.weights),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return result
