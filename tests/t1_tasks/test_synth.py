"""Generated task families: deterministic, valid bundles, reference solutions that pass, verifiers that bite.

Expected outcomes come from running each instance's own shell solution on its input files (coreutils, awk)
and its rendered pytest file, an independent computation from the Python that wrote the literals in it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from t1_tasks import load_pool
from t1_tasks.synth import FAMILIES, generate, render_tests, write_bundle

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("awk") is None, reason="no bash")

SEEDS = range(6)


def _materialise(inst, root: Path) -> None:
    for rel, text in inst.inputs.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        (root / rel).chmod(0o644)


def _pytest(cases: list[tuple[object, Path]], tmp: Path) -> dict[str, tuple[int, int]]:
    """Run the rendered verifiers, each against its directory, in one pytest; task id -> (passed, failed)."""
    tests = tmp / f"verifiers-{len(list(tmp.iterdir()))}"
    tests.mkdir()
    for inst, root in cases:
        (tests / f"test_{inst.family}_{inst.seed}.py").write_text(render_tests(inst, app=str(root)))
    xml = tests / "report.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--junitxml={xml}",
        ]
        + [str(tests)],
        capture_output=True,
        cwd=tests,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    counts: dict[str, list[int]] = {}
    for case in ET.parse(xml).iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        counts.setdefault(case.get("classname", "").split(".")[-1], [0, 0])[failed] += 1
    return {f"synth-{k.split('_')[1]}-{int(k.split('_')[2]):05d}": (v[0], v[1]) for k, v in counts.items()}


def test_same_seed_same_task_other_seed_other_task():
    for family in FAMILIES:
        assert generate(family, 3) == generate(family, 3)
        assert generate(family, 3).fingerprint != generate(family, 4).fingerprint


def test_unknown_family_and_negative_seed_refused_by_name():
    with pytest.raises(ValueError, match="unknown task family 'nope'.*csv, files, text"):
        generate("nope", 0)
    with pytest.raises(ValueError, match="seed -1"):
        generate("text", -1)


def test_every_parameter_is_named_in_the_instruction():
    from t1_tasks.synth import render_instruction

    for family in FAMILIES:
        for seed in SEEDS:
            inst = generate(family, seed)
            text = render_instruction(inst)
            for step in inst.steps:
                for p in step.params:
                    if isinstance(p, str):
                        assert p.removeprefix("files/") in text, (inst.task_id, step.key, p)


def test_reference_solution_passes_every_assertion_and_nothing_passes_untouched(tmp_path):
    insts = [generate(family, seed) for family in sorted(FAMILIES) for seed in SEEDS]
    untouched, solved = [], []
    for inst in insts:
        _materialise(inst, tmp_path / f"untouched-{inst.task_id}")
        untouched.append((inst, tmp_path / f"untouched-{inst.task_id}"))
        root = tmp_path / f"solved-{inst.task_id}"
        _materialise(inst, root)
        script = "set -euo pipefail\n" + "".join(f"{c}\n" for s in inst.steps for c in s.commands)
        subprocess.run(["bash", "-c", script], cwd=root, check=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
        solved.append((inst, root))
    assert _pytest(untouched, tmp_path) == {i.task_id: (0, i.n_checks) for i in insts}
    assert _pytest(solved, tmp_path) == {i.task_id: (i.n_checks, 0) for i in insts}


def test_bundle_loads_with_the_assertion_count_of_its_checks(tmp_path):
    insts = [generate(f, s) for f in sorted(FAMILIES) for s in range(4)]
    for inst in insts:
        write_bundle(inst, tmp_path)
    pool = load_pool(str(tmp_path), require_solution=True)
    by_id = {t.id: t for t in pool.tasks}
    assert sorted(by_id) == sorted(i.task_id for i in insts)
    for inst in insts:
        assert by_id[inst.task_id].n_assertions == inst.n_checks
        assert inst.n_checks == sum(len(s.checks) for s in inst.steps) >= 3


def test_assertion_count_grows_with_the_steps_and_the_files_they_touch():
    # Over many seeds: more steps, more assertions; in `files`, one more file, one more assertion.
    by_steps: dict[int, list[int]] = {}
    for seed in range(60):
        inst = generate("csv", seed)
        by_steps.setdefault(len(inst.steps), []).append(inst.n_checks)
    means = [sum(v) / len(v) for _, v in sorted(by_steps.items())]
    assert len(means) == 3 and means == sorted(means) and means[0] < means[-1]
    sizes = set()
    for seed in range(60):
        inst = generate("files", seed)
        for step in inst.steps:
            if step.key == "delete":
                (ext,) = step.params
                victims = [p for p in inst.inputs if p.endswith(f".{ext}")]
                assert len(step.checks) == len(victims)
                sizes.add(len(victims))
    assert sizes == {2, 3, 4}


def test_existing_bundle_is_not_overwritten_unless_asked(tmp_path):
    inst = generate("text", 0)
    write_bundle(inst, tmp_path)
    with pytest.raises(FileExistsError, match="synth-text-00000"):
        write_bundle(inst, tmp_path)
    assert write_bundle(inst, tmp_path, overwrite=True) == tmp_path / "synth-text-00000"
