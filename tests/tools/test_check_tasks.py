"""The real-task check (`tools/check_tasks`): its stages, causes, table, JSON rows and exit codes.

The parts that build and run containers carry the ``docker`` marker and skip with the backend's preflight
lines where no daemon answers; the others (loading, image maps, broken bundles, input errors) need nothing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "check_tasks"
_spec = importlib.util.spec_from_file_location("check_tasks", ROOT / "tools" / "check_tasks.py")
assert _spec is not None and _spec.loader is not None
ct = importlib.util.module_from_spec(_spec)
sys.modules["check_tasks"] = ct
_spec.loader.exec_module(ct)

TEST_PY = (
    "def test_file():\n    assert open('/app/out.txt').read() == 'ok\\n'\n\n\n"
    "def test_exists():\n    import os\n\n    assert os.path.exists('/app/out.txt')\n"
)
# A Terminal-Bench 2 style verifier: bootstrap uv from astral.sh, then uvx pytest with a CTRF report.
TB2_TEST_SH = """#!/bin/bash
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
# Harbor's template style: pytest straight from PATH (T1's verifier toolchain provides it), relative cwd.
PLAIN_TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def _task(
    root: Path,
    name: str,
    *,
    dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n",
    test_sh: str = PLAIN_TEST_SH,
    tests: str = TEST_PY,
    solve: str | None = "#!/bin/bash\necho ok > /app/out.txt\n",
    toml: str = '[metadata]\ncategory = "test"\n\n[environment]\nallow_internet = false\n',
) -> Path:
    bundle = root / name
    (bundle / "environment").mkdir(parents=True)
    (bundle / "tests").mkdir()
    (bundle / "environment" / "Dockerfile").write_text(dockerfile)
    (bundle / "tests" / "test.sh").write_text(test_sh)
    (bundle / "tests" / "test_outputs.py").write_text(tests)
    (bundle / "instruction.md").write_text("Write ok to /app/out.txt.\n")
    (bundle / "task.toml").write_text(toml)
    if solve is not None:
        (bundle / "solution").mkdir()
        (bundle / "solution" / "solve.sh").write_text(solve)
    return bundle


def _json_rows(out: str) -> dict[str, dict]:
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["task"]: r for r in rows}


# ---------------------------------------------------------------- no daemon needed


def test_image_map_reads_pairs_files_and_a_recipes_images_key(tmp_path):
    plain = tmp_path / "map.yaml"
    plain.write_text("ubuntu:24.04: local/ubuntu:noble\n")
    recipe_like = tmp_path / "sandbox.yaml"
    recipe_like.write_text("images:\n  python:3.13-slim: local/py:3.13\n")
    got = ct.image_map(["debian:13.0-slim=t1-local/debian:trixie", str(plain), str(recipe_like)])
    assert got == {
        "debian:13.0-slim": "t1-local/debian:trixie",
        "ubuntu:24.04": "local/ubuntu:noble",
        "python:3.13-slim": "local/py:3.13",
    }


@pytest.mark.parametrize("entry", ["=image", "base=", "no-such-file.yaml"])
def test_a_bad_image_map_entry_is_refused_by_name(entry):
    with pytest.raises(ct.InputError, match="--image-map"):
        ct.image_map([entry])


def test_an_image_map_file_that_is_not_a_mapping_is_refused(tmp_path):
    bad = tmp_path / "list.yaml"
    bad.write_text("- a\n- b\n")
    with pytest.raises(ct.InputError, match="mapping of base image"):
        ct.image_map([str(bad)])


def test_the_image_map_option_extends_the_recipes_map():
    args = ct.parse_args(["builtin:mini", "--image-map", "ubuntu:24.04=local/noble", "--network"])
    recipe = ct.load_recipe_for(args)
    assert recipe.sandbox.images["ubuntu:24.04"] == "local/noble"
    assert recipe.sandbox.images["python:3.13-slim-bookworm"] == "t1-local/python:3.13-slim-bookworm"  # kept
    assert recipe.sandbox.network is True


