import ast
import statistics
import tomllib
from pathlib import Path

import pytest

from t1_tasks import Pool, TaskError, load_pool, load_task

REQUIRED_CATEGORIES = {
    "scripting",
    "text-processing",
    "version-control",
    "system-administration",
    "debugging",
}


@pytest.fixture(scope="module")
def mini() -> Pool:
    return load_pool("builtin:mini")


def _independent_assertion_count(tests_dir: Path) -> int:
    # Counted with the AST, not the loader's regex.
    n = 0
    for path in tests_dir.rglob("*.py"):
        tree = ast.parse(path.read_text())
        n += sum(isinstance(node, ast.FunctionDef) and node.name.startswith("test_") for node in tree.body)
    return n


def test_mini_pool_has_at_least_eight_tasks_across_the_five_categories(mini):
    assert len(mini) >= 8
    assert {t.category for t in mini} >= REQUIRED_CATEGORIES


def test_every_task_has_three_or_more_assertions_counted_independently(mini):
    for task in mini:
        assert task.n_assertions == _independent_assertion_count(task.tests_dir), task.id
        assert task.n_assertions >= 3, task.id


def test_every_bundle_is_in_harbor_layout(mini):
    for task in mini:
        for rel in (
            "task.toml",
            "instruction.md",
            "environment/Dockerfile",
            "tests/test.sh",
            "solution/solve.sh",
        ):
            assert (task.path / rel).is_file(), f"{task.id}: {rel}"
        assert (task.environment_dir / "Dockerfile").read_text().splitlines()[
            0
        ] == "FROM debian:bookworm-slim"
        config = tomllib.loads((task.path / "task.toml").read_text())
        assert config["verifier"]["timeout_sec"] == task.verifier_timeout_s
        assert task.instruction


def test_every_verifier_writes_ctrf_and_always_reward_json(mini):
    for task in mini:
        script = (task.tests_dir / "test.sh").read_text()
        assert "--ctrf /logs/verifier/ctrf.json" in script, task.id
        assert "trap" in script and "/logs/verifier/reward.json" in script, task.id
        assert "pip" not in script and "uvx" not in script and "curl" not in script, task.id  # no network


def test_one_task_needs_git_bisect_over_a_generated_history(mini):
    task = mini.get("git-bisect-first-bad")
    assert task.category == "version-control"
    assert "git bisect" in (task.solution_dir / "solve.sh").read_text()
    assert "RUN" in (task.environment_dir / "Dockerfile").read_text()


def test_epoch_order_is_a_seeded_permutation(mini):
    a = mini.epoch_order(0, seed=1)
    assert sorted(t.id for t in a) == sorted(t.id for t in mini)
    assert [t.id for t in a] == [t.id for t in mini.epoch_order(0, seed=1)]
    orders = {tuple(t.id for t in mini.epoch_order(e, seed=1)) for e in range(6)}
    assert len(orders) > 1, "every epoch gave the same order"
    assert any(order != tuple(t.id for t in mini) for order in orders), "stored (quality-rank) order leaked"


def test_epoch_order_rejects_negative_epoch(mini):
    with pytest.raises(ValueError):
        mini.epoch_order(-1, seed=0)


def test_statistics_match_an_independent_computation(mini):
    s = mini.statistics()
    counts = [t.n_assertions for t in mini]
    assert s.n_tasks == len(mini)
    assert s.assertions_total == sum(counts)
    assert s.assertion_percentiles["p50"] == pytest.approx(statistics.median(counts))
    assert s.assertion_percentiles["max"] == max(counts)
    q = statistics.quantiles(counts, n=10, method="inclusive")  # inclusive == numpy's linear
    assert s.assertion_percentiles["p10"] == pytest.approx(q[0])
    assert s.assertion_percentiles["p90"] == pytest.approx(q[8])
    assert sum(s.categories.values()) == len(mini)


