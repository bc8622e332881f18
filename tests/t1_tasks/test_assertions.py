"""Static assertion counts agree with what pytest itself collects (the verifier reports one entry each)."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from t1_tasks import TaskError, count_assertions, load_pool, load_task

# Each case: tests/ files (name -> source). The expected count is what `pytest --collect-only` collects from
# the same files, computed once for all cases in a subprocess (an independent computation, not our count).
KNOWN = {
    # the user's pool: one parametrized test of 3 cases plus one class method (the regex counted 2)
    "parametrize-and-class": {
        "test_outputs.py": """
            import pytest

            @pytest.mark.parametrize("n", [1, 2, 3])
            def test_cases(n):
                assert n

            class TestThing:
                def test_method(self):
                    assert True
        """
    },
    "stacked-params-and-ids": {
        "test_outputs.py": """
            import pytest
            from pytest import mark

            @pytest.mark.parametrize("a", [1, 2])
            @mark.parametrize(
                "b,c",
                [(1, 2), pytest.param(3, 4, id="named"), pytest.param(5, 6, marks=pytest.mark.slow)],
                ids=str,
            )
            def test_grid(a, b, c):
                assert a

            @pytest.mark.parametrize(argnames="x", argvalues=(1, 2))
            @pytest.mark.skipif(False, reason="never")
            def test_keyword_form(x):
                assert x

            def helper():
                return 1
        """
    },
    "classes": {
        "test_outputs.py": """
            import pytest

            @pytest.mark.parametrize("v", ["a", "b"])
            class TestParametrizedClass:
                def test_one(self, v):
                    assert v

                @pytest.mark.parametrize("w", [1, 2, 3])
                def test_two(self, v, w):
                    assert w

                def helper(self):
                    pass

            class TestOuter:
                class TestNested:
                    @pytest.mark.parametrize("n", [1, 2])
                    def test_inner(self, n):
                        assert n

            class TestWithInit:  # pytest refuses to collect it
                def __init__(self):
                    pass

                def test_never(self):
                    assert False

            class Helper:
                def test_not_a_test_class(self):
                    pass
        """
    },
    "module-pytestmark-redefinition-and-conftest": {
        "test_outputs.py": """
            import pytest

            pytestmark = [pytest.mark.parametrize("m", [1, 2]), pytest.mark.filterwarnings("ignore")]

            def test_first(m):
                assert m

            def test_first(m):  # noqa: F811 - redefined: pytest collects the later one only
                assert m

            def testnounderscore(m):  # pytest's default prefix is "test"
                assert m
        """,
        "conftest.py": """
            def test_in_conftest():  # pytest collects no tests from conftest.py
                pass
        """,
        "test_more.py": """
            def test_other():
                assert True
        """,
    },
}

UNKNOWN = {
    "non-literal-argvalues": """
        import pytest

        CASES = [1, 2, 3]

        @pytest.mark.parametrize("n", CASES)
        def test_cases(n):
            assert n
    """,
    "range-argvalues": """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_cases(n):
            assert n
    """,
    "fixture-params": """
        import pytest

        @pytest.fixture(params=[1, 2])
        def value(request):
            return request.param

        def test_value(value):
            assert value
    """,
    "generate-tests-hook": """
        def pytest_generate_tests(metafunc):
            metafunc.parametrize("n", [1, 2])

        def test_n(n):
            assert n
    """,
    "mark-bound-to-a-name": """
        import pytest

        both = pytest.mark.parametrize("n", [1, 2])

        @both
        def test_n(n):
            assert n
    """,
    "unittest-testcase": """
        import unittest

        class Checks(unittest.TestCase):
            def test_a(self):
                self.assertTrue(True)
    """,
    "inherited-tests": """
        class Base:
            def test_a(self):
                assert True

        class TestChild(Base):
            def test_b(self):
                assert True
    """,
    "conditional-definition": """
        import sys

        if sys.platform.startswith("linux"):
            def test_linux():
                assert True
    """,
}


def _write(root: Path, files: dict[str, str]) -> Path:
    tests = root / "tests"
    tests.mkdir(parents=True)
    for name, source in files.items():
        (tests / name).write_text(textwrap.dedent(source))
    return tests


@pytest.fixture(scope="module")
def pytest_collected(tmp_path_factory) -> dict[str, int]:
    """Items `pytest --collect-only` finds per KNOWN case (one subprocess for all cases)."""
    root = tmp_path_factory.mktemp("collect")
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: a marker\n")
    for case, files in KNOWN.items():
        _write(root / case, files)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--import-mode=importlib"]
        + ["-p", "no:cacheprovider", "-p", "no:asyncio"]
        + [str(root / case / "tests") for case in KNOWN],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    assert ids and "error" not in out.splitlines()[-1], out
    return {case: sum(re.match(rf"{re.escape(case)}/tests/", i) is not None for i in ids) for case in KNOWN}


@pytest.mark.parametrize("case", list(KNOWN))
def test_static_count_equals_what_pytest_collects(case, pytest_collected, tmp_path):
    assert pytest_collected[case] > 0
    assert count_assertions(_write(tmp_path, KNOWN[case])) == pytest_collected[case]


def test_the_reported_pool_counts_four_not_two(pytest_collected, tmp_path):
    # one parametrized test of 3 cases + one class method: pytest collects 4
    assert pytest_collected["parametrize-and-class"] == 4
    assert count_assertions(_write(tmp_path, KNOWN["parametrize-and-class"])) == 4


@pytest.mark.parametrize("case", list(UNKNOWN))
def test_a_count_only_pytest_can_know_is_unknown_not_guessed(case, tmp_path):
    assert count_assertions(_write(tmp_path, {"test_outputs.py": UNKNOWN[case]})) is None


def test_fixture_params_in_conftest_make_the_whole_count_unknown(tmp_path):
    files = {
        "conftest.py": "import pytest\n\n@pytest.fixture(params=['a', 'b'])\ndef mode(request):\n"
        "    return request.param\n",
        "test_outputs.py": "def test_a(mode):\n    assert mode\n",
    }
    assert count_assertions(_write(tmp_path, files)) is None


def test_an_unknown_count_loads_and_statistics_leave_it_out(tmp_path):
    pool_dir = tmp_path / "pool"
    for name, tests in (("a-known", KNOWN["parametrize-and-class"]), ("b-unknown", None)):
        root = pool_dir / name
        _write(root, tests or {"test_outputs.py": UNKNOWN["non-literal-argvalues"]})
        for d in ("environment", "solution"):
            (root / d).mkdir()
        (root / "task.toml").write_text('[metadata]\ncategory = "scripting"\ndifficulty = "easy"\n')
        (root / "instruction.md").write_text("do it\n")
        (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (root / "tests" / "test.sh").write_text("true\n")
        (root / "solution" / "solve.sh").write_text("true\n")
    pool = load_pool(str(pool_dir))
    assert [t.n_assertions for t in pool] == [4, None]
    stats = pool.statistics()
    assert (stats.assertions_total, stats.assertions_unknown) == (4, 1)
    assert stats.assertion_percentiles["max"] == 4.0


def test_a_test_file_that_is_not_python_is_a_task_error_naming_file_and_line(tmp_path):
    tests = _write(tmp_path, {"test_outputs.py": "def test_a(:\n    pass\n"})
    with pytest.raises(TaskError, match=r"tests/test_outputs\.py:1: not valid Python"):
        count_assertions(tests)


def test_files_without_test_functions_count_zero_even_with_fixture_params(tmp_path):
    files = {"test_outputs.py": "import pytest\n\n@pytest.fixture(params=[1])\ndef f(request):\n    pass\n"}
    assert count_assertions(_write(tmp_path, files)) == 0


def test_mini_pool_counts_are_all_known():
    assert all(isinstance(t.n_assertions, int) for t in load_pool("builtin:mini"))


def test_load_task_refuses_tests_that_define_no_test_function(tmp_path):
    root = tmp_path / "t"
    _write(root, {"test_outputs.py": "class TestX:\n    def __init__(self):\n        pass\n"})
    for d in ("environment", "solution"):
        (root / d).mkdir()
    (root / "task.toml").write_text('[metadata]\ncategory = "x"\ndifficulty = "easy"\n')
    (root / "instruction.md").write_text("do it\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (root / "tests" / "test.sh").write_text("true\n")
    (root / "solution" / "solve.sh").write_text("true\n")
    with pytest.raises(TaskError, match="no test functions"):
        load_task(root)
