"""Checkpoints that hold a whole run state, and resuming a run from the latest one (``t1 train --resume``).

Every ``trainer.checkpoint_every`` PPO steps the loop saves, in the run directory::

    checkpoints/step-NNNN/
        weights/actor.safetensors    the actor under Hugging Face names (loadable by transformers and
                                     by `t1_trainer.checkpoint.load_actor`), by `save_weights`
        weights/critic.safetensors   the critic module as the backend holds it
        state/optimizer.pt           both optimizer states, ``{"actor": ..., "critic": ...}``
                                     (``torch.save``); only with ``trainer.checkpoint_optimizer: true``
        state/rollout_buffer.jsonl   the rollout buffer, one JSON record a line (empty: see below)
        state/state.json             everything else, written last (its presence marks the checkpoint whole)

``state.json`` holds ``format`` (``"t1-run-state"``) and ``version`` (`STATE_VERSION`); ``recipe_identity``,
the SHA-256 of the resolved recipe less the fields a resume may change (`RESUME_FREE_FIELDS`); the step
counters ``ppo_steps`` and ``warmup_steps``; ``weight_version`` (the engine's, T1 Appendix 12);
``backend_counters`` (the trainer backend's own counters that steer later steps: ``actor_updates``, the
cadence of ``trainer.logprob_gap_every``; ``version``, its actor optimizer steps; ``policy_version``, the
weight version it last published); ``task_stream``, the position of the PPO pool's draws
(`t1_tasks.StepTasks.position`: epoch, offset, deferred draws); ``rng``, the states of Python's ``random``,
NumPy's global generator and torch's CPU (and CUDA) generators in the trainer's process; ``metrics_rows``,
the lines of ``metrics.jsonl`` written up to the checkpoint; ``rollout_buffer``, its record count
(``records``) and the PPO steps whose batch it holds (``steps``); ``files``, the byte size of every file
above.

One layout, written from one or two processes. The trainer's part (``weights/``, ``state/optimizer.pt``,
the counters and the RNG states) is written by `save_trainer_state` and loaded by `restore_trainer` in the
process that holds the trainer backend: the in-process runtime's one process, or the Ray runtime's trainer
worker (`t1.run.ray.actors.TrainerWorker`), writing to the run directory the driver names. The driver writes
the rest with `save_state` and reads it with `load_state`; a file the trainer wrote that the driver cannot see
at its size is refused at once (on a multi-node Ray cluster the run directory must be shared storage).
In the Ray runtime the driver and the engine replicas draw from no global generator (every trial samples
with a generator seeded by the recipe seed, its step and its slot), so the trainer's states are the ones
saved.

A synchronous run keeps no rollout buffer between steps (every step's batch is trained on in that step), so
its ``rollout_buffer.jsonl`` is empty (``"records": 0``, ``"steps": []``). The asynchronous pipeline of the
step driver (`t1.run.driver`) has the next steps' batches rolled out at a barrier (up to
``runtime.max_staleness``): it passes them to `save_state` as ``rollout_buffer`` (JSON-ready records, one
`t1.run.steps.InFlight.to_records` after the other) with the steps they belong to, and reads them back from
`RunState.rollout_buffer` (`t1.run.steps.buffered_batches`).

Resuming (`open_run`, then `load_state` and `restore`) rebuilds the run from its ``recipe.yaml``, loads the
latest whole checkpoint into the trainer, the engine and the task stream, sets the RNG states last, and
continues with the next PPO step in the same run directory: ``metrics.jsonl`` is appended to (rows written
after the checkpoint by the interrupted process move to ``metrics.superseded.jsonl``), and ``status.json``
names the checkpoint (``resumed_from``). With ``trainer.checkpoint_optimizer: false`` (the paper's setting,
T1 §7: weights only, a crash means restart) the checkpoint has no optimizer state and a resume is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from t1_spec import Recipe

__all__ = [
    "BACKEND_COUNTERS",
    "RESUME_FREE_FIELDS",
    "STATE_VERSION",
    "ResumeError",
    "RunState",
    "latest_checkpoint",
    "load_engines",
    "load_state",
    "open_run",
    "recipe_identity",
    "restore",
    "restore_stream",
    "restore_trainer",
    "save_state",
    "save_trainer_state",
    "supersede_after",
]

STATE_VERSION = 1
"""The layout version of ``state.json`` and its folder; a resume refuses any other."""

FORMAT = "t1-run-state"

RESUME_FREE_FIELDS = (
    "ppo.steps",
    "ppo.epochs",
    "trainer.checkpoint_every",
    "trainer.checkpoint_optimizer",
    "logging.print_table",
    "logging.tensorboard",
)
"""Recipe fields a resume may override: how long the run goes on, what it saves, how it prints. Any other
field changes what the next steps compute (the run's identity), so ``t1 train --resume`` refuses it."""

BACKEND_COUNTERS = ("actor_updates", "version", "policy_version")
"""Integer attributes of a trainer backend saved and restored when it has them (see the module docstring)."""


class ResumeError(ValueError):
    """A run cannot be resumed; the message names the file or the field.

    Its state is missing, corrupt or of another recipe, or an override would change the run's identity.
    """


@dataclass
class RunState:
    """A checkpoint's run state as `load_state` read it (the fields of ``state.json``, see the module).

    Attributes:
        checkpoint: the checkpoint folder, ``<run>/checkpoints/step-NNNN``.
        ppo_steps: PPO steps completed when it was saved.
        warmup_steps: critic warm-up steps completed (all of them: checkpoints follow PPO steps).
        weight_version: the engine's weight version.
        backend_counters: name -> value of the backend's `BACKEND_COUNTERS` it had.
        task_stream: the PPO task stream's position (`t1_tasks.StepTasks.position`).
        rng: the generators' states (``python``, ``numpy``, ``torch``, ``cuda``).
        metrics_rows: lines of ``metrics.jsonl`` up to the checkpoint.
        rollout_buffer: the records the loop passed to `save_state` (empty for the in-process runtime).
        buffered_steps: the PPO steps whose batch ``rollout_buffer`` holds (empty for the in-process runtime).
    """

    checkpoint: Path
    ppo_steps: int
    warmup_steps: int
    weight_version: int
    backend_counters: dict[str, int]
    task_stream: dict[str, Any]
    rng: dict[str, Any]
    metrics_rows: int
    rollout_buffer: list[dict[str, Any]] = field(default_factory=list)
    buffered_steps: list[int] = field(default_factory=list)


def recipe_identity(resolved: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the resolved recipe as plain data, less `RESUME_FREE_FIELDS`."""
    data = json.loads(json.dumps(resolved, default=str))
    for path in RESUME_FREE_FIELDS:
        section, key = path.split(".")
        data.get(section, {}).pop(key, None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def save_trainer_state(checkpoint: Path, backend: Any, *, optimizer: bool) -> dict[str, Any]:
    """Write the trainer's part of a checkpoint, in the process that holds the trainer backend.

    The in-process runtime calls it through `save_state`; the Ray runtime calls it in its trainer worker (its
    own process, `t1.run.ray.actors.TrainerWorker.save_checkpoint`) and hands the result to `save_state`,
    so both runtimes write one layout.

    Args:
        checkpoint: the folder, ``<run>/checkpoints/step-NNNN`` (``weights/`` and ``state/`` are created).
        backend: the trainer backend (``actor``, ``critic``, ``actor_opt``, ``critic_opt``, its counters).
        optimizer: also write both optimizer states (``trainer.checkpoint_optimizer``).

    Returns:
        JSON-ready: ``files`` (name under ``checkpoint`` -> bytes), ``backend_counters`` (its
        `BACKEND_COUNTERS`) and ``rng`` (this process's generators, `t1_trainer.rng.rng_state`).
    """
    import torch

    from t1_trainer.rng import rng_state
    from t1_trainer.weights import save_weights

    files = save_weights(backend, checkpoint)
    state_dir = checkpoint / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    sized = {f"weights/{p.name}": p for p in files.values()}
    if optimizer:
        opt = state_dir / "optimizer.pt"
        torch.save({"actor": backend.actor_opt.state_dict(), "critic": backend.critic_opt.state_dict()}, opt)
        sized["state/optimizer.pt"] = opt
    return {
        "files": {name: p.stat().st_size for name, p in sized.items()},
        "backend_counters": {n: int(getattr(backend, n)) for n in BACKEND_COUNTERS if hasattr(backend, n)},
        "rng": rng_state(),
    }


def save_state(
    checkpoint: Path,
    *,
    recipe: Recipe,
    resolved: Mapping[str, Any],
    stream: Any,
    ppo_steps: int,
    warmup_steps: int,
    metrics_rows: int,
    backend: Any = None,
    engine: Any = None,
    trainer: Mapping[str, Any] | None = None,
    weight_version: int | None = None,
    rollout_buffer: Sequence[Mapping[str, Any]] = (),
    buffered_steps: Sequence[int] = (),
) -> Path:
    """Write a whole run state into ``checkpoint`` (the layout of the module docstring).

    The trainer's part comes from ``backend`` (saved here, `save_trainer_state`) or, when the backend lives
    in another process, from ``trainer`` (what `save_trainer_state` returned there); each of its files must
    then be visible here at the size the trainer wrote (on a multi-node cluster: the run directory on
    storage shared at one path). ``state.json`` is written last, through a temporary file and a rename, so
    a process killed while saving leaves a folder without it, which `latest_checkpoint` passes over.

    Args:
        checkpoint: the folder, ``<run>/checkpoints/step-NNNN`` (created).
        recipe: the run's recipe (``trainer.checkpoint_optimizer`` says whether optimizer states go in).
        resolved: the resolved recipe as plain data (its `recipe_identity` goes in).
        stream: the PPO task stream (`t1_tasks.StepTasks`).
        ppo_steps: PPO steps completed.
        warmup_steps: critic warm-up steps completed.
        metrics_rows: lines of ``metrics.jsonl`` written so far.
        backend: the trainer backend, in this process; or None with ``trainer``.
        engine: the engine (its ``weight_version``); or None with ``weight_version``.
        trainer: the trainer's part, written by `save_trainer_state` in the trainer's process.
        weight_version: the engines' weight version, without ``engine``.
        rollout_buffer: JSON-ready records of trials the loop carries into the next step.
        buffered_steps: the PPO steps whose batch ``rollout_buffer`` holds (their ``trajectories/``
            folders are kept by `supersede_after`).

    Returns:
        The path of ``state.json``.

    Raises:
        ValueError: not exactly one of ``backend`` and ``trainer``, or of ``engine`` and ``weight_version``.
        RuntimeError: a file ``trainer`` lists is missing here or of another size (naming it).
    """
    if (backend is None) == (trainer is None) or (engine is None) == (weight_version is None):
        raise ValueError("save_state: give backend or trainer, and engine or weight_version (one of each)")
    if trainer is None:
        trainer = save_trainer_state(checkpoint, backend, optimizer=recipe.trainer.checkpoint_optimizer)
    for name, size in trainer["files"].items():
        f = checkpoint / name
        if not f.is_file() or f.stat().st_size != size:
            raise RuntimeError(
                f"{f}: the trainer wrote {size} bytes there, but this process "
                f"{'sees ' + str(f.stat().st_size) + ' bytes' if f.is_file() else 'does not see it'}; the "
                "run directory must be one folder for the driver and the trainer (shared storage, mounted at "
                "the same path on every node of the cluster)"
            )
    state_dir = checkpoint / "state"
    state_dir.mkdir(parents=True, exist_ok=True)
    buffer = state_dir / "rollout_buffer.jsonl"
    buffer.write_text("".join(json.dumps(rec, default=str) + "\n" for rec in rollout_buffer))
    files = {**trainer["files"], "state/rollout_buffer.jsonl": buffer.stat().st_size}
    payload = {
        "format": FORMAT,
        "version": STATE_VERSION,
        "recipe_identity": recipe_identity(resolved),
        "ppo_steps": ppo_steps,
        "warmup_steps": warmup_steps,
        "weight_version": int(engine.weight_version if engine is not None else weight_version),
        "backend_counters": dict(trainer["backend_counters"]),
        "task_stream": stream.position(),
        "rng": trainer["rng"],
        "metrics_rows": metrics_rows,
        "rollout_buffer": {"records": len(rollout_buffer), "steps": [int(k) for k in buffered_steps]},
        "files": files,
    }
    path = state_dir / "state.json"
    tmp = state_dir / "state.json.tmp"
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
    return path


def latest_checkpoint(run_dir: Path) -> Path:
    """The checkpoint folder of ``run_dir`` with the most PPO steps whose ``state/state.json`` exists.

    Raises:
        ResumeError: no such checkpoint, naming the folder looked in (a run with ``checkpoint_every: 0``, or
            killed before its first checkpoint, or saved before run states were written).
    """
    folder = run_dir / "checkpoints"
    whole = sorted(p for p in folder.glob("step-*") if (p / "state" / "state.json").is_file())
    if not whole:
        raise ResumeError(
            f"{folder}: no checkpoint with a run state (state/state.json) to resume from; a run saves one "
            "every trainer.checkpoint_every PPO steps (0 = never)"
        )
    return whole[-1]


def open_run(run_dir: str | Path, overrides: Sequence[str] = ()) -> tuple[Recipe, dict[str, Any], Path]:
    """The recipe of a run directory, with the overrides a resume allows, and its latest checkpoint.

    Cheap (no torch): it reads ``recipe.yaml`` and the checkpoint's ``state.json`` and checks both, so a
    resume that cannot work is refused before anything is built.

    Args:
        run_dir: the run directory (it holds ``recipe.yaml`` and ``checkpoints/``).
        overrides: dotlist overrides; only `RESUME_FREE_FIELDS` may change.

    Returns:
        ``(recipe, resolved, checkpoint)``: the validated recipe, it as plain data, the checkpoint folder.

    Raises:
        ResumeError: ``run_dir`` is not a folder or has no ``recipe.yaml``; its driver still runs on this
            host (``status.json`` says ``running`` and the process is alive); an override changes another
            field (each named); no whole checkpoint; its ``state.json`` is unreadable, of another format or
            version, or of another recipe; the recipe has ``trainer.checkpoint_optimizer: false`` in the
            checkpoint (no optimizer state).
        RecipeError: ``recipe.yaml`` or an override does not validate.
    """
    from t1_spec import load_recipe

    root = Path(run_dir)
    recipe_file = root / "recipe.yaml"
    if not root.is_dir():
        what = "not a directory" if root.exists() else "no such directory"
        raise ResumeError(f"--resume {root}: {what}; --resume takes a run directory that t1 train wrote")
    if not recipe_file.is_file():
        raise ResumeError(f"{recipe_file}: not found; --resume takes a run directory that t1 train wrote")
    _refuse_a_live_run(root)
    base = load_recipe(recipe_file).model_dump(mode="json", by_alias=True)
    recipe = load_recipe(recipe_file, list(overrides))
    resolved = recipe.model_dump(mode="json", by_alias=True)
    changed = sorted(p for p in _diff(base, resolved) if p not in RESUME_FREE_FIELDS)
    if changed:
        raise ResumeError(
            f"--resume {root}: the overrides change {', '.join(changed)}, which would change what the run "
            f"computes from here; a resume may only change {', '.join(RESUME_FREE_FIELDS)}"
        )
    checkpoint = latest_checkpoint(root)
    payload = _read_state(checkpoint / "state" / "state.json")
    if payload["recipe_identity"] != recipe_identity(resolved):
        raise ResumeError(
            f"{checkpoint / 'state' / 'state.json'}: saved by a run of another recipe than {recipe_file} "
            "(the recipe identities differ); resume a run with the recipe.yaml it was started with"
        )
    return recipe, resolved, checkpoint


def _refuse_a_live_run(root: Path) -> None:
    """Refuse to resume a run whose driver still runs on this host (two drivers would share its files).

    A run whose driver died (``t1.run.status.read_status`` says ``killed``) resumes like an interrupted one.
    """
    from t1.run.status import driver_alive, read_status

    try:
        status = read_status(root)
    except (OSError, ValueError):
        return  # no or a torn status: the checkpoint decides
    driver = status.get("driver") or {}
    if status.get("status") == "running" and driver_alive(status) and driver.get("pid") != os.getpid():
        raise ResumeError(
            f"--resume {root}: the run is still running (driver pid {driver['pid']} on {driver['host']}); "
            "stop it first (Ctrl-C or SIGTERM leaves a resumable checkpoint)"
        )


def load_state(checkpoint: Path) -> RunState:
    """Read the run state of a checkpoint folder and check its files are all there at the saved sizes.

    Raises:
        ResumeError: ``state.json`` missing, unreadable, of another format or version; a file it lists is
            missing or of another size (a copy cut short); no ``state/optimizer.pt`` (saved with
            ``trainer.checkpoint_optimizer: false``).
    """
    path = checkpoint / "state" / "state.json"
    payload = _read_state(path)
    for name, size in payload["files"].items():
        f = checkpoint / name
        if not f.is_file() or f.stat().st_size != size:
            found = f"{f.stat().st_size} bytes" if f.is_file() else "missing"
            raise ResumeError(f"{f}: {found}, but {path} recorded {size} bytes; the checkpoint is incomplete")
    if "state/optimizer.pt" not in payload["files"]:
        raise ResumeError(
            f"{checkpoint / 'state' / 'optimizer.pt'}: absent, the run saved weights only "
            "(trainer.checkpoint_optimizer: false, as in the paper: a crash means restart, T1 §7); an exact "
            "resume needs the optimizer states, so start the run with trainer.checkpoint_optimizer=true"
        )
    buffer = checkpoint / "state" / "rollout_buffer.jsonl"
    try:
        records = [json.loads(line) for line in buffer.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ResumeError(f"{buffer}: not readable as JSON lines ({exc})") from None
    return RunState(
        checkpoint=checkpoint,
        ppo_steps=payload["ppo_steps"],
        warmup_steps=payload["warmup_steps"],
        weight_version=payload["weight_version"],
        backend_counters=payload["backend_counters"],
        task_stream=payload["task_stream"],
        rng=payload["rng"],
        metrics_rows=payload["metrics_rows"],
        rollout_buffer=records,
        buffered_steps=[int(k) for k in payload.get("rollout_buffer", {}).get("steps", [])],
    )


def restore(state: RunState, *, backend: Any, engine: Any, stream: Any) -> None:
    """Load a checkpoint's run state into a freshly built run: weights, optimizers, counters, stream, RNG.

    The trainer's part as `restore_trainer` loads it; then the actor weights go from the backend to the
    engine under the saved weight version (`load_engines`: paused, updated, resumed, as a publication); the
    task stream's position is set (`restore_stream`); the RNG states are set last, after everything that
    could draw from them.

    Raises:
        ResumeError: a weights or optimizer file does not load, naming it; the backend lacks a counter the
            state holds; the backend's actor is not held under the Hugging Face names of the actor file
            (resuming the Megatron backend is not built); the task stream's position does not fit its pool.
    """
    restore_trainer(state, backend, rng=False)
    load_engines(backend, [engine], state.weight_version)
    restore_stream(state, stream)
    _set_rng(state)


def restore_trainer(state: RunState, backend: Any, *, rng: bool = True) -> None:
    """Load the trainer's part of a checkpoint into ``backend``, in the process that holds it.

    The actor (`t1_trainer.checkpoint.load_actor`) and the critic weights, both optimizer states and the
    backend's counters; with ``rng``, then this process's generator states (the trainer's: `save_state`
    takes them from the process that ran `save_trainer_state`). The Ray runtime's trainer worker calls it
    with the state less its rollout buffer.

    Raises:
        ResumeError: as `restore`, for the trainer's files and counters.
    """
    import torch

    from t1_trainer.checkpoint import load_actor

    ckpt = state.checkpoint
    actor_file = ckpt / "weights" / "actor.safetensors"
    own = set(backend.actor.state_dict())
    if not own >= set(backend.export_weights()):
        raise ResumeError(
            f"{actor_file}: the {type(backend).__name__} trainer holds its actor under other names than the "
            "Hugging Face ones of the file; resuming it is not built (the torch backend resumes)"
        )
    try:
        load_actor(backend.actor, actor_file)
        load_actor(backend.critic, ckpt / "weights" / "critic.safetensors")  # same checks, any module
    except Exception as exc:  # noqa: BLE001 - any failure to load is the checkpoint's, named by file
        raise ResumeError(f"checkpoint {ckpt}: the weights do not load ({exc})") from None
    opt_file = ckpt / "state" / "optimizer.pt"
    try:
        opts = torch.load(opt_file, map_location=backend.device, weights_only=True)
        backend.actor_opt.load_state_dict(opts["actor"])
        backend.critic_opt.load_state_dict(opts["critic"])
    except Exception as exc:  # noqa: BLE001
        raise ResumeError(f"{opt_file}: the optimizer states do not load ({exc})") from None
    for name, value in state.backend_counters.items():
        if not hasattr(backend, name):
            raise ResumeError(f"{ckpt / 'state' / 'state.json'}: the backend has no counter {name!r}")
        setattr(backend, name, int(value))
    if rng:
        _set_rng(state)


def load_engines(backend: Any, receivers: Sequence[Any], weight_version: int) -> float:
    """Give the restored actor weights to every receiver behind ``weight_version``, under that version.

    As a publication (`t1_trainer.publish.publish_weights`): all of them are paused first, the weights
    exported once, each receiver updated, and every paused one resumed even when an update fails; unlike
    a publication the version does not advance (it is the checkpoint's). Receivers already at the version
    (none, after a fresh build) are left alone.

    Args:
        backend: the trainer backend holding the restored actor.
        receivers: engines or replica receivers (``weight_version``, ``pause``, ``update_weights``,
            ``resume``).
        weight_version: the checkpoint's weight version.

    Returns:
        Wall time, seconds (pause to resume); 0 when no receiver was behind.
    """
    import time
    from contextlib import ExitStack

    behind = [r for r in receivers if r.weight_version < weight_version]
    if not behind:
        return 0.0
    t0 = time.monotonic()
    with ExitStack() as paused:
        for receiver in behind:
            receiver.pause()
            paused.callback(receiver.resume)
        weights = backend.export_weights()
        for receiver in behind:
            receiver.update_weights(weights, weight_version=weight_version)
    return time.monotonic() - t0


def restore_stream(state: RunState, stream: Any) -> None:
    """Put the PPO task stream (a fresh `t1_tasks.StepTasks`) at the checkpoint's position.

    Raises:
        ResumeError: the position does not fit the stream's pool (naming ``state.json``).
    """
    try:
        stream.restore(state.task_stream)
    except (KeyError, ValueError) as exc:
        raise ResumeError(f"{state.checkpoint / 'state' / 'state.json'}: task_stream: {exc}") from None


def _set_rng(state: RunState) -> None:
    from t1_trainer.rng import set_rng_state

    try:
        set_rng_state(state.rng)
    except (KeyError, ValueError, TypeError, RuntimeError) as exc:
        raise ResumeError(
            f"{state.checkpoint / 'state' / 'state.json'}: rng: not a generator state ({exc})"
        ) from None


def supersede_after(run_dir: Path, state: RunState) -> int:
    """Move what the interrupted process wrote after the checkpoint aside, so the resumed rows follow on.

    Of the lines of ``metrics.jsonl`` beyond ``state.metrics_rows``, those of a step the resumed run takes
    again (``"step"`` >= ``state.ppo_steps``, or unreadable) are appended to ``metrics.superseded.jsonl``;
    the evaluation rows of the checkpoint's own step, written after it, stay. The
    ``trajectories/step-NNNN`` folders of the steps to be rolled out again move under
    ``trajectories/superseded/``; those of the batches in the rollout buffer (`RunState.buffered_steps`,
    rolled out before the checkpoint and trained after it) stay.

    Returns:
        The number of metrics lines moved.
    """
    metrics = run_dir / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True) if metrics.is_file() else []
    keep, later = lines[: state.metrics_rows], []
    for line in lines[state.metrics_rows :]:
        (keep if _step_of(line) < state.ppo_steps else later).append(line)
    if later:
        with (run_dir / "metrics.superseded.jsonl").open("a") as fh:
            fh.writelines(later)
        tmp = run_dir / "metrics.jsonl.tmp"
        tmp.write_text("".join(keep))
        tmp.replace(metrics)
    for folder in sorted((run_dir / "trajectories").glob("step-*")):
        step = int(folder.name.split("-")[1])
        if step >= state.ppo_steps and step not in state.buffered_steps:
            dest = run_dir / "trajectories" / "superseded" / f"{folder.name}-{os.getpid()}"
            dest.parent.mkdir(exist_ok=True)
            shutil.move(str(folder), str(dest))
    return len(later)


def _step_of(line: str) -> float:
    """The ``step`` of a metrics line; infinity for a line that is not a row with one (a torn write)."""
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return float("inf")
    return step if isinstance(step, int) else float("inf")


def _read_state(path: Path) -> dict[str, Any]:
    """``state.json`` as a dict, checked for format, version and keys."""
    try:
        payload = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResumeError(f"{path}: not found; the checkpoint has no run state") from None
    except (OSError, ValueError) as exc:
        raise ResumeError(f"{path}: not a readable run state ({exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ResumeError(f"{path}: not a t1 run state (format {FORMAT!r} expected)")
    if payload.get("version") != STATE_VERSION:
        raise ResumeError(
            f"{path}: run state version {payload.get('version')!r}; this t1 reads version {STATE_VERSION}"
        )
    keys = ("recipe_identity", "ppo_steps", "warmup_steps", "weight_version", "backend_counters")
    missing = [k for k in (*keys, "task_stream", "rng", "metrics_rows", "files") if k not in payload]
    if missing:
        raise ResumeError(f"{path}: the run state lacks {', '.join(missing)}")
    return payload


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two plain-data trees differ (a changed section is named by its leaves)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]