def test_recipe_overrides_may_follow_the_options():
    for argv in (
        ["builtin:mini", "sandbox.memory_mb=2048", "--json", "-j", "2"],
        ["builtin:mini", "--json", "-j", "2", "sandbox.memory_mb=2048"],
        ["builtin:mini", "--json", "sandbox.memory_mb=2048", "-j", "2"],
    ):
        args = ct.parse_args(argv)
        assert (args.overrides, args.json, args.concurrency) == (["sandbox.memory_mb=2048"], True, 2), argv
        assert ct.load_recipe_for(args).sandbox.memory_mb == 2048


def test_broken_bundles_are_rows_with_their_load_error_and_exit_1(tmp_path, capsys):
    _task(tmp_path, "no-instruction").joinpath("instruction.md").unlink()
    old = tmp_path / "old-layout"
    old.mkdir()
    (old / "task.yaml").write_text("instruction: do it\n")
    code = ct.main([str(tmp_path), "--json"])
    rows = _json_rows(capsys.readouterr().out)
    assert code == 1
    assert set(rows) == {"no-instruction", "old-layout"}
    assert all(r["loads"] is False and r["builds"] is None and not r["ok"] for r in rows.values())
    assert "instruction.md" in rows["no-instruction"]["causes"][0]["cause"]
    assert "harbor tasks migrate" in rows["old-layout"]["causes"][0]["cause"]


