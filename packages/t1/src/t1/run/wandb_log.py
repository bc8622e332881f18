"""Weights & Biases beside ``metrics.jsonl``: every metrics row, the resolved recipe, the plots at the end.

Written when the recipe sets ``logging.wandb.mode`` to ``online`` or ``offline`` (`t1_spec.WandbSpec`). The
W&B run is named after the run folder and keeps its files in ``<run dir>/wandb/`` (an offline run is uploaded
later with ``wandb sync <run dir>/wandb/offline-run-*``). ``metrics.jsonl`` stays the record: W&B is a view
of the same rows, logged as each row is appended.

Keys are TensorBoard's tags (`t1.run.tensorboard.scalars`, `t1.run.tensorboard.row_prefix`): nested dicts
flattened with ``/``, critic warm-up rows under ``critic_warmup/``, evaluation rows under
``evaluation/<suite>/``. Each phase has its own step axis (``step``, ``critic_warmup/step``, ...), declared
with ``define_metric``, because the warm-up's and the evaluations' step counters restart at 0 while W&B's own
``_step`` must only grow. When the run ends (`finish`), the figures of ``t1 plot`` (`t1.plots.plot_run`) are
drawn into ``<run dir>/plots/`` and logged as images under ``plots/<figure>``.

``wandb`` is imported here only, and only when a run asks for it: it is the optional extra ``t1[wandb]``.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any

from t1.run.tensorboard import row_prefix, scalars
from t1_spec import WandbSpec


def wandb_problems(spec: WandbSpec) -> list[str]:
    """What keeps ``logging.wandb`` from running here, one line each (for the shared preflight; no import).

    A mode other than ``disabled`` needs the ``wandb`` package (the ``t1[wandb]`` extra).
    """
    if spec.mode == "disabled" or importlib.util.find_spec("wandb") is not None:
        return []
    return [
        f"logging.wandb.mode: {spec.mode!r} needs the wandb package, which is not installed: install the "
        "extra (`uv pip install 't1[wandb]'`) or set logging.wandb.mode: disabled"
    ]


class WandbUnavailableError(RuntimeError):
    """``logging.wandb.mode`` asks for W&B but the ``wandb`` package is not installed."""


class WandbLog:
    """An open W&B run: one ``log`` call per metrics row; `finish` logs the plots and closes it.

    Args:
        spec: the recipe's ``logging.wandb`` (mode ``online`` or ``offline``).
        root: the run folder; the W&B files go to ``root / "wandb"``.
        config: the resolved recipe as plain data, the W&B run's config.

    Raises:
        ValueError: ``spec.mode`` is ``disabled`` (build no log then).
        WandbUnavailableError: the ``wandb`` package is missing; install the ``t1[wandb]`` extra.
    """

    def __init__(self, spec: WandbSpec, root: Path, config: dict[str, Any]) -> None:
        if spec.mode == "disabled":
            raise ValueError("logging.wandb.mode is 'disabled': no W&B run is opened")
        try:
            import wandb
        except ImportError as exc:
            raise WandbUnavailableError(
                f"logging.wandb.mode is {spec.mode!r} but the wandb package is not installed: "
                "install the extra (`uv pip install 't1[wandb]'`) or set logging.wandb.mode: disabled"
            ) from exc
        self._wandb = wandb
        self.root = root
        self.mode = spec.mode
        (root / "wandb").mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=spec.project,
            entity=spec.entity,
            mode=spec.mode,
            dir=str(root),
            name=root.name,
            config=config,
            # the run's own metrics are the record; W&B's console capture would copy the driver's log
            settings=wandb.Settings(console="off", save_code=False),
        )
        self._axes: set[str] = set()  # keys already given their step axis
        self.finished = False

    def add_row(self, row: dict[str, Any]) -> int:
        """Log one metrics row's scalars on its phase's step axis; the number of values logged.

        Rows with no scalar (only strings, lists, nulls) log nothing.
        """
        prefix = row_prefix(row)
        values = {f"{prefix}{tag}": value for tag, value in scalars(row)}
        if not values:
            return 0
        axis = f"{prefix}step"
        for key in values.keys() - self._axes:  # each key once, on its phase's axis (no glob overlaps)
            self.run.define_metric(key, step_metric=axis)
            self._axes.add(key)
        step = row.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            values[axis] = step
        self.run.log(values)
        return len(values)

    def finish(self, status: str) -> list[Path]:
        """Draw ``t1 plot``'s figures, log them as images, and close the run; the PNGs logged.

        Figures are drawn into ``<run dir>/plots/`` (`t1.plots.plot_run`); a run with no drawable metrics
        logs none. A run that did not finish (``failed``, ``interrupted``) closes with exit code 1. Calling
        it again does nothing.
        """
        if self.finished:
            return []
        self.finished = True
        written: list[Path] = []
        try:
            if (self.root / "metrics.jsonl").is_file():
                from t1.plots import RunDirError, plot_run

                with contextlib.suppress(RunDirError):  # an empty metrics file: nothing to draw
                    written = plot_run(self.root).written
            if written:
                self.run.log({f"plots/{p.stem}": self._wandb.Image(str(p)) for p in written})
        finally:
            self.run.finish(exit_code=0 if status == "finished" else 1)
            # finish() returns before W&B's service has written the run's last records; its teardown waits
            # for them, so the offline run file is whole once the run has ended
            self._wandb.teardown()
        return written
