"""Pool validation: oracle passes every assertion, a do-nothing agent does not (issue 2 part 3)."""

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from t1_rollout.validate import validate_pool
from t1_sandbox.local import LocalSandbox
from t1_tasks import load_pool

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)

TEST_SH = Path(load_pool("builtin:mini").tasks[0].tests_dir / "test.sh").read_text()


def make_task(root: Path, name: str, *, tests: str, solve: str) -> None:
    t = root / name
    for d in ("environment", "tests", "solution"):
        (t / d).mkdir(parents=True)
    (t / "task.toml").write_text(
        '[metadata]\ncategory = "scripting"\ndifficulty = "easy"\n[agent]\ntimeout_sec = 30.0\n'
        "[verifier]\ntimeout_sec = 30.0\n"
    )
    (t / "instruction.md").write_text("Write hello to /app/out.txt\n")
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (t / "tests" / "test.sh").write_text(TEST_SH)
    (t / "tests" / "test_outputs.py").write_text(textwrap.dedent(tests))
    (t / "solution" / "solve.sh").write_text(solve)


GOOD_TESTS = """
    from pathlib import Path

    def test_exists():
        assert Path("/app/out.txt").is_file()

    def test_content():
        assert Path("/app/out.txt").read_text() == "hello\\n"

    def test_nothing_else():
        assert sorted(p.name for p in Path("/app").iterdir()) == ["out.txt"]
"""
WEAK_TESTS = """
    def test_a():
        assert True

    def test_b():
        assert 1 + 1 == 2

    def test_c():
        assert "x"
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    make_task(root, "a-good", tests=GOOD_TESTS, solve="echo hello > /app/out.txt\n")
    make_task(root, "b-weak", tests=WEAK_TESTS, solve="true\n")
    make_task(root, "c-wrong-oracle", tests=GOOD_TESTS, solve="echo bye > /app/out.txt\n")
    make_task(root, "d-crashing-oracle", tests=GOOD_TESTS, solve="exit 3\n")
    return load_pool(str(root))


async def test_validate_flags_weak_verifiers_and_bad_oracles(pool, tmp_path):
    result = await validate_pool(pool, sandbox_factory=LocalSandbox, concurrency=2, work_dir=tmp_path)
    by_id = {t.task_id: t for t in result.tasks}
    assert [t.task_id for t in result.tasks] == ["a-good", "b-weak", "c-wrong-oracle", "d-crashing-oracle"]
    good = by_id["a-good"]
    assert good.ok and (good.oracle.passed, good.oracle.total) == (3, 3) and good.nop.passed == 0
    assert by_id["b-weak"].problems == ["weak verifier: a do-nothing agent passes every assertion"]
    wrong = by_id["c-wrong-oracle"]
    assert not wrong.ok and wrong.oracle.passed == 2 and "test_content" in wrong.problems[0]
    crash = by_id["d-crashing-oracle"]
    assert not crash.ok and "solve.sh exited 3" in crash.problems[0]
    assert not result.ok and set(result.failed) == {"b-weak", "c-wrong-oracle", "d-crashing-oracle"}
    assert (tmp_path / "a-good" / "oracle" / "ctrf.json").is_file()


async def test_one_real_mini_task_validates():
    pool = load_pool("builtin:mini")
    from t1_tasks import Pool

    one = Pool(pool.source, (pool.get("fix-backup-script"),))
    result = await validate_pool(one, sandbox_factory=LocalSandbox)
    assert result.ok, result.tasks[0].problems


@pytest.mark.slow
async def test_the_whole_mini_pool_validates():
    result = await validate_pool(load_pool("builtin:mini"), sandbox_factory=LocalSandbox, concurrency=2)
    assert result.ok, {t.task_id: t.problems for t in result.tasks if not t.ok}
