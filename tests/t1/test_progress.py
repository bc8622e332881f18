"""Progress bars with ETA on a terminal; nothing but the lines when the output is not a terminal."""

from __future__ import annotations

import io
import re

from rich.console import Console

from t1.run.console import RunProgress


def _drive(console: Console) -> RunProgress:
    progress = RunProgress(console)
    with progress:
        progress.phase("PPO steps", 3)
        progress.step_done()
        progress.trials("step-0001", 5)
        progress.trial_done(object())
        progress.trial_done(object())
        console.print("  step-0001 trial-a finished")
        progress.refresh()
    return progress


def test_a_terminal_shows_the_steps_and_trials_bars_with_eta():
    buf = io.StringIO()
    progress = _drive(Console(file=buf, force_terminal=True, width=120))
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # strip the control sequences
    assert progress.enabled
    assert re.search(r"PPO steps\s.*\b1/3\b.*ETA", text)
    assert re.search(r"step-0001 trials\s.*\b2/5\b.*ETA", text)
    assert "step-0001 trial-a finished" in text  # printed lines go above the bars
    assert "\x1b[" in buf.getvalue()


def test_no_terminal_no_bar_and_no_control_sequence():
    buf = io.StringIO()
    progress = _drive(Console(file=buf, width=120))  # a file: not a terminal
    assert not progress.enabled
    assert buf.getvalue() == "  step-0001 trial-a finished\n"


def test_a_dumb_terminal_gets_no_bar():
    # TERM=dumb (an editor's or CI's pseudo-terminal) cannot move the cursor back over a bar
    buf = io.StringIO()
    progress = _drive(Console(file=buf, force_terminal=True, width=120, _environ={"TERM": "dumb"}))
    assert not progress.enabled
    assert "ETA" not in buf.getvalue()