def test_limit_keeps_the_first_tasks_in_stored_order(mini):
    two = load_pool("builtin:mini", limit=2)
    assert [t.id for t in two] == [t.id for t in mini.tasks[:2]]


def _bundle(root: Path, toml: str = "", tests: str = "def test_a():\n    assert True\n") -> Path:
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "task.toml").write_text(toml or '[metadata]\ncategory = "scripting"\ndifficulty = "easy"\n')
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "tests" / "test_x.py").write_text(tests)
    (root / "solution" / "solve.sh").write_text("true\n")
    return root


def test_directory_pool_loads_bundles_sorted(tmp_path):
    _bundle(tmp_path / "b-task")
    _bundle(tmp_path / "a-task")
    pool = load_pool(str(tmp_path))
    assert [t.id for t in pool] == ["a-task", "b-task"]
    assert pool.tasks[0].agent_timeout_s == 600.0  # Harbor docs default


def test_missing_category_names_file_and_field(tmp_path):
    # metadata.category is optional (Harbor requires none); a category of the wrong type is still refused.
    root = _bundle(tmp_path / "t", toml='[metadata]\ncategory = 3\ndifficulty = "easy"\n')
    with pytest.raises(TaskError, match=r"task\.toml: field metadata\.category"):
        load_task(root)


def test_bad_timeout_names_field(tmp_path):
    toml = '[metadata]\ncategory = "x"\ndifficulty = "easy"\n[verifier]\ntimeout_sec = "soon"\n'
    with pytest.raises(TaskError, match=r"task\.toml: field verifier\.timeout_sec"):
        load_task(_bundle(tmp_path / "t", toml=toml))


def test_invalid_toml_and_missing_files_are_task_errors(tmp_path):
    with pytest.raises(TaskError, match="not valid TOML"):
        load_task(_bundle(tmp_path / "t1", toml="[metadata\n"))
    root = _bundle(tmp_path / "t2")
    (root / "solution" / "solve.sh").unlink()
    # only the oracle run (`t1 tasks validate`) needs solution/solve.sh; training loads the bundle (Harbor)
    assert load_task(root).has_solution is False
    with pytest.raises(TaskError, match=r"solution/solve\.sh"):
        load_task(root, require_solution=True)


def test_tests_without_test_functions_are_refused(tmp_path):
    with pytest.raises(TaskError, match="no test functions"):
        load_task(_bundle(tmp_path / "t", tests="x = 1\n"))


def test_unknown_builtin_and_missing_directory(tmp_path):
    with pytest.raises(TaskError, match="unknown builtin pool"):
        load_pool("builtin:nope")
    with pytest.raises(FileNotFoundError):
        load_pool(str(tmp_path / "absent"))
    with pytest.raises(TaskError, match="no task bundles"):
        load_pool(str(tmp_path))


def test_t1_tasks_imports_neither_torch_nor_t1_rollout():
    import subprocess
    import sys

    code = "import sys, t1_tasks; print('torch' in sys.modules, 't1_rollout' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ---------------------------------------------------------------- every broken bundle at once (strict=False)


def _broken_pool(root: Path) -> Path:
    """Five bundles: two good, three broken in different ways (bad TOML field, missing files)."""
    _bundle(root / "a-good")
    _bundle(root / "b-no-difficulty", toml='[metadata]\ncategory = "x"\ndifficulty = 3\n')
    (_bundle(root / "c-no-test-sh") / "tests" / "test.sh").unlink()
    _bundle(root / "d-good")
    e = _bundle(root / "e-no-solve-no-instruction")
    (e / "solution" / "solve.sh").unlink()
    (e / "instruction.md").unlink()
    return root


