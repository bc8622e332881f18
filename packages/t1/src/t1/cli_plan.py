"""`t1 plan` verbs: check a plan against the memory model, search plans, calibrate alpha/b0, split devices.

Exit codes: 0 the plan fits (or the verb succeeded), 1 it does not fit, 2 invalid recipe, file or arguments.
The model is ``t1_capacity`` (T1 §7, §7.1, Eq. 21, Prop. 7.1).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from t1._errors import EXIT_CHECK_FAILED, EXIT_OK, check_output_file, reported
from t1_capacity import (
    CalibrationError,
    PlanError,
    check_plan,
    fit,
    load,
    optimal_split,
    read_measurements,
    search_plans,
    step_time,
)
from t1_capacity.report import format_check, format_search, format_split
from t1_capacity.split import balance_point, generation_work_from_rate
from t1_spec import RecipeError, load_recipe

app = typer.Typer(
    rich_markup_mode=None,  # help text is plain: a [word] is printed, not read as Rich markup
    help="Check, search and calibrate parallelism plans against the closed-form memory model (T1 §7.1).",
    no_args_is_help=True,
)

INVALID = (RecipeError, PlanError, CalibrationError)

Overrides = Annotated[
    list[str] | None, typer.Argument(help="dotlist overrides, e.g. plan.memory_budget_gib=80")
]
Debug = Annotated[bool, typer.Option("--debug", help="show tracebacks")]

# T1 §7: the production plan hides ~16 min of generation under ~41 min of training at its split.
PAPER_GENERATION_MIN = 16.0
PAPER_TRAINING_MIN = 41.0


@app.command()
def check(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML")],
    overrides: Overrides = None,
    generation_min: Annotated[
        float, typer.Option(help="generation minutes per step at the recipe's inference_devices (T1 §7: ~16)")
    ] = PAPER_GENERATION_MIN,
    training_min: Annotated[
        float, typer.Option(help="training minutes per step at the recipe's training devices (T1 §7: ~41)")
    ] = PAPER_TRAINING_MIN,
    granularity: Annotated[
        int | None,
        typer.Option(
            help="devices per inference replica (default: the recipe's engine.tp); split plans only"
        ),
    ] = None,
    assumptions: Annotated[bool, typer.Option(help="also print what the model assumes")] = False,
    debug: Debug = False,
) -> None:
    """Per-term memory (GiB) of actor and critic, binding term, headroom, step-time split; exit 0/1/2.

    Every option is checked, and the best split searched, before anything is printed, so a bad option exits
    2 with only its error.
    """
    with reported(debug, invalid=INVALID):
        for flag, value in (("--generation-min", generation_min), ("--training-min", training_min)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{flag} must be a positive number of minutes per step, got {value:g}")
        inputs = load(recipe, overrides)
        verdict = check_plan(inputs.model, inputs.plan, inputs.constants)
        n, g = inputs.plan.inference_devices, inputs.devices
        split_lines: list[str] = []
        if 0 < n < g:
            r, c = generation_min * n, training_min * (g - n)
            step = _granularity(granularity, inputs.replica_devices, n, g)

            def training_fits(g_train: int) -> bool:
                return bool(search_plans(inputs.model, inputs.plan, inputs.constants, g_train).fitting)

            here = step_time(n, r, c, g)
            try:
                best = optimal_split(r, c, g, granularity=step, training_fits=training_fits)
                split_text = format_split(here, best, balance_point(r, c, g))
            except ValueError:
                # Only reachable when the recipe's own plan does not fit (its n is a multiple of step).
                split_text = format_split(here, here, balance_point(r, c, g)).splitlines()[0] + (
                    f"\nbest split: none; no inference partition of {step}, {2 * step}, ... devices leaves "
                    f"the other devices of G = {g} a training plan that fits in memory"
                )
            split_lines = [
                split_text,
                f"(R = {r:.0f} and C = {c:.0f} device-minutes from --generation-min/--training-min at this "
                "split; "
                f"linear scaling assumed; n in steps of {step}, keeping a training plan that fits)",
            ]
        else:
            if granularity is not None:  # an option that would be silently ignored is refused instead
                raise ValueError(
                    f"--granularity {granularity}: this recipe's plan is co-located "
                    f"(plan.inference_devices = {n}, G = {g}), so there is no inference partition to step "
                    "through; drop --granularity, or give a split plan (0 < plan.inference_devices < G)"
                )
            split_lines = [
                "step-time split: co-located (inference_devices = 0), generation and training time-share"
            ]
        typer.echo(format_check(verdict, inputs.constants, title=f"{recipe}", assumptions=assumptions))
        for line in split_lines:
            typer.echo(line)
    sys.exit(EXIT_OK if verdict.fits else EXIT_CHECK_FAILED)


def _granularity(option: int | None, replica_devices: int, inference_devices: int, devices: int) -> int:
    """The step of the inference partition: ``--granularity`` or the recipe's ``engine.tp``.

    Raises:
        ValueError: below 1, not below G, or not dividing ``plan.inference_devices`` (the recipe's own
            partition must be a whole number of replicas), saying what to pass.
    """
    step = replica_devices if option is None else option
    hint = f"pass the devices of one inference replica (this recipe: engine.tp = {replica_devices})"
    if step < 1 or step >= devices:
        raise ValueError(f"--granularity {step} must lie in [1, {devices - 1}] (G = {devices}): {hint}")
    if inference_devices % step:
        divisors = [d for d in range(1, inference_devices + 1) if inference_devices % d == 0]
        raise ValueError(
            f"--granularity {step} does not divide plan.inference_devices {inference_devices}: the inference "
            f"partition is a whole number of replicas of --granularity devices each; {hint}, or any of "
            f"{divisors}"
        )
    return step


@app.command()
def search(
    recipe: Annotated[Path, typer.Argument(help="recipe YAML")],
    overrides: Overrides = None,
    devices: Annotated[
        int | None,
        typer.Option(min=1, help="training devices to search (default: the recipe's devices - inference)"),
    ] = None,
    rank: Annotated[str, typer.Option(help="dp (most data parallelism first) or headroom")] = "dp",
    top: Annotated[int, typer.Option(min=1, help="admitted plans to show")] = 10,
    refused: Annotated[int, typer.Option(min=0, help="refused plans to explain")] = 5,
    ep_maximal: Annotated[bool, typer.Option(help="only the largest ep per layout (Prop. 7.1)")] = False,
    debug: Debug = False,
) -> None:
    """Enumerate every valid (tp, pp, cp, dp, ep), keep those where actor and critic fit, rank them."""
    with reported(debug, invalid=INVALID):
        inputs = load(recipe, overrides)
        result = search_plans(
            inputs.model, inputs.plan, inputs.constants, devices, rank=rank, ep_maximal_only=ep_maximal
        )
        typer.echo(format_search(result, inputs.model, inputs.constants, top=top, refused=refused))
    sys.exit(EXIT_OK if result.fitting else EXIT_CHECK_FAILED)


@app.command(short_help="Least-squares fit of the memory model's coefficients to measured peaks.")
def calibrate(
    measurements: Annotated[
        Path, typer.Argument(help="CSV: tp,pp,cp,dp,ep,token_wall,peak_gib[,etp,network,stage]")
    ],
    recipe: Annotated[Path, typer.Option(help="recipe giving the model and the other plan fields")],
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="dotlist override of the recipe")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="write the override here (.yaml: YAML snippet, else dotlist)")
    ] = None,
    holdout: Annotated[
        list[str] | None, typer.Option("--holdout", help="benchmark case shape@wall left out of the fit")
    ] = None,
    debug: Debug = False,
) -> None:
    """Least-squares fit of alpha and b0 (Eq. 21) from measured peaks; prints residuals and the override.

    A .jsonl file is the output of tools/bench/bench_memory.py: the measured backend's activation
    coefficients per layer kind and b0 are fitted, the tables printed, and with --out the coefficients JSON
    written. A .jsonl of tools/device/check.py (a GPU run) fits one scale on the recipe backend's CPU
    coefficients and b0 from its lines of that backend.
    Exit 2, with nothing else printed, for a bad recipe, CSV (naming file, line, row and column) or `--out`.
    """
    with reported(debug, invalid=INVALID):
        if measurements.suffix == ".jsonl":
            import os
            import platform

            from t1_capacity.calibrate_backend import calibrate_from_bench
            from t1_capacity.calibrate_device import calibrate_from_device, is_device_check

            if out is not None:
                check_output_file(out, "--out", "coefficients.json")
            machine = f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus"
            flags = [f"--holdout {h}" for h in holdout or []] + ([f"--out {out}"] if out else [])
            command = " ".join([f"t1 plan calibrate {measurements} --recipe {recipe}", *flags])
            if is_device_check(measurements):
                if holdout:
                    raise ValueError("--holdout: the device check's lines are fitted in-sample (one scale)")
                backend = load_recipe(recipe, list(overrides or [])).trainer.backend
                fitted, text = calibrate_from_device(measurements, recipe, backend, command, machine)
            else:
                fitted, text = calibrate_from_bench(measurements, recipe, holdout or [], command, machine)
            typer.echo(text)
            if out is not None:
                out.write_text(fitted.to_json())
                typer.echo(f"coefficients written to {out}")
            return
        if out is not None:
            check_output_file(out, "--out", "calibration.yaml")
        inputs = load(recipe, overrides)
        rows = read_measurements(measurements, inputs.plan, inputs.model)
        cal = fit(inputs.model, rows, inputs.constants)
        typer.echo(
            f"alpha = {cal.alpha:.1f} B/token/layer   b0 = {cal.b0_gib:.3f} GiB   rms {cal.rms_gib:.3f} GiB"
        )
        typer.echo(f"{'row':<5}{'plan':<30}{'wall':>8}{'network':>8}{'measured':>10}{'residual':>10}")
        for i, (m, res) in enumerate(zip(rows, cal.residuals_gib, strict=True), start=1):
            typer.echo(
                f"{i:<5}{m.plan.label():<30}{m.plan.token_wall:>8}{m.network:>8}{m.peak_gib:>10.2f}{res:>10.3f}"
            )
        text = (
            cal.yaml()
            if out is not None and out.suffix in (".yaml", ".yml")
            else " ".join(cal.dotlist()) + "\n"
        )
        if out is not None:
            try:
                out.write_text(text)
            except (IsADirectoryError, PermissionError, FileNotFoundError, NotADirectoryError) as exc:
                raise ValueError(f"--out {out}: cannot write the override: {exc.strerror or exc}") from exc
            typer.echo(f"override written to {out}")
        else:
            typer.echo("override: " + text.strip())


@app.command()
def split(
    devices: Annotated[int, typer.Option(help="G: all devices (or replica units)")],
    generation_work: Annotated[
        float | None, typer.Option(help="R, device-minutes of generation per step")
    ] = None,
    training_work: Annotated[
        float | None, typer.Option(help="C, device-minutes of training per step")
    ] = None,
    groups: Annotated[
        float | None, typer.Option(help="groups per step, to derive R from a replica rate")
    ] = None,
    groups_per_min: Annotated[float | None, typer.Option(help="one replica's rate (T1 §7: 4.35)")] = None,
    replica_devices: Annotated[int, typer.Option(help="devices per inference replica")] = 1,
    n: Annotated[list[int] | None, typer.Option("--n", help="inference device counts to report")] = None,
    debug: Debug = False,
) -> None:
    """T_step(n) = max(R/n, C/(G-n)) (T1 §7): the best n, generation and training time, slack.

    Every option is checked before anything is printed; a bad one exits 2 naming it.
    """
    with reported(debug, invalid=INVALID):
        generation_work, training_work = _split_inputs(
            devices, generation_work, training_work, groups, groups_per_min, replica_devices, n or []
        )
        best = optimal_split(generation_work, training_work, devices, granularity=replica_devices)
        n_star = balance_point(generation_work, training_work, devices)
        for k in n or []:
            typer.echo(
                format_split(
                    step_time(k, generation_work, training_work, devices), best, n_star
                ).splitlines()[0]
            )
        typer.echo(format_split(best, best, n_star).splitlines()[1])


def _finite(flag: str, value: float | None, *, positive: bool) -> None:
    """Refuse a non-finite or out-of-range number, naming ``flag``."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{flag} must be a finite number {bound}, got {value:g}")


