"""`t1 reward`: read a verifier's output folder and print its outcomes and the reward under each kind.

For users debugging a task: point it at what a verifier left (Harbor's ``/logs/verifier``, a trial's
``verifier/`` folder, or a run's ``trajectories/<trial>/`` output) and see what T1 reads there: each
assertion's status (parametrized cases that pytest-json-ctrf < 0.4 collapsed counted apart, or read per
case from pytest's output in ``test-stdout.txt``; reruns at their final status), P, T, the binary outcome b
and the fallback cause, then the reward under ``dense`` (P / S, T1 §5.2, Eq. 20), ``ratio`` (max(b, c P /
T), T1 §5.3) and ``binary`` (b). The reward is what ``t1 train`` and ``t1 eval`` would give the same folder:
all three score it by one rule, ``t1_reward.score_output`` (``t1_rollout.verifier_logs``): a report refused
by its checks (pytest's closing line in ``test-stdout.txt``) scores 0, a solved reward file standing in for
a broken report is the binary fallback, a verifier that wrote nothing is a trial training would drop
(``status: failed``). ``--task`` gives the task bundle, so that what training knows of it without a
validation record (test names, assertion count, whether ``test.sh`` asks for a per-assertion report) is
used too.

Exit codes: 0 the folder was read (even when it holds no outcome: the reward is then ``null``); 2 invalid
input (the folder does not exist, is not a folder, or is empty; a task bundle that does not load).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from t1._errors import reported
from t1.run.console import run_console
from t1_spec import DenseRewardSpec

KINDS = ("dense", "ratio", "binary")
#: S when --scale is not given: the dense reward spec's default (T1 §5.2: 20).
DEFAULT_SCALE: int = DenseRewardSpec.model_fields["scale"].default


def register(app: typer.Typer) -> None:
    """Mount the ``reward`` verb on the top-level app."""

    @app.command("reward")
    def reward(
        verifier_dir: Annotated[
            Path,
            typer.Argument(help="The folder a verifier wrote (ctrf.json, *.xml, reward.json, reward.txt)."),
        ],
        scale: Annotated[
            int,
            typer.Option("--scale", min=1, help="S of the dense reward P / S (assertions; T1 §5.2 uses 20)."),
        ] = DEFAULT_SCALE,
        kind: Annotated[
            str, typer.Option("--kind", help="The reward kind reported as `reward`: dense, ratio or binary.")
        ] = "dense",
        task: Annotated[
            Path | None,
            typer.Option("--task", help="The task bundle the folder came from (its tests and test.sh)."),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    ) -> None:
        """Print a verifier folder's outcomes and its reward under each reward kind (dense, ratio, binary).

        --json prints one object: passed (P), total (T), reward and kind (what was applied for --kind:
        dense, ratio, binary, binary_fallback, tampered, unverifiable, no_verdict or none), status
        (finished, or failed: training drops it) and cause, evidence, fallback (the cause, or null), binary
        (b), source, scale, rewards (per kind), outcomes. Exit 0 read, 2 a folder that is missing or empty.
        """
        with reported(debug):
            from t1_rollout.verifier_logs import summarize_verifier_dir

            summary = summarize_verifier_dir(verifier_dir, scale=scale, kind=kind, task_dir=task)
        if as_json:
            typer.echo(json.dumps(summary))
            return
        _print(summary)


def _print(summary: dict[str, object]) -> None:
    console = run_console()
    outcomes = summary["outcomes"]
    assert isinstance(outcomes, list)
    for o in outcomes:
        cases = f" x{o['cases']}" if o["cases"] > 1 else ""
        reruns = f" ({o['entries']} entries)" if o["entries"] > 1 else ""
        console.print(
            f"  {o['status']:<8} {escape(o['name'])}{cases}{reruns}", highlight=False, soft_wrap=True
        )
    fallback = summary["fallback"] or "none"
    console.print(
        f"P = {summary['passed']}, T = {summary['total']}, b = {summary['binary']},"
        f" source {summary['source']}, fallback {fallback}",
        highlight=False,
    )
    rewards = summary["rewards"]
    assert isinstance(rewards, dict)
    for name in KINDS:
        value, used = rewards[name]["reward"], rewards[name]["kind"]
        shown = "none (no outcome)" if value is None else f"{value:.4g}"
        label = f"dense (S = {summary['scale']})" if name == "dense" else name
        console.print(f"  {label:<16} {shown}  {escape(f'[{used}]')}", highlight=False)
    if summary["cause"]:
        color = "red" if summary["status"] == "failed" else "yellow"
        console.print(
            f"  [{color}]{summary['status']}[/] {escape(str(summary['cause']))}",
            highlight=False,
            soft_wrap=True,
        )
    if summary["detail"]:
        console.print(f"  [yellow]note[/] {escape(str(summary['detail']))}", highlight=False, soft_wrap=True)
