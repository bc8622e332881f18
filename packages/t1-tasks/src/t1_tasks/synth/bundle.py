"""Writing a generated `Instance` as a Harbor task bundle (the layout ``t1_tasks.load_pool`` reads).

The bundle holds ``task.toml``, ``instruction.md``, ``environment/Dockerfile`` with the input files it
copies (the local sandbox's Dockerfile subset: FROM debian:bookworm-slim, WORKDIR, COPY),
``solution/solve.sh`` (the steps' commands) and ``tests/test.sh`` with ``tests/test_outputs.py``: one
pytest test per `Check`, whose expected values are literals computed by the generator, so the verifier
needs nothing but the task's files and reads no input the agent could have changed. ``test.sh`` writes a
CTRF report (per-assertion outcomes, T1 §5.2) and a binary ``reward.json``, as the bundled mini pool's do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from t1_tasks.synth.model import APP, Check, Instance

__all__ = ["render_instruction", "render_solution", "render_tests", "write_bundle"]

TEST_SH = """#!/bin/bash
# Verifier: one pytest test per assertion, a CTRF report, and always a binary reward.json (trap on EXIT).
# Needs no network: python3 with pytest and pytest-json-ctrf comes from the verifier toolchain on PATH.
mkdir -p /logs/verifier
rc=1
trap 'if [ "$rc" -eq 0 ]; then r=1.0; else r=0.0; fi
printf "{\\"reward\\": %s}\\n" "$r" > /logs/verifier/reward.json' EXIT
export PYTHONDONTWRITEBYTECODE=1
python3 -m pytest -p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA \\
    /tests/test_outputs.py
rc=$?
exit "$rc"
"""

TESTS_HEAD = '''"""Outcome checks for {task_id} (family {family}, seed {seed}), one test per assertion."""

import os
from pathlib import Path

ROOT = Path("{app}")


def lines(rel):
    return (ROOT / rel).read_text().splitlines()
'''

TASK_TOML = """version = "1.0"

[metadata]
author_name = "T1 project (t1_tasks.synth)"
category = "{category}"
difficulty = "easy"
tags = ["synth", "{family}"]

[agent]
timeout_sec = 600.0

[verifier]
timeout_sec = 120.0

[environment]
cpus = 1
memory_mb = 1024
storage_mb = 256
network_mode = "no-network"
"""

CATEGORIES = {"text": "text-processing", "csv": "data-processing", "files": "file-operations"}


def _test_body(c: Check) -> str:
    """The body of one check's test function (indented lines, no ``def``)."""
    p = f"ROOT / {c.path!r}"
    if c.kind == "exists":
        return f"    assert ({p}).is_file(), {c.path!r} + ' was not written'"
    if c.kind == "absent":
        return f"    assert not os.path.lexists({p}), {c.path!r} + ' is still there'"
    if c.kind == "executable":
        return f"    assert ({p}).is_file() and os.stat({p}).st_mode & 0o100, {c.path!r}"
    if c.kind == "line_count":
        return f"    assert len(lines({c.path!r})) == {c.expected!r}"
    if c.kind == "lines":
        return f"    assert lines({c.path!r}) == {list(c.expected or ())!r}"
    if c.kind == "text":
        return f"    assert ({p}).read_text().strip() == {c.expected!r}"
    if c.kind == "content":
        return f"    assert ({p}).is_file() and ({p}).read_text() == {c.expected!r}"
    raise ValueError(f"check {c.name!r}: unknown kind {c.kind!r}")


def render_tests(inst: Instance, app: str = APP) -> str:
    """``tests/test_outputs.py``: a module with one ``test_<check name>`` function per check.

    Args:
        inst: the instance.
        app: the directory the checks read (``/app`` in the bundle; a test of the generator renders them
            against a temporary directory instead).
    """
    head = TESTS_HEAD.format(task_id=inst.task_id, family=inst.family, seed=inst.seed, app=app)
    funcs = [f"\n\ndef test_{c.name}():\n{_test_body(c)}\n" for s in inst.steps for c in s.checks]
    return head + "".join(funcs)


def render_instruction(inst: Instance) -> str:
    """``instruction.md``: the preamble, then one bullet per step (every parameter named)."""
    bullets = "".join(f"- {s.instruction}\n" for s in inst.steps)
    return f"{inst.preamble}\n\nWorking in `/app`, do the following:\n\n{bullets}"


def render_solution(inst: Instance) -> str:
    """``solution/solve.sh``: every step's commands, in order, in `APP` under ``set -euo pipefail``."""
    cmds = "".join(f"{c}\n" for s in inst.steps for c in s.commands)
    return f"#!/bin/bash\nset -euo pipefail\ncd {APP}\n{cmds}"


def write_bundle(inst: Instance, out_dir: Path, *, overwrite: bool = False) -> Path:
    """Write ``inst`` as a Harbor bundle at ``out_dir / inst.task_id``; returns that directory.

    Raises:
        FileExistsError: the bundle's directory exists and ``overwrite`` is false.
    """
    root = out_dir / inst.task_id
    if root.exists():
        if not overwrite:
            raise FileExistsError(
                f"{root}: a bundle is already there (--overwrite, or overwrite=True, replaces it)"
            )
        shutil.rmtree(root)
    env = root / "environment"
    for rel, text in sorted(inst.inputs.items()):
        (env / rel).parent.mkdir(parents=True, exist_ok=True)
        (env / rel).write_text(text)
        (env / rel).chmod(0o644)
    copies = "".join(f"COPY {rel} {APP}/{rel}\n" for rel in sorted(inst.inputs))
    (env / "Dockerfile").write_text(f"FROM debian:bookworm-slim\nWORKDIR {APP}\n{copies}")
    (root / "task.toml").write_text(TASK_TOML.format(category=CATEGORIES[inst.family], family=inst.family))
    (root / "instruction.md").write_text(render_instruction(inst))
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(render_solution(inst))
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "tests" / "test_outputs.py").write_text(render_tests(inst))
    for script in ("solution/solve.sh", "tests/test.sh"):
        (root / script).chmod(0o755)
    return root