def _split_inputs(
    devices: int,
    generation_work: float | None,
    training_work: float | None,
    groups: float | None,
    groups_per_min: float | None,
    replica_devices: int,
    ns: list[int],
) -> tuple[float, float]:
    """Check ``t1 plan split``'s options and return (R, C), device-minutes.

    Raises:
        ValueError: naming the option: G < 2; --replica-devices outside [1, G - 1]; a work figure, group
            count or rate that is negative or not finite (a rate must be > 0); R and C both 0; both
            --generation-work and --groups/--groups-per-min given (they are alternatives); one of them
            missing; an --n outside (0, G).
    """
    if devices < 2:
        raise ValueError(f"--devices must be >= 2 (one inference and one training device), got {devices}")
    if not 1 <= replica_devices < devices:
        raise ValueError(
            f"--replica-devices must lie in [1, {devices - 1}] (an inference replica leaves at least one of "
            f"--devices {devices} to training), got {replica_devices}"
        )
    _finite("--generation-work", generation_work, positive=False)
    _finite("--training-work", training_work, positive=False)
    _finite("--groups", groups, positive=False)
    _finite("--groups-per-min", groups_per_min, positive=True)
    rate_given = [f for f, v in (("--groups", groups), ("--groups-per-min", groups_per_min)) if v is not None]
    if generation_work is not None and rate_given:
        raise ValueError(
            f"--generation-work and {'/'.join(rate_given)} are alternatives for R: give --generation-work, "
            "or --groups with --groups-per-min, not both"
        )
    if generation_work is None:
        if groups is None or groups_per_min is None:
            raise ValueError("give --generation-work, or --groups with --groups-per-min")
        generation_work = generation_work_from_rate(groups, groups_per_min, replica_devices)
    if training_work is None:
        raise ValueError("give --training-work (device-minutes of training per step)")
    if generation_work == 0 and training_work == 0:
        raise ValueError(
            "--generation-work (or --groups) and --training-work are both 0: with no work there is no split "
            "to choose; give device-minutes > 0"
        )
    bad = [k for k in ns if not 0 < k < devices]
    if bad:
        raise ValueError(
            f"--n {bad[0]} must lie in [1, {devices - 1}] (inference devices out of G = {devices})"
        )
    return generation_work, training_work