def test_non_strict_load_returns_the_good_tasks_and_every_broken_bundle_with_its_error(tmp_path):
    pool = load_pool(str(_broken_pool(tmp_path)), strict=False)
    assert [t.id for t in pool.tasks] == ["a-good", "d-good"]
    assert [b.id for b in pool.broken] == ["b-no-difficulty", "c-no-test-sh", "e-no-solve-no-instruction"]
    by_id = {b.id: b for b in pool.broken}
    assert "task.toml: field metadata.difficulty" in by_id["b-no-difficulty"].message
    assert "tests/test.sh: missing" in by_id["c-no-test-sh"].message
    # solution/solve.sh is needed only by `t1 tasks validate` (require_solution), so only instruction.md is
    # missing here; with it required, every missing file of a bundle is in one message
    assert "instruction.md: missing" in by_id["e-no-solve-no-instruction"].message
    for_oracle = load_pool(str(tmp_path), strict=False, require_solution=True)
    gone = {b.id: b.message for b in for_oracle.broken}["e-no-solve-no-instruction"]
    assert "missing instruction.md, solution/solve.sh" in gone
    assert all(isinstance(b.error, TaskError) and b.path.is_dir() for b in pool.broken)
    # broken bundles are reported, never trained on
    assert len(pool) == 2 and pool.statistics().n_tasks == 2
    assert {t.id for t in pool.epoch_order(0, seed=0)} == {"a-good", "d-good"}


def test_strict_load_stays_the_default_and_raises_on_the_first_broken_bundle(tmp_path):
    root = _broken_pool(tmp_path)
    with pytest.raises(TaskError, match=r"b-no-difficulty/task\.toml: field metadata\.difficulty"):
        load_pool(str(root))
    assert load_pool(str(root), limit=1).broken == ()  # strict pools never carry broken bundles


def test_a_bundle_missing_its_task_toml_is_reported_not_skipped(tmp_path):
    _bundle(tmp_path / "a-good")
    (_bundle(tmp_path / "b-no-toml") / "task.toml").unlink()
    (tmp_path / "notes").mkdir()  # a folder with none of a bundle's files is not a bundle
    (tmp_path / ".git").mkdir()
    pool = load_pool(str(tmp_path), strict=False)
    assert [t.id for t in pool] == ["a-good"]
    assert [(b.id, "task.toml: missing" in b.message) for b in pool.broken] == [("b-no-toml", True)]
    with pytest.raises(TaskError, match=r"b-no-toml/task\.toml: missing"):
        load_pool(str(tmp_path))


def test_non_utf8_files_are_task_errors_naming_the_file(tmp_path):
    root = _bundle(tmp_path / "t")
    (root / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(TaskError, match=r"instruction\.md: not UTF-8"):
        load_task(root)
    pool = load_pool(str(tmp_path), strict=False)
    assert pool.tasks == () and "instruction.md: not UTF-8" in pool.broken[0].message


def test_an_all_broken_pool_loads_non_strict_with_no_tasks_but_an_empty_directory_is_still_an_error(tmp_path):
    (_bundle(tmp_path / "full" / "only") / "tests" / "test.sh").unlink()
    pool = load_pool(str(tmp_path / "full"), strict=False)
    assert pool.tasks == () and [b.id for b in pool.broken] == ["only"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskError, match="no task bundles"):
        load_pool(str(tmp_path / "empty"), strict=False)


def test_task_toml_timeouts_and_resources_are_documented_as_unused_by_training():
    import t1_tasks

    doc = t1_tasks.__doc__ or ""
    names = ("rollout.agent_deadline_s", "rollout.verifier_deadline_s", "[environment]", "Task.environment")
    for name in names:
        assert name in doc, name
    assert "Training does not use a task's timeouts" in doc and "the Docker backend takes the task's" in doc


def test_an_unreadable_pool_directory_is_a_task_error(tmp_path, monkeypatch):
    _bundle(tmp_path / "a")

    def denied(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "iterdir", denied)
    with pytest.raises(TaskError, match="cannot read the directory: Permission denied"):
        load_pool(str(tmp_path), strict=False)