def test_the_table_names_each_broken_bundle_and_the_summary_counts_it(tmp_path):
    _task(tmp_path, "no-tests").joinpath("tests", "test.sh").unlink()
    proc = subprocess.run([str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "no-tests [loads]:" in proc.stdout and "test.sh" in proc.stdout
    assert "1 tasks: 0 load, 0 build, 0 oracle pass" in proc.stdout


def test_a_missing_folder_or_recipe_is_invalid_input(tmp_path, capsys):
    assert ct.main([str(tmp_path / "absent")]) == 2
    assert ct.main(["builtin:mini", "--recipe", str(tmp_path / "absent.yaml")]) == 2
    assert ct.main(["builtin:mini", "--image-map", "=x"]) == 2
    err = capsys.readouterr().err
    assert "check_tasks:" in err
    # the folder is named once per message, not once by the tool and again by load_pool
    assert err.count(f"pool {tmp_path / 'absent'}: {tmp_path / 'absent'} is not a directory") == 1
    assert err.count(str(tmp_path / "absent") + ":") == 1


def test_an_empty_folder_is_invalid_input_named_once(tmp_path, capsys):
    assert ct.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"check_tasks: pool {tmp_path}: no task bundles" in err


def test_the_summary_counts_each_stage_independently():
    rows = [
        ct.TaskCheck("a", loads=True, builds=True, oracle_passes=True, nop_fails=True, report_seen=True),
        ct.TaskCheck("b", loads=True, builds=False),
        ct.TaskCheck("c", loads=False),
        ct.TaskCheck("d", loads=True, builds=True, oracle_passes=None, nop_fails=True, report_seen=False),
    ]
    assert ct.summary_line(rows, 12.4) == (
        "4 tasks: 3 load, 2 build, 1 oracle pass, 2 do-nothing fail, 1 per-assertion report; "
        "1 of 4 pass every stage (12 s wall)"
    )


def test_a_task_that_asks_for_no_report_can_pass_on_its_binary_outcome():
    binary = ct.TaskCheck("a", loads=True, builds=True, oracle_passes=True, nop_fails=True, report_seen=False)
    assert binary.ok
    binary.report_asked = True  # test.sh passes --ctrf yet no report came: not ok
    assert not binary.ok


# ---------------------------------------------------------------- against a real daemon


@pytest.fixture
def daemon():
    fatal, _ = ct.backend_problems(ct.load_recipe_for(ct.parse_args(["builtin:mini"])))
    if fatal:
        pytest.skip("; ".join(fatal))


@pytest.mark.docker
def test_a_bundled_mini_task_passes_every_stage(daemon, capsys):
    code = ct.main(["builtin:mini", "--limit", "1", "--json"])
    (row,) = _json_rows(capsys.readouterr().out).values()
    assert code == 0, row
    assert row["task"] == "csv-region-totals" and row["ok"] is True
    assert row["oracle"] == "4/4" and row["report_seen"] is True and row["assertions"] == 4
    assert row["stand_ins"] == [
        "debian:bookworm-slim -> t1-local/debian:bookworm"
    ]  # recipes/tiny-docker.yaml
    assert row["causes"] == []


@pytest.mark.docker
def test_broken_tasks_fail_at_their_stage_with_a_named_cause_never_a_zero(daemon, tmp_path, capsys):
    _task(
        tmp_path,
        "apt-offline",
        dockerfile="FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y cowsay\n",
    )
    _task(tmp_path, "tb2-bootstrap", test_sh=TB2_TEST_SH)
    _task(tmp_path, "no-solution", solve=None)
    _task(tmp_path, "weak", tests="def test_nothing():\n    assert True\n")
    _task(tmp_path, "relative-cwd", tests="def test_cwd():\n    assert open('out.txt').read() == 'ok\\n'\n")
    code = ct.main([str(tmp_path), "--json"])
    rows = _json_rows(capsys.readouterr().out)
    assert code == 1
    causes = {
        name: " | ".join(f"{c['stage']}: {c['cause']}" for c in r["causes"]) for name, r in rows.items()
    }

    apt = rows["apt-offline"]
    assert apt["loads"] and apt["builds"] is False and apt["oracle"] is None
    assert "apt-get: no network to deb.debian.org" in causes["apt-offline"]

    # the TB2 bootstrap (curl | sh for uv, then uvx -p 3.13 with pinned wheels) verifies offline with T1's
    # verifier toolchain: its HOME's uv and env file, the pins from the host-filled wheelhouse
    tb2 = rows["tb2-bootstrap"]
    assert tb2["builds"] and tb2["oracle"] == "2/2" and tb2["oracle_passes"] is True, causes["tb2-bootstrap"]
    assert tb2["nop_fails"] is True and tb2["report_asked"] is True and tb2["report_seen"] is True

    nosol = rows["no-solution"]
    # the rule of `t1 tasks validate`: the do-nothing check alone, the task not ok (not proven solvable)
    assert nosol["builds"] and nosol["oracle"] == "not run (no solution/)" and nosol["nop_fails"] is True
    assert nosol["oracle_passes"] is None and nosol["ok"] is False
    assert "oracle passes: not run (no solution/): the task is not proven solvable" in causes["no-solution"]

    weak = rows["weak"]
    assert weak["oracle_passes"] is True and weak["nop_fails"] is False
    assert "weak verifier" in causes["weak"]

    # Harbor runs tests/test.sh in the task's working directory: a relative path needs no porting
    cwd = rows["relative-cwd"]
    assert cwd["ok"] is True and cwd["oracle"] == "1/1" and cwd["report_seen"] is True, causes["relative-cwd"]


@pytest.mark.docker
def test_the_record_written_is_the_one_attribution_reads(daemon, tmp_path, capsys):
    from t1_tasks import read_record

    _task(tmp_path, "good")
    _task(
        tmp_path,
        "apt-offline",
        dockerfile="FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y cowsay\n",
    )
    record = tmp_path / "out" / "record.json"
    code = ct.main([str(tmp_path), "--json", "--record", str(record)])
    capsys.readouterr()
    assert code == 1
    rows = {row.id: row for row in read_record(record).tasks}
    good = rows["good"]
    assert good.verdict == "ok" and good.oracle is not None and good.oracle.report_source == "ctrf"
    assert good.oracle.network is False  # recipes/tiny-docker.yaml: the policy attribution compares
    failed = rows["apt-offline"]
    assert failed.verdict == "failed" and failed.oracle is None  # proves nothing about the verifier
    assert any("builds:" in p for p in failed.problems)


@pytest.mark.docker
def test_a_stand_in_that_differs_from_the_tasks_base_says_what_differs(daemon, tmp_path, capsys):
    _task(tmp_path, "py-on-debian", dockerfile="FROM python:3.13-slim-bookworm\nWORKDIR /app\n")
    ct.main([str(tmp_path), "--image-map", "python:3.13-slim-bookworm=t1-local/debian:trixie", "--json"])
    row = _json_rows(capsys.readouterr().out)["py-on-debian"]
    (said,) = row["stand_ins"]
    assert said.startswith("python:3.13-slim-bookworm -> t1-local/debian:trixie (differs: Debian trixie"), (
        said
    )
    assert "EXTERNALLY-MANAGED" in said
