"""A verifier that ran no test is an infrastructure failure in training, ``t1 eval`` and validation, not a 0.

One rule (``t1_reward.no_run``), from T1's own evidence only: no pytest session at all in what T1 captured,
or a dependency that the task's own ``test.sh`` installs found nowhere by the verifier's import guard before
pytest started. The attacks: an agent that plants the text of a missing dependency, forges the guard's line,
or leaves the module the tests import from its workspace broken or missing is still scored 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from t1_reward import read_report
from t1_reward.no_run import GUARD_MARK, guard_missing, no_run_cause
from t1_rollout.attribution import judge_run
from t1_rollout.evaluate import CheckPolicy, evaluate_pool
from t1_rollout.validate import validate_pool
from t1_rollout.verify import VerifierRun
from t1_sandbox.base import ExecResult, Sandbox
from t1_spec import DenseRewardSpec
from t1_tasks import Pool, load_task
from t1_tasks.validation import CheckRecord, TaskRecord
from t1_tasks.verifier_needs import verifier_needs

REPO = Path(__file__).resolve().parents[2]
GUARD_DIR = REPO / "packages/t1-sandbox/src/t1_sandbox/verifier_site"

#: A Terminal-Bench 2 test.sh whose tests need numpy, which the script installs with uvx.
NUMPY_TEST_SH = """#!/bin/bash
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 -w numpy==2.3.1 pytest \\
  --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
TESTS_PY = (
    "import numpy\nfrom solution import area\n\n\ndef test_a():\n    assert area(2) == 4\n\n\n"
    "def test_b():\n    assert numpy\n"
)
#: What test.sh printed when the uv bootstrap failed: no pytest session.
BOOTSTRAP_FAILED = (
    "curl: (6) Could not resolve host: astral.sh\n/tests/test.sh: line 5: uvx: command not found\n"
)
EMPTY_CTRF = json.dumps(
    {"results": {"tool": {"name": "pytest"}, "summary": {"tests": 0, "passed": 0, "failed": 0}, "tests": []}}
)


@pytest.fixture(autouse=True)
def no_wheelhouse(monkeypatch, tmp_path):
    """The wheelhouse is not fetched here (no package index in a unit test): an empty one."""
    from t1_rollout import verifier_toolchain

    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    monkeypatch.setattr(verifier_toolchain, "fill_wheelhouse", lambda requirements, python: (empty, []))


def collection_error(guard: str | None, module: str) -> str:
    """pytest's output for a collection error on ``module``, after the guard's line (None: no guard line)."""
    head = f"{GUARD_MARK} {guard}\n" if guard is not None else ""
    return (
        head + "============================= test session starts ==============================\n"
        "collected 0 items / 1 error\n\n"
        "==================================== ERRORS ====================================\n"
        "___________________ ERROR collecting tests/test_outputs.py ____________________\n"
        f"E   ModuleNotFoundError: No module named '{module}'\n"
        "=========================== short test summary info ============================\n"
        "ERROR ../tests/test_outputs.py\n"
        "!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n"
        "=============================== 1 error in 0.12s ===============================\n"
    )


