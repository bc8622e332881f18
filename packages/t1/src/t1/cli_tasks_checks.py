"""`t1 tasks` verbs that check a pool's quality before training on it: audit and overlap (T1 §3).

Mounted on the same ``t1 tasks`` app as `t1.cli_tasks` (list, stats, validate), with the same arguments,
loading and exit codes: 0 success; 1 a check found something (a rejected task, a near-duplicate pair, a
broken bundle); 2 invalid input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from t1._errors import EXIT_CHECK_FAILED, EXIT_OK, reported
from t1.cli_tasks import INVALID, Debug, Limit, PoolArg, app, load_lenient, print_broken, table_console


@app.command()
def overlap(
    train: Annotated[str, typer.Argument(help="the training pool: builtin:mini or a directory of bundles")],
    evals: Annotated[list[str], typer.Argument(help="one or more evaluation pools (pool sources)")],
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold", min=0.0, max=1.0, help="smallest Jaccard reported (default pool.max_eval_overlap)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
    debug: Debug = False,
) -> None:
    """Near-duplicate tasks between a training pool and evaluation pools (T1 §3: disjoint by construction).

    Instruction and test content are compared as word 5-gram sets: MinHash LSH finds the candidates, the exact
    Jaccard decides (`t1_tasks.overlap`). Pairs at or above the threshold are listed closest first. Exit 0
    when none is found, 1 when any is (or a bundle is broken: it is not compared), 2 for an unloadable pool.
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        from dataclasses import asdict

        from t1_spec import PoolSpec
        from t1_tasks.overlap import find_overlaps

        if threshold is None:
            threshold = PoolSpec.model_fields["max_eval_overlap"].default
        if not threshold > 0:
            raise ValueError(f"--threshold must lie in (0, 1], got {threshold}")
        t = load_lenient(train, None)
        e = [load_lenient(source, None) for source in evals]
        pairs = find_overlaps(t, e, threshold=threshold)
        broken = [(p.source, b) for p in (t, *e) for b in p.broken]
        if pairs or broken:
            code = EXIT_CHECK_FAILED
        if as_json:
            counts = {
                "train_tasks": len(t),
                "eval_tasks": {p.source: len(p) for p in e},
                "pairs": len(pairs),
                "train_tasks_overlapping": len({p.train_task for p in pairs}),
            }
            errors = [{"pool": source, "id": b.id, "error": b.message} for source, b in broken]
            body = {"train": t.source, "evals": [p.source for p in e], "threshold": threshold}
            body |= {"counts": counts, "pairs": [asdict(p) for p in pairs], "broken": errors}
            typer.echo(json.dumps(body, indent=2))
        else:
            out = table_console()
            n_eval = sum(len(p) for p in e)
            title = (
                f"{t.source} ({len(t)} tasks) against {', '.join(p.source for p in e)} ({n_eval} tasks): "
                f"{len(pairs)} pair{'s' * (len(pairs) != 1)} at Jaccard >= {threshold:g}"
            )
            table = Table(title=title, box=box.SIMPLE)
            for col in ("train task", "eval pool", "eval task"):
                table.add_column(col, overflow="fold")
            for col in ("jaccard", "estimated", "instruction", "tests"):
                table.add_column(col, justify="right", no_wrap=True)
            table.add_column("overlap", no_wrap=True)
            for p in pairs:
                est = "-" if p.estimated_jaccard is None else f"{p.estimated_jaccard:.3f}"
                cells = (p.exact_jaccard, p.instruction_jaccard, p.tests_jaccard)
                exact, instr, tests = (f"{x:.3f}" for x in cells)
                table.add_row(p.train_task, p.eval_source, p.eval_task, exact, est, instr, tests, p.parts)
            if pairs:
                out.print(table)
            else:
                out.print(f"{title}: the pools are disjoint", soft_wrap=True)
            for p in (t, *e):
                print_broken(out, p, f"not compared, in {p.source}")
    # Outside `reported`: a typer.Exit raised inside it is reported as an error ("error: 1").
    if code:
        raise typer.Exit(code)


# Column abbreviations of the audit table, in the rubric's dimension order (t1_tasks.audit.DIMENSIONS).
AUDIT_SHORT_NAMES = ("align", "fair", "cover", "correct", "reason", "clarity", "complete", "value")


