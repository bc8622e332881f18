"""Real-task check: does each task of a folder load, build, pass its oracle, fail a do-nothing agent, report?

Run (from anywhere; `tools/check_tasks` wraps this in the workspace's environment):

    tools/check_tasks TASKS_DIR [--recipe recipes/tiny-docker.yaml] [--image-map BASE=IMAGE | FILE]...
        [--network/--no-network] [--json] [--limit N] [--keep DIR] [--record FILE] [--build-timeout S]
        [-j N] [overrides...]

``TASKS_DIR`` is a folder of Harbor task bundles (Terminal-Bench 2 layout: ``task.toml``, ``instruction.md``,
``environment/Dockerfile``, ``tests/test.sh``, ``solution/solve.sh``) or ``builtin:mini``. The sandbox backend
is the recipe's ``sandbox.kind`` (default: the Docker backend of ``recipes/tiny-docker.yaml`` with its image
map); ``--image-map`` adds or replaces entries of ``sandbox.images`` (``BASE=IMAGE``, or a YAML/JSON file of
such a mapping), ``--network`` sets ``sandbox.network`` (a task still needs ``allow_internet``), and trailing
``key=value`` arguments are recipe dotlist overrides (``sandbox.memory_mb=2048``).

Per task, in this order, each stage run only when the one before it succeeded:

1. loads: ``t1_tasks.load_pool(..., strict=False)`` (Harbor's rules: ``solution/`` is optional): a broken
   bundle's row carries the load error (file and field; the older ``task.yaml`` layout names ``harbor tasks
   migrate``);
2. builds: the backend's static ``check_environment`` (what it refuses outright), then one sandbox started
   from ``environment/`` and closed (the Docker backend builds the Dockerfile as written, mapped bases
   swapped for their stand-ins, and keeps the image for the next stages); a failure carries the build's
   named cause (``apt-get: no network to deb.debian.org``);
3. oracle passes and do-nothing fails: ``t1_rollout.validate.validate_task`` (what ``t1 tasks validate``
   runs): ``solution/solve.sh`` then the verifier must pass every assertion, the verifier alone must fail
   one; an infrastructure failure is an ``error`` with its attributed cause (``verifier could not reach
   astral.sh ...``), never a score; a bundle without ``solution/solve.sh`` gets the do-nothing check alone
   (the same rule as ``t1 tasks validate``), its oracle column says ``not run (no solution/)`` and the task
   is not ``ok`` (not proven solvable);
4. per-assertion report: whether either verifier run wrote CTRF or JUnit (and how many assertions), or only
   ``reward.txt``/``reward.json`` or nothing (and whether ``tests/test.sh`` asks for one).

``--record FILE`` writes the validation record (``t1_tasks.validation``, as ``t1 tasks validate --record``
writes it) that failure attribution reads in training: a row per validated task with its oracle and
do-nothing runs and the backend's network policy; a task without ``solution/solve.sh`` an ``unproven`` row
(``failed`` when its do-nothing check fails) with no oracle run, so it never proves a verifier runs here; a
task that did not build a ``failed`` row with its cause and no checks; a broken bundle a ``broken`` row.

Prints a table, each failure's cause under it, and a summary line with the wall time; ``--json`` prints one
JSON object per task instead (one line each). Exit: 0 every task passes every stage; 1 a task fails a stage,
or the backend cannot run here (said once, up front: no Docker daemon, no bubblewrap); 2 bad input (no such
folder, a recipe or image map that does not load); 130 interrupted (every sandbox is closed first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = ROOT / "recipes" / "tiny-docker.yaml"
EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class InputError(ValueError):
    """Bad input to the check (a folder, recipe or image map that cannot be used): exit 2."""


@dataclass
class TaskCheck:
    """What the check found for one task; a stage that did not run is None.

    Attributes:
        task: the bundle's directory name.
        loads: the bundle loaded.
        builds: the environment was accepted by the backend and its sandbox started (image built).
        oracle_passes: the reference solution passed every expected assertion (None: not run or an
            infrastructure error, see ``causes``).
        nop_fails: the do-nothing agent failed at least one assertion (None: not run or an error).
        report_seen: a verifier run wrote a per-assertion report (CTRF or JUnit).
        assertions: assertions in that report (the oracle's, else the do-nothing run's).
        static_assertions: assertions counted statically from ``tests/*.py`` (None: unknown).
        report_asked: ``tests/test.sh`` asks pytest for a per-assertion report (``--ctrf``, ``--junitxml``).
        oracle: ``"P/T"`` of the oracle run, ``"error"`` or None.
        nop: ``"P/T"`` of the do-nothing run, ``"error"`` or None.
        report_source: what the oracle's verifier run wrote (``ctrf``, ``junit``, ``reward.txt``, ...), else
            the do-nothing run's.
        stand_ins: ``base -> local image`` for every base the image map replaced.
        build_network: the image was built with network (``Sandbox.built_with_network``; None: unknown).
        causes: ``(stage, cause)`` for every failed stage, in stage order.
        duration_s: wall seconds for the task, all stages.
    """

    task: str
    loads: bool = False
    builds: bool | None = None
    oracle_passes: bool | None = None
    nop_fails: bool | None = None
    report_seen: bool | None = None
    assertions: int | None = None
    static_assertions: int | None = None
    report_asked: bool | None = None
    oracle: str | None = None
    nop: str | None = None
    report_source: str | None = None
    stand_ins: list[str] = field(default_factory=list)
    build_network: bool | None = None
    causes: list[tuple[str, str]] = field(default_factory=list)
    validation: Any = field(default=None, repr=False)  # the TaskValidation, for --record (not in --json)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every stage passed: loads, builds, oracle passes, do-nothing fails, the report it asks for came.

        A task whose ``tests/test.sh`` asks for no per-assertion report is scored on its binary outcome (as
        Harbor does), so a missing one fails only a task that asks for it.
        """
        report = bool(self.report_seen) or not self.report_asked
        return bool(self.loads and self.builds and self.oracle_passes and self.nop_fails and report)

    def as_json(self) -> dict[str, Any]:
        """The row as one JSON object (``causes`` as ``{"stage", "cause"}`` objects, ``ok`` added)."""
        out = {k: v for k, v in self.__dict__.items() if k not in ("causes", "validation")}
        out["causes"] = [{"stage": s, "cause": c} for s, c in self.causes]
        out["ok"] = self.ok
        return out


def _one_line(text: str) -> str:
    """``text`` on one line, whitespace runs collapsed."""
    return " ".join(str(text).split())


def build_cause(exc: BaseException) -> str:
    """The cause of a failed build for the table, type first: the error's first line (the failing step,
    its exit code and the named cause), then the last lines of the build's output on the same line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return f"{type(exc).__name__}: (no message)"
    first = lines[0].rstrip(":")
    last = " | ".join(lines[1:][-4:])
    return f"{type(exc).__name__}: {first}" + (f" || {last}" if last else "")


def image_map(entries: list[str]) -> dict[str, str]:
    """``--image-map`` values as one mapping: ``BASE=IMAGE`` pairs and YAML/JSON files of such a mapping.

    Raises:
        InputError: a value is neither a pair nor a readable file holding a string-to-string mapping.
    """
    out: dict[str, str] = {}
    for entry in entries:
        path = Path(entry)
        if "=" in entry and not path.is_file():
            base, _, image = entry.partition("=")
            if not base.strip() or not image.strip():
                raise InputError(f"--image-map {entry!r}: give BASE=IMAGE, both non-empty")
            out[base.strip()] = image.strip()
            continue
        if not path.is_file():
            raise InputError(f"--image-map {entry!r}: neither BASE=IMAGE nor a readable file")
        import yaml

        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise InputError(f"--image-map {path}: does not read as YAML/JSON: {_one_line(exc)}") from exc
        if isinstance(loaded, dict) and isinstance(loaded.get("images"), dict):
            loaded = loaded["images"]  # a recipe's sandbox section, or a file with an `images:` key
        if not isinstance(loaded, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()
        ):
            raise InputError(
                f"--image-map {path}: must hold a mapping of base image -> local image (strings)"
            )
        out.update(loaded)
    return out


def load_recipe_for(args: argparse.Namespace) -> Any:
    """The recipe with the command line's sandbox changes applied (``--image-map``, ``--network``).

    Raises:
        InputError: the recipe does not load, or an image map is given for a backend without one.
    """
    from t1_spec import RecipeError, load_recipe

    try:
        recipe = load_recipe(args.recipe, args.overrides)
    except RecipeError as exc:
        raise InputError(str(exc)) from exc
    update: dict[str, Any] = {}
    if args.image_map:
        if "images" not in type(recipe.sandbox).model_fields:
            raise InputError(f"--image-map: sandbox.kind {recipe.sandbox.kind!r} has no image map")
        update["images"] = dict(recipe.sandbox.images) | image_map(args.image_map)
    if args.network is not None:
        if "network" not in type(recipe.sandbox).model_fields:
            raise InputError(f"--network: sandbox.kind {recipe.sandbox.kind!r} has no network setting")
        update["network"] = args.network
    if update:
        recipe = recipe.model_copy(update={"sandbox": recipe.sandbox.model_copy(update=update)})
    return recipe


def backend_problems(recipe: Any) -> tuple[list[str], list[str]]:
    """``(fatal, warnings)``: why the recipe's backend cannot run here, and image-map targets it lacks."""
    from t1_sandbox.registry import SANDBOXES

    kind = recipe.sandbox.kind
    if (why := SANDBOXES.problem(kind)) is not None:
        return [why], []
    lines = SANDBOXES.load(kind).preflight(recipe)
    warnings = [line for line in lines if line.startswith("sandbox.images:")]
    return [line for line in lines if line not in warnings], warnings


def _score(check: Any) -> str:
    """``passed/total`` of a check (the static count when known), or ``error``."""
    if check.error:
        return "error"
    total = check.expected_total if check.expected_total is not None else check.total
    return f"{check.passed}/{total}"


def _stand_in(sandbox: Any, base: str, target: str) -> str:
    """``base -> target``, and what the stand-in differs in when its labels say it is not faithful."""
    try:
        from t1_sandbox.docker import client as dc
        from t1_sandbox.docker.stand_ins import differences

        labels = (
            dc.api_client(getattr(sandbox, "host", None)).inspect_image(target).get("Config") or {}
        ).get("Labels") or {}
        found = differences(base, labels)
    except Exception:  # no docker client or no such image: the substitution alone is still worth a line
        found = []
    return f"{base} -> {target}" + (f" (differs: {'; '.join(found)})" if found else "")


async def check_task(
    task: Any, recipe: Any, factory: Any, work_dir: Path, build_timeout_s: float | None
) -> TaskCheck:
    """Build, then validate one loaded task (stages 2-4 of the module docstring); never raises for it.

    Raises:
        asyncio.CancelledError: when cancelled (every sandbox it started is closed first).
    """
    from t1_rollout.attribution import declares_per_assertion
    from t1_rollout.validate import NO_SOLUTION, validate_task
    from t1_sandbox.registry import SANDBOXES
    from t1_tasks.validation import PER_ASSERTION_SOURCES

    started = time.monotonic()
    row = TaskCheck(task=task.id, loads=True, static_assertions=task.n_assertions)
    row.report_asked = declares_per_assertion(task)
    refused = SANDBOXES.load(recipe.sandbox.kind).check_environment(task, recipe)
    if refused:
        row.builds = False
        row.causes += [
            ("builds", f"sandbox.kind {recipe.sandbox.kind!r} refuses it: {line}") for line in refused
        ]
        row.duration_s = time.monotonic() - started
        return row
    timeout = build_timeout_s if build_timeout_s is not None else task.environment.build_timeout_s
    sandbox = factory()
    try:
        try:
            await sandbox.start(task.environment_dir, timeout_s=timeout)
            row.builds = True
            row.build_network = getattr(sandbox, "built_with_network", None)
            choice = getattr(sandbox, "choice", None)
            row.stand_ins = [_stand_in(sandbox, a, b) for a, b in getattr(choice, "stand_ins", ())]
        finally:
            await sandbox.close()
    except Exception as exc:  # SandboxError and kin; anything else is recorded too, the folder goes on
        row.builds = False
        row.causes.append(("builds", build_cause(exc)))
    if not row.builds:
        row.duration_s = time.monotonic() - started
        return row
    # the one rule of t1_rollout.validate: no solution/ (Harbor allows it) runs the do-nothing check alone
    result = await validate_task(task, sandbox_factory=factory, work_dir=work_dir)
    oracle, nop, problems = result.oracle, result.nop, result.problems
    row.validation = result
    if oracle is None:
        row.causes.append(("oracle passes", f"{NO_SOLUTION}: the task is not proven solvable"))
    row.oracle = _score(oracle) if oracle is not None else NO_SOLUTION
    row.nop = _score(nop)
    row.report_source = (oracle.report_source if oracle is not None else None) or nop.report_source
    row.oracle_passes = None if oracle is None or oracle.error else oracle.all_passed
    row.nop_fails = None if nop.error else not nop.all_passed
    for problem in problems:  # one sentence per problem, "oracle: ..." / "do-nothing: ..." / weak
        stage = "do-nothing fails" if problem.startswith(("do-nothing", "weak verifier")) else "oracle passes"
        row.causes.append((stage, problem))
    seen = [c for c in (oracle, nop) if c is not None and c.report_source in PER_ASSERTION_SOURCES]
    row.report_seen = bool(seen)
    if seen:
        row.assertions = seen[0].total
    elif row.report_asked:  # a task without --ctrf/--junitxml is scored on its binary outcome, as Harbor does
        wrote = row.report_source or "nothing"
        row.causes.append(
            (
                "report",
                f"tests/test.sh asks for a CTRF/JUnit report but neither verifier run wrote one ({wrote})",
            )
        )
    row.duration_s = time.monotonic() - started
    return row


def record_of(rows: list[TaskCheck], pool: Any, wall_s: float) -> Any:
    """The validation record of the check (``t1_tasks.validation``; the module docstring says what rows).

    Validated tasks as ``t1 tasks validate`` records them (``validation_record``, which also makes the
    ``unproven`` row of a task without ``solution/``); a task that did not build a ``failed`` row with its
    causes and no checks.
    """
    from importlib.metadata import PackageNotFoundError, version

    from t1_rollout.validate import PoolValidation, validation_record
    from t1_tasks.validation import TaskRecord

    try:
        t1_version = version("t1")
    except PackageNotFoundError:
        t1_version = "unknown"
    validated = tuple(r.validation for r in rows if r.validation is not None)
    record = validation_record(PoolValidation(validated, duration_s=wall_s), pool, t1_version=t1_version)
    extra = [
        TaskRecord(
            id=r.task,
            verdict="failed",
            problems=tuple(f"{stage}: {cause}" for stage, cause in r.causes),
            category=pool.get(r.task).category,
            difficulty=pool.get(r.task).difficulty,
            static_assertions=r.static_assertions,
        )
        for r in rows
        if r.loads and r.validation is None
    ]
    tasks = tuple(sorted((*record.tasks, *extra), key=lambda row: row.id))
    return record.model_copy(update={"tasks": tasks})


def broken_row(bundle: Any) -> TaskCheck:
    """The row of a bundle that did not load: its load error is the cause."""
    return TaskCheck(task=bundle.id, loads=False, causes=[("loads", _one_line(bundle.message))])


async def check_folder(
    pool: Any, recipe: Any, *, concurrency: int, keep: Path | None, build_timeout_s: float | None, on_row: Any
) -> list[TaskCheck]:
    """Every task of ``pool`` through `check_task`, ``concurrency`` at a time; rows in pool order."""
    from t1_sandbox.registry import SANDBOXES

    cls = SANDBOXES.load(recipe.sandbox.kind)

    def factory() -> Any:
        return cls.from_spec(recipe.sandbox)

    gate = asyncio.Semaphore(concurrency)
    with tempfile.TemporaryDirectory(prefix="t1-check-tasks-") as tmp:
        work = keep if keep is not None else Path(tmp)

        async def one(task: Any) -> TaskCheck:
            async with gate:
                row = await check_task(task, recipe, factory, work, build_timeout_s)
            on_row(row)
            return row

        return list(await asyncio.gather(*(one(t) for t in pool.tasks)))


def _cell(value: bool | None, text: str | None = None, *, ran: bool) -> str:
    if not ran:
        return "-"
    if value is None:
        return "error"
    word = "yes" if value else "NO"
    return f"{word} {text}" if text else word


def print_table(rows: list[TaskCheck], title: str, out: Any) -> None:
    """The table (one row per task), then each failure's cause, one line per stage."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for col in ("task", "loads", "builds", "oracle passes", "do-nothing fails", "per-assertion report", "s"):
        table.add_column(col, no_wrap=True, justify="right" if col == "s" else "left")
    for r in rows:
        if r.report_seen:
            report = f"yes ({r.assertions} assertions)"
        elif r.report_seen is None:
            report = "-"
        else:
            report = f"NO ({r.report_source or 'nothing'})"
        table.add_row(
            escape(r.task),
            "yes" if r.loads else "NO",
            _cell(r.builds, ran=r.loads),
            r.oracle  # not run (no solution/)
            if r.validation is not None and r.validation.oracle is None
            else _cell(r.oracle_passes, r.oracle, ran=bool(r.builds)),
            _cell(r.nop_fails, r.nop, ran=bool(r.builds)),
            report,
            f"{r.duration_s:.0f}",
        )
    out.print(table)
    for r in rows:
        if r.stand_ins:
            out.print(
                f"  {escape(r.task)}: stand-in {escape(', '.join(r.stand_ins))}", soft_wrap=True, style="dim"
            )
    for r in rows:
        for stage, cause in r.causes:
            out.print(f"  {escape(f'{r.task} [{stage}]: {cause}')}", soft_wrap=True)


def summary_line(rows: list[TaskCheck], wall_s: float) -> str:
    """``N tasks: L load, B build, O oracle pass, D do-nothing fail, R per-assertion report; K ok ...``."""
    count = len(rows)
    loads = sum(r.loads for r in rows)
    builds = sum(bool(r.builds) for r in rows)
    oracle = sum(bool(r.oracle_passes) for r in rows)
    nop = sum(bool(r.nop_fails) for r in rows)
    report = sum(bool(r.report_seen) for r in rows)
    ok = sum(r.ok for r in rows)
    return (
        f"{count} tasks: {loads} load, {builds} build, {oracle} oracle pass, {nop} do-nothing fail, "
        f"{report} per-assertion report; {ok} of {count} pass every stage ({wall_s:.0f} s wall)"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="tools/check_tasks",
        description="Check a folder of Harbor / Terminal-Bench 2 tasks: loads, builds, oracle passes, "
        "do-nothing fails, per-assertion report.",
    )
    parser.add_argument("tasks", help="a folder of task bundles, one bundle, or builtin:mini")
    parser.add_argument("overrides", nargs="*", help="recipe dotlist overrides (sandbox.memory_mb=2048)")
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE, help="recipe whose sandbox is used")
    parser.add_argument(
        "--image-map", action="append", default=[], metavar="BASE=IMAGE|FILE", help="add to sandbox.images"
    )
    parser.add_argument(
        "--network", action=argparse.BooleanOptionalAction, default=None, help="set sandbox.network"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per task (one line each)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N bundles in stored order")
    parser.add_argument("--keep", type=Path, default=None, help="keep the verifier outputs under this folder")
    parser.add_argument("--record", type=Path, default=None, help="write the validation record (JSON) here")
    parser.add_argument(
        "--build-timeout", type=float, default=None, help="seconds per build (default: task.toml's, 600)"
    )
    parser.add_argument("-j", "--concurrency", type=int, default=1, help="tasks at once (default 1)")
    args = parser.parse_intermixed_args(argv)  # overrides may come before, between or after the options
    if args.concurrency < 1 or (args.limit is not None and args.limit < 1):
        parser.error("--concurrency and --limit must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the check; returns the exit code (module docstring)."""
    from rich.console import Console

    args = parse_args(sys.argv[1:] if argv is None else argv)
    # the table lists every stand-in; the backend's per-start warning would repeat it three times a task
    logging.getLogger("t1.sandbox.docker").setLevel(logging.ERROR)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, highlight=False)
    try:
        from t1_tasks import TaskError, load_pool

        recipe = load_recipe_for(args)
        try:
            pool = load_pool(args.tasks, limit=args.limit, strict=False)
        except (TaskError, OSError, ValueError) as exc:
            raise InputError(_one_line(exc)) from exc  # load_pool's messages name the pool
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        if args.record is not None and args.record.is_dir():
            raise InputError(f"--record {args.record}: is a directory; give the path of a JSON file")
    except (InputError, OSError) as exc:
        err.print(f"check_tasks: {exc}", soft_wrap=True)
        return EXIT_INPUT
    fatal, warnings = backend_problems(recipe) if pool.tasks else ([], [])
    if fatal:
        err.print(f"check_tasks: sandbox.kind {recipe.sandbox.kind!r} cannot run here:", soft_wrap=True)
        for line in fatal:
            err.print(f"  {line}", soft_wrap=True)
        return EXIT_FAILED
    for line in warnings:
        err.print(f"check_tasks: warning: {line}", soft_wrap=True)
    source = (
        f"{pool.source}: {len(pool.tasks) + len(pool.broken)} bundles, sandbox.kind {recipe.sandbox.kind}"
    )
    if not args.json:
        out.print(f"checking {source} ({args.recipe}), {args.concurrency} at a time", soft_wrap=True)

    def progress(row: TaskCheck) -> None:
        if args.json:
            return
        err.print(f"  {'ok' if row.ok else 'FAIL'} {row.task} ({row.duration_s:.0f} s)", soft_wrap=True)

    started = time.monotonic()
    try:
        rows = asyncio.run(
            check_folder(
                pool,
                recipe,
                concurrency=args.concurrency,
                keep=args.keep,
                build_timeout_s=args.build_timeout,
                on_row=progress,
            )
        )
    except KeyboardInterrupt:  # asyncio.run cancelled every check; each sandbox's close has run
        err.print("check_tasks: interrupted; the sandboxes in flight were closed")
        return EXIT_INTERRUPTED
    rows = sorted(rows + [broken_row(b) for b in pool.broken], key=lambda r: r.task)
    wall = time.monotonic() - started
    if args.json:
        for row in rows:
            print(json.dumps(row.as_json()))
    else:
        print_table(rows, f"{source} ({wall:.0f} s wall)", out)
        out.print(summary_line(rows, wall), soft_wrap=True)
    if args.record is not None:
        from t1_tasks import write_record

        written = write_record(record_of(rows, pool, wall), args.record)
        err.print(f"check_tasks: validation record written to {written}", soft_wrap=True)
    return EXIT_OK if all(r.ok for r in rows) else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
