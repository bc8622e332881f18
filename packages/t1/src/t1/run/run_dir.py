"""The run directory: everything a run leaves behind, named by its recipe and the hash of the resolved recipe.

Layout::

    runs/<recipe name>-<UTC time>-<hash8>/
        recipe.yaml              the fully resolved recipe (defaults included)
        metrics.jsonl            one JSON object per step (warm-up steps carry "phase": "critic_warmup")
        status.json              how the run ended: finished | failed (with the error) | interrupted; the
                                 driver (pid, start time, host): read back `killed` once it is dead
                                 (`t1.run.status`)
        trajectories/step-NNNN/<trial_id>.json   every trial: status, cause, messages, token counts, reward
        verifier/<trial_id>/     the verifier's reports and logs as read back (ctrf.json, *.xml, reward.json,
                                 test-stdout.txt; capped, anything left out listed in t1-omitted.txt)
        weights/actor.safetensors, weights/critic.safetensors   the final weights (trainer.save_final_weights)
        checkpoints/step-NNNN/weights/   the same, every trainer.checkpoint_every PPO steps
        checkpoints/step-NNNN/state/     the rest of the run state a resume needs (`t1.run.resume`)
        tensorboard/             TensorBoard event files of the same rows (logging.tensorboard: true)
        wandb/                   the W&B run of the same rows, recipe and plots (logging.wandb.mode)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from t1.run.status import driver_identity

if TYPE_CHECKING:
    from t1.run.tensorboard import TensorBoardLog
    from t1.run.wandb_log import WandbLog


STATUS_ROOM = 1024
"""Bytes ``status.json`` always takes (the JSON, then spaces), so that on a full disk the final status can be
written over them with a message of that length (`RunDir.write_status`)."""


@dataclass(frozen=True)
class RunDir:
    """Paths of one run.

    Attributes:
        root: the run's directory.
        tensorboard: the event-file writer every metrics row also goes to, or None (no event files).
        wandb: the W&B run every metrics row also goes to and that `write_status` closes with the plots
            when the run ends (`t1.run.wandb_log.WandbLog`), or None.
        resumed_from: the checkpoint a resumed run continues from, relative to ``root``
            (``checkpoints/step-NNNN``); None for a run started fresh. ``status.json`` carries it.
    """

    root: Path
    tensorboard: TensorBoardLog | None = None
    resumed_from: str | None = None
    wandb: WandbLog | None = None

    @classmethod
    def create(
        cls, run_root: Path, name: str, resolved_recipe: dict[str, Any], *, tensorboard: bool = False
    ) -> RunDir:
        """Create a fresh run directory and write the resolved recipe into it.

        Args:
            run_root: the parent folder (the recipe's ``logging.run_root``).
            name: the recipe's name.
            resolved_recipe: the recipe as plain data, defaults included.
            tensorboard: also write every metrics row as TensorBoard scalars into ``tensorboard/`` (the
                recipe's ``logging.tensorboard``; `t1.run.tensorboard.TensorBoardLog`).

        The recipe's ``logging.wandb`` (read from ``resolved_recipe``) opens a W&B run unless its mode is
        ``disabled`` (`t1.run.wandb_log.WandbLog`; raises its ``WandbUnavailableError`` without wandb).

        Returns:
            The new :class:`RunDir`.
        """
        text = yaml.safe_dump(resolved_recipe, sort_keys=False)
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        root = run_root / f"{name}-{stamp}-{digest}"
        suffix = 1
        while True:  # mkdir, not exists(), decides: two runs of one recipe started in one second differ
            try:
                root.mkdir(parents=True)
                break
            except FileExistsError:
                suffix += 1
                root = run_root / f"{name}-{stamp}-{digest}-{suffix}"
        (root / "recipe.yaml").write_text(text)
        for sub in ("trajectories", "verifier"):  # weights/ appears with the final weights only
            (root / sub).mkdir()
        board = None
        if tensorboard:
            from t1.run.tensorboard import TensorBoardLog

            board = TensorBoardLog(root / "tensorboard")
        return cls(root, board, wandb=_wandb_log(root, resolved_recipe))

    @property
    def metrics_path(self) -> Path:
        """``metrics.jsonl``."""
        return self.root / "metrics.jsonl"

    @property
    def verifier_dir(self) -> Path:
        """Parent folder of the per-trial verifier outputs."""
        return self.root / "verifier"

    @property
    def weights_dir(self) -> Path:
        """Folder of the final weights."""
        return self.root / "weights"

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one step's metrics as a strict JSON line (NaN and infinities become ``null``).

        With a `tensorboard` writer, the same row (as written, after the JSON round trip) also becomes one
        TensorBoard event of its scalars at its ``step``.
        """
        line = json.dumps(_finite(row), sort_keys=False, default=_jsonable, allow_nan=False)
        with _naming(self.metrics_path), self.metrics_path.open("a") as fh:
            fh.write(line + "\n")
        if self.tensorboard is not None:
            self.tensorboard.add_row(json.loads(line))
        if self.wandb is not None:
            self.wandb.add_row(json.loads(line))

    def write_status(self, status: str, steps: int, message: str | None) -> None:
        """Write ``status.json``: ``running`` (after every step) or how the run ended, with the steps done.

        Where the new file cannot be written (a full disk), the status is written over the old file's own
        bytes instead, its message cut to fit, so a run that fails for want of space still ends ``failed``.

        Any status but ``running`` also closes the W&B run, after logging the plots (`WandbLog.finish`).

        Raises:
            OSError: neither write succeeded; the message names ``status.json``'s path.
        """
        if status != "running" and self.wandb is not None:
            self.wandb.finish(status)
        payload = {"status": status, "steps_completed": steps, "message": message, "time": _utc_now()}
        if self.resumed_from is not None:
            payload["resumed_from"] = self.resumed_from
        payload["driver"] = driver_identity()  # `t1.run.status.read_status`: a dead driver's run is killed
        # written whole then renamed: a reader polling a live run never sees half a file
        path, tmp = self.root / "status.json", self.root / "status.json.tmp"
        try:
            # padded with spaces (valid JSON) to STATUS_ROOM bytes: room for a failure's status later
            tmp.write_text((json.dumps(payload, indent=1) + "\n").ljust(STATUS_ROOM))
            tmp.replace(path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if not _overwrite_in_place(path, payload):
                raise _named(exc, path) from exc

    def write_trajectory(self, step_label: str, trial_id: str, payload: dict[str, Any]) -> Path:
        """Write one trial's record under ``trajectories/<step_label>/<trial_id>.json``."""
        folder = self.root / "trajectories" / step_label
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{trial_id}.json"
        with _naming(path):
            path.write_text(json.dumps(payload, indent=1, default=_jsonable))
        return path


def _wandb_log(root: Path, resolved_recipe: dict[str, Any]) -> WandbLog | None:
    """The W&B run of the recipe's ``logging.wandb``, or None when its mode is ``disabled`` (the default)."""
    from t1_spec import WandbSpec

    spec = WandbSpec.model_validate(resolved_recipe.get("logging", {}).get("wandb", {}))
    if spec.mode == "disabled":
        return None
    from t1.run.wandb_log import WandbLog

    return WandbLog(spec, root, resolved_recipe)


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``path`` as its file name when it has none (``[Errno 28] No space left on device``)."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, f"{exc.strerror or exc} (writing the run directory)", str(path))


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Re-raise an `OSError` of a write to ``path`` with the path in its message."""
    try:
        yield
    except OSError as exc:
        named = _named(exc, path)
        if named is exc:
            raise
        raise named from exc


def _overwrite_in_place(path: Path, payload: dict[str, Any]) -> bool:
    """Write ``payload`` over ``path``'s existing bytes (no new block is needed), padded with spaces.

    The message is shortened until the JSON fits the old size. Returns False when there is no old file, it
    is too small for the bare status, or the write fails.
    """
    try:
        size = path.stat().st_size
        message = payload.get("message") or ""
        while True:
            text = json.dumps({**payload, "message": message or None}).encode()
            if len(text) + 1 <= size or not message:
                break
            message = message[: max(0, len(message) - (len(text) + 1 - size) - 3)].rstrip() + "..."
            if message == "...":
                message = ""
        if len(text) + 1 > size:
            return False
        with path.open("r+b") as fh:  # no truncation: the bytes already held are rewritten
            fh.write(text + b"\n" + b" " * (size - len(text) - 1))
        return True
    except OSError:
        return False


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _finite(value: Any) -> Any:
    """Replace non-finite floats by ``None`` in nested dicts and lists (e.g. EV of constant returns)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _jsonable(value: Any) -> Any:
    """Fallback JSON encoding for numpy scalars, paths and enums."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "value"):
        return value.value
    return str(value)