@app.command()
def audit(
    pool: PoolArg = "builtin:mini",
    validated: Annotated[
        Path | None,
        typer.Option("--validated", help="a validation record (t1 tasks validate --record): executed checks"),
    ] = None,
    judge: Annotated[
        bool,
        typer.Option("--judge/--no-judge", help="also ask the LLM judge (an OpenAI-compatible endpoint)"),
    ] = False,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="the judge's endpoint (default: $OPENAI_BASE_URL)")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="the judge's model (default: $T1_JUDGE_MODEL)")
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score", min=1, max=5, help="lowest QualityScore admitted (default: the spec's 3.0)"
        ),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write the rows (JSONL) to this file")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object instead of the table")
    ] = False,
    limit: Limit = None,
    debug: Debug = False,
) -> None:
    """Audit every task on the eight-dimension rubric: static checks, optionally the LLM judge (T1 §3.2).

    Static checks find test leakage, solution shortcuts and hidden-requirement candidates in the bundle's
    files; with `--validated` the validation record adds the weak-verifier, correctness and coverage checks.
    `--judge` scores all eight dimensions through an OpenAI-compatible endpoint (`--base-url`,
    `--model`, key from `$OPENAI_API_KEY`). `--out FILE` writes one JSONL row per task (what a recipe's
    `pool.audit.file` reads). Exit 0 when every task is admitted, 1 when one is rejected, has a judge
    failure or is a broken bundle, 2 for invalid input (no judge model, an unreadable record).
    """
    code = EXIT_OK
    with reported(debug, invalid=INVALID):
        import json

        from t1_spec import PoolAuditSpec
        from t1_tasks import read_record, record_for
        from t1_tasks.audit import DIMENSIONS, JudgeConfig, audit_pool, write_audit

        threshold = min_score if min_score is not None else PoolAuditSpec.model_fields["min_score"].default
        config = JudgeConfig.resolve(base_url=base_url, model=model) if judge else None
        p = load_lenient(pool, limit)
        ids = [t.id for t in p.tasks]
        record = record_for(read_record(validated), p.source, ids) if validated is not None else None
        rows = audit_pool(p, record=record, judge=config, min_score=threshold)
        written = write_audit(rows, out_file) if out_file is not None else None
        rejected = [r.task_id for r in rows if not r.admitted]
        failures = [r.task_id for r in rows if r.judge_failure]
        if as_json:
            summary = {
                "pool": p.source,
                "tasks": len(rows),
                "admitted": len(rows) - len(rejected),
                "rejected": rejected,
                "judge_failures": failures,
                "broken": [b.id for b in p.broken],
                "min_score": threshold,
                "out": str(written) if written else None,
                "rows": [r.model_dump(mode="json") for r in rows],
            }
            typer.echo(json.dumps(summary, indent=2))
        else:
            out = table_console()
            short = dict(zip([d.name for d in DIMENSIONS], AUDIT_SHORT_NAMES, strict=True))
            source = (
                "static checks" + (", validation record" if record else "") + (", judge" if config else "")
            )
            table = Table(title=f"{p.source}: audit ({source}), min score {threshold:g}", box=box.SIMPLE)
            for col in ("task", "score", "scored", "hard rejects", "below minimum", "verdict"):
                table.add_column(col, no_wrap=col in ("task", "score", "verdict"), overflow="fold")
            for r in rows:
                score = "-" if r.quality_score is None else f"{r.quality_score:.2f}"
                if r.quality_score is not None and r.quality_partial:
                    score += f" (w {r.scored_weight:.2f})"
                scored = " ".join(
                    f"{short[k]}={v.score}{'j' if v.source == 'judge' else 's'}" for k, v in r.scores.items()
                )
                below = ", ".join(f"{short[k]}={v}" for k, v in r.critical_failures.items())
                verdict = "[green]admitted[/]" if r.admitted else "[red]rejected[/]"
                if r.judge_failure:
                    verdict += " [red](judge failed)[/]"
                rejects = ", ".join(r.hard_rejects) or "-"
                table.add_row(r.task_id, score, scored or "-", rejects, below or "-", verdict)
            out.print(table)
            for r in rows:
                for reason in r.reasons:
                    out.print(f"  [red]{escape(r.task_id)}[/]: {escape(reason)}", soft_wrap=True)
            legend = ", ".join(f"{v}={k}" for k, v in short.items())
            out.print(
                escape(f"scored: {legend}; s = static check, j = judge; w = weight scored"),
                style="dim",
                soft_wrap=True,
            )
            if any(r.quality_score is None for r in rows):
                out.print(
                    "score -: no dimension scored (static checks found nothing to score); such a task is "
                    "admitted on the hard rejects alone: give --validated FILE and --judge for a full audit",
                    style="dim",
                    soft_wrap=True,
                )
            print_broken(out, p, "not audited")
            if written:
                out.print(f"audit rows written to {escape(str(written))}", soft_wrap=True)
            if rejected:
                out.print(
                    f"[bold red]{len(rejected)} of {len(rows)} tasks rejected:[/] {', '.join(rejected)}"
                )
            else:
                out.print(f"[bold green]all {len(rows)} tasks admitted[/]")
        if rejected or p.broken:
            code = EXIT_CHECK_FAILED
    if code:
        raise typer.Exit(code)
