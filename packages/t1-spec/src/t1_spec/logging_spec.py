"""Where a run writes its outputs and how it reports progress."""

from __future__ import annotations

from t1_spec._base import Spec


class LoggingSpec(Spec):
    """Run outputs and progress reporting."""

    run_root: str = "runs"
    """Directory under which each run gets its own folder (named by recipe name and a config hash)."""

    print_table: bool = True
    """Print a per-step metrics table (reward, explained variance, clip fraction, step time) to the console.
    """

    tensorboard: bool = False
    """Also write TensorBoard event files into the run folder. Not built yet: nothing reads it; the run
    folder's ``metrics.jsonl`` holds every step's metrics."""