def make_task(root: Path, test_sh: str = NUMPY_TEST_SH):
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text('[metadata]\ncategory = "x"\n[verifier]\ntimeout_sec = 30\n')
    (root / "instruction.md").write_text("write /app/solution.py\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text(test_sh)
    (root / "tests" / "test_outputs.py").write_text(TESTS_PY)
    (root / "solution" / "solve.sh").write_text("echo 'def area(r): return r * r' > /app/solution.py\n")
    return load_task(root)


def _run(tmp_path: Path, stdout: str, files: dict[str, str]) -> VerifierRun:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    (out / "test-stdout.txt").write_text(stdout)
    for name, text in files.items():
        (out / name).write_text(text)
    return VerifierRun(
        out, exit_code=0, timed_out=False, duration_s=1.0, stdout_tail=stdout[-4000:], network=True
    )


def _train(tmp_path: Path, stdout: str, files: dict[str, str], validated: TaskRecord | None = None):
    task = make_task(tmp_path / "task")
    return asyncio.run(
        judge_run(_run(tmp_path, stdout, files), task, DenseRewardSpec(), validated=validated)
    )[1]


def test_test_sh_pins_are_read_from_the_script():
    needs = verifier_needs(NUMPY_TEST_SH)
    assert needs.packages == (("pytest", "8.4.1"), ("pytest-json-ctrf", "0.3.5"), ("numpy", "2.3.1"))
    assert needs.python == "3.13" and needs.uses_uv
    assert "numpy" in needs.import_names and "solution" not in needs.import_names
    assert verifier_needs("pip install scikit-learn==1.5 Pillow\n").import_names == {"sklearn", "PIL"}


# --- training (t1_rollout.attribution.judge_run) ------------------------------------------------------------


def test_training_drops_a_verifier_whose_bootstrap_failed_and_ignores_its_reward_txt(tmp_path):
    verdict = _train(tmp_path, BOOTSTRAP_FAILED, {"reward.txt": "0\n"})
    assert (verdict.status, verdict.reward.value) == ("failed", None)
    assert "verifier did not run" in verdict.cause and "reward.txt is ignored" in verdict.cause


def test_training_drops_a_run_whose_installed_test_dependency_was_missing_before_any_test(tmp_path):
    files = {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"}
    verdict = _train(tmp_path, collection_error("numpy", "numpy"), files)
    assert (verdict.status, verdict.reward.value) == ("failed", None)
    assert "numpy, which test.sh installs for them, was missing" in verdict.cause


def test_a_planted_missing_dependency_error_is_still_the_agents_zero(tmp_path):
    # numpy was there when pytest started (the guard found nothing missing); the agent's solution.py raised
    # "No module named 'numpy'" at collection: the text is the agent's, the guard's line says otherwise.
    files = {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"}
    verdict = _train(tmp_path, collection_error("", "numpy"), files)
    assert (verdict.status, verdict.reward.value, verdict.reward.kind) == ("finished", 0.0, "no_verdict")


def test_a_forged_second_guard_line_before_the_session_makes_the_guard_evidence_unusable(tmp_path):
    forged = f"{GUARD_MARK} numpy\n" + collection_error("", "numpy")
    verdict = _train(tmp_path, forged, {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"})
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)
    # a guard line printed after pytest's session header (by the program under test) is not the guard's
    late = collection_error(None, "numpy").replace("collected 0", f"{GUARD_MARK} numpy\ncollected 0")
    assert guard_missing(late) is None
    verdict = _train(tmp_path, late, {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"})
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)


def test_a_module_of_the_agents_workspace_missing_or_broken_is_the_agents_zero(tmp_path):
    # the tests import solution from /app: not something test.sh installs; the do-nothing agent's 0
    files = {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"}
    verdict = _train(tmp_path, collection_error("solution", "solution"), files)
    assert (verdict.status, verdict.reward.value) == ("finished", 0.0)


def test_with_a_record_proving_the_verifier_runs_here_neither_rule_applies(tmp_path):
    oracle = CheckRecord(passed=2, total=2, report_source="ctrf", duration_s=1.0, network=True)
    record = TaskRecord(id="task", verdict="ok", oracle=oracle)
    for stdout in (BOOTSTRAP_FAILED, collection_error("numpy", "numpy")):
        verdict = _train(tmp_path, stdout, {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"}, record)
        assert (verdict.status, verdict.reward.value) == ("finished", 0.0)


def test_the_rule_reads_only_the_report_the_capture_and_the_tasks_facts(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "reward.txt").write_text("0\n")
    report = read_report(out)
    common = {"expects_per_assertion": True, "verifier_proven": False, "test_dependencies": frozenset()}
    assert no_run_cause(report, BOOTSTRAP_FAILED, **common) is not None
    assert no_run_cause(report, BOOTSTRAP_FAILED, **{**common, "expects_per_assertion": False}) is None
    (out / "reward.txt").write_text("1\n")  # a solved reward file is the binary fallback's, not dropped
    assert no_run_cause(read_report(out), BOOTSTRAP_FAILED, **common) is None


# --- the guard's line, from a real pytest process ---------------------------------------------------------


def test_the_guard_names_the_tests_imports_found_nowhere_before_pytest_starts(tmp_path):
    tests, app = tmp_path / "tests", tmp_path / "app"
    tests.mkdir()
    app.mkdir()
    (tests / "test_x.py").write_text(
        "import json\nimport t1_no_such_dependency\nfrom solution import area\nfrom helper import x\n\n"
        "try:\n    import t1_optional_thing\nexcept ImportError:\n    pass\n\n\ndef test_a():\n    pass\n"
    )
    (tests / "helper.py").write_text("x = 1\n")
    (app / "solution.py").write_text("raise ModuleNotFoundError(\"No module named 'json'\")\n")
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR), "T1_VERIFIER_TESTS": str(tests)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", str(tests)],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    stdout = done.stderr + done.stdout  # the guard writes before pytest starts (one pipe keeps that order)
    assert guard_missing(stdout) == {"t1_no_such_dependency"}, stdout[-2000:]


# --- t1 eval and t1 tasks validate, with a scripted sandbox -----------------------------------------------


class Scripted(Sandbox):
    """Plays back a verifier run: what test.sh printed and the files it left in /logs/verifier."""

    def __init__(self, stdout: str, files: dict[str, str]):
        self.stdout, self.files = stdout, files
        self.network = True

    async def start(self, environment_dir, *, timeout_s):
        pass

    async def upload(self, local, remote, *, timeout_s=60, read_only=False):
        pass

    async def exec(self, command, *, timeout_s, cwd=None, env=None, cpu_time_s=None):
        if "solve.sh" in command or "sha256sum" in command or command.startswith("rm -rf /tmp/.t1-verifier"):
            return ran()
        if "find /logs/" in command:
            return ran("".join(f"f {len(t)} {n}\0" for n, t in self.files.items()))
        return ran(self.stdout)

    async def download(self, remote, local, *, timeout_s=60):
        local.mkdir(parents=True, exist_ok=True)
        if remote != "/tests":
            for name, text in self.files.items():
                (local / name).write_text(text)

    async def open_shell(self):
        raise NotImplementedError

    async def close(self):
        pass


def ran(stdout: str = "") -> ExecResult:
    return ExecResult(stdout=stdout, stderr="", exit_code=0, timed_out=False, duration_s=0.1)


#: What test.sh printed when uvx found no Python 3.13: no pytest session, no host named.
NO_PYTHON = "error: No interpreter found for Python 3.13 in managed installations or search path\n"
CASES = {
    "bootstrap": (BOOTSTRAP_FAILED, {"reward.txt": "0\n"}, ("did not run", "astral.sh")),
    "no-python": (NO_PYTHON, {"reward.txt": "0\n"}, ("did not run",)),
    "dependency": (
        collection_error("numpy", "numpy"),
        {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"},
        ("numpy",),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("policy", ["oracle", "do-nothing"])
def test_eval_counts_a_verifier_that_ran_no_test_as_failed_never_a_zero(case, policy, tmp_path):
    stdout, files, causes = CASES[case]
    task = make_task(tmp_path / "task")
    report = asyncio.run(
        evaluate_pool(
            Pool("test", (task,)),
            CheckPolicy(policy, lambda: Scripted(stdout, files), DenseRewardSpec()),
            attempts=2,
            concurrency=1,
            total_timeout_s=60,
            work_dir=tmp_path / "w",
        )
    )
    s = report.summary()
    assert (s["trials"], s["failed"]) == (0, 2), s
    for t in report.trials:  # no agent ran: what the verifier printed may name the host it missed
        assert t.status == "failed" and any(c in t.cause for c in causes), t.cause


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_names_a_verifier_that_ran_no_test_as_such(case, tmp_path):
    stdout, files, causes = CASES[case]
    task = make_task(tmp_path / "task")
    result = asyncio.run(
        validate_pool(
            Pool("t", (task,)), sandbox_factory=lambda: Scripted(stdout, files), work_dir=tmp_path / "w"
        )
    )
    problems = result.tasks[0].problems
    assert problems[0].startswith("oracle: verifier: ") and causes[-1] in problems[0], problems
    assert problems[1].startswith("do-nothing: verifier: ") and causes[-1] in problems[1], problems


def test_validate_counts_a_do_nothing_run_that_could_not_import_the_agents_module_as_failing(tmp_path):
    task = make_task(tmp_path / "task")
    passed = textwrap.dedent("""\
        ============================= test session starts ==============================
        collected 2 items
        ============================== 2 passed in 0.10s ===============================
    """)
    ctrf = {
        "results": {
            "tool": {"name": "pytest"},
            "summary": {"tests": 2, "passed": 2, "failed": 0},
            "tests": [{"name": "test_a", "status": "passed"}, {"name": "test_b", "status": "passed"}],
        }
    }

    def factory():
        box = Scripted(f"{GUARD_MARK} \n" + passed, {"ctrf.json": json.dumps(ctrf), "reward.txt": "1\n"})
        nop = Scripted(
            collection_error("solution", "solution"), {"ctrf.json": EMPTY_CTRF, "reward.txt": "0\n"}
        )
        made.append(box)
        return box if len(made) == 1 else nop

    made: list[Sandbox] = []
    result = asyncio.run(validate_pool(Pool("t", (task,)), sandbox_factory=factory, work_dir=tmp_path / "w"))
    assert result.tasks[0].ok, result.tasks[0].problems


# --- a training trial (run_trial) in a local sandbox: the record is failed with the cause, never scored -----

#: No host named (so the network rule does not decide): uvx asks for a Python nobody has here.
NO_PYTHON_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
uvx -p 3.10 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
#: The tests import a package that test.sh installs; without network the install fails and pytest runs.
MISSING_DEP_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
pip install t1-no-such-dependency==1.0 >/dev/null 2>&1 || true
python3 -m pytest -p no:cacheprovider --rootdir=/tests --ctrf /logs/verifier/ctrf.json -rA \
  /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def _trial_task(tmp_path: Path, test_sh: str, extra_import: str | None = None):
    import shutil as sh

    from t1_tasks import load_pool

    src = load_pool("builtin:mini").get("csv-region-totals")
    root = tmp_path / "pool" / src.id
    sh.copytree(src.path, root)
    (root / "tests" / "test.sh").write_text(test_sh)
    if extra_import:
        tests = root / "tests" / "test_outputs.py"
        tests.write_text(f"import {extra_import}\n" + tests.read_text())
    return load_task(root)


class _IdleEngine:
    weight_version = 0

    async def generate(self, input_ids, sampling, **kwargs):
        await asyncio.sleep(3600)  # the agent deadline ends the episode: a do-nothing agent


def _train_trial(task, tmp_path: Path):
    from t1_rollout.engine.base import SamplingParams
    from t1_rollout.harness import HarnessConfig
    from t1_rollout.trial import TrialLimits, run_trial
    from t1_sandbox.local import LocalSandbox
    from t1_tito import ChatTemplate, TitoSession, load_tokenizer

    return asyncio.run(
        run_trial(
            task,
            sandbox_factory=LocalSandbox,
            engine=_IdleEngine(),
            tito=TitoSession(load_tokenizer(), ChatTemplate()),
            sampling=SamplingParams(max_new_tokens=8),
            harness=HarnessConfig(max_turns=1, agent_deadline_s=1.0, max_new_tokens=8, context_tokens=8192),
            limits=TrialLimits(remote_deadline_s=180, agent_deadline_s=1.0, verifier_deadline_s=90),
            reward_spec=DenseRewardSpec(),
            out_dir=tmp_path / "trial",
        )
    )


needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs bubblewrap and root"
)


@needs_bwrap
def test_a_training_trial_whose_verifier_did_not_run_is_failed_not_scored(tmp_path):
    rec = _train_trial(_trial_task(tmp_path, NO_PYTHON_TEST_SH), tmp_path)
    assert rec.verifier is not None and rec.verifier.error is None
    assert rec.status == "failed" and (rec.reward is None or rec.reward.value is None), rec.cause
    assert "the verifier did not run" in rec.cause and "no python3.10" in rec.cause, rec.cause


@needs_bwrap
def test_a_training_trial_whose_test_dependency_could_not_be_installed_is_failed_not_scored(tmp_path):
    # pytest ran and collected nothing (the import failed). Without network the sandbox's policy already
    # names the cause (test.sh installs from PyPI); with network, the guard's line decides (judge level above)
    task = _trial_task(tmp_path, MISSING_DEP_TEST_SH, extra_import="t1_no_such_dependency")
    rec = _train_trial(task, tmp_path)
    assert rec.status == "failed", (rec.status, rec.cause)
    assert "verifier could not reach PyPI" in rec.cause and "reward.txt is ignored" in rec.cause
    captured = (rec.verifier.out_dir / "test-stdout.txt").read_text()
    assert guard_missing(captured) == {"t1_no_such_dependency"}, captured[-2000:]
