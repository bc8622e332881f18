"""The run directory: everything a run leaves behind, named by its recipe and the hash of the resolved recipe.

Layout::

    runs/<recipe name>-<UTC time>-<hash8>/
        recipe.yaml              the fully resolved recipe (defaults included)
        metrics.jsonl            one JSON object per step (warm-up steps carry "phase": "critic_warmup")
        status.json              how the run ended: finished | failed (with the error) | interrupted
        trajectories/step-NNNN/<trial_id>.json   every trial: status, cause, messages, token counts, reward
        verifier/<trial_id>/     the verifier's reports and logs as read back (ctrf.json, *.xml, reward.json,
                                 test-stdout.txt; capped, anything left out listed in t1-omitted.txt)
        weights/actor.safetensors, weights/critic.safetensors   the final weights
        checkpoints/step-NNNN/weights/   the same, every trainer.checkpoint_every PPO steps
        checkpoints/step-NNNN/state/     the rest of the run state a resume needs (`t1.run.resume`)
        tensorboard/             TensorBoard event files of the same rows (logging.tensorboard: true)
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from t1.run.tensorboard import TensorBoardLog


@dataclass(frozen=True)
class RunDir:
    """Paths of one run.

    Attributes:
        root: the run's directory.
        tensorboard: the event-file writer every metrics row also goes to, or None (no event files).
        resumed_from: the checkpoint a resumed run continues from, relative to ``root``
            (``checkpoints/step-NNNN``); None for a run started fresh. ``status.json`` carries it.
    """

    root: Path
    tensorboard: TensorBoardLog | None = None
    resumed_from: str | None = None

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
        if not tensorboard:
            return cls(root)
        from t1.run.tensorboard import TensorBoardLog

        return cls(root, TensorBoardLog(root / "tensorboard"))

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
        with self.metrics_path.open("a") as fh:
            fh.write(line + "\n")
        if self.tensorboard is not None:
            self.tensorboard.add_row(json.loads(line))

    def write_status(self, status: str, steps: int, message: str | None) -> None:
        """Write ``status.json``: ``running`` (after every step) or how the run ended, with the steps done."""
        payload = {"status": status, "steps_completed": steps, "message": message, "time": _utc_now()}
        if self.resumed_from is not None:
            payload["resumed_from"] = self.resumed_from
        # written whole then renamed: a reader polling a live run never sees half a file
        tmp = self.root / "status.json.tmp"
        tmp.write_text(json.dumps(payload, indent=1) + "\n")
        tmp.replace(self.root / "status.json")

    def write_trajectory(self, step_label: str, trial_id: str, payload: dict[str, Any]) -> Path:
        """Write one trial's record under ``trajectories/<step_label>/<trial_id>.json``."""
        folder = self.root / "trajectories" / step_label
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{trial_id}.json"
        path.write_text(json.dumps(payload, indent=1, default=_jsonable))
        return path


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
