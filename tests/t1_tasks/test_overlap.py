"""Near-duplicates between a training pool and evaluation pools (T1 §3): shingles, exact Jaccard, MinHash.

Expected values come from hand-counted shingle sets or an independent re-computation in this file, never
from ``t1_tasks.overlap`` itself.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from t1_tasks import Pool, find_overlaps, load_pool, load_task
from t1_tasks.overlap import jaccard, shingles
from t1_tasks.pool import builtin_pool_dir

MINI = builtin_pool_dir("mini")


def _bundle(root: Path, name: str, instruction: str, tests: str = "def test_a():\n    assert True\n") -> Path:
    """A minimal valid Harbor bundle with the given instruction and ``tests/test_outputs.py``."""
    b = root / name
    for rel, text in {
        "task.toml": '[metadata]\ncategory = "x"\ndifficulty = "easy"\n',
        "instruction.md": instruction,
        "environment/Dockerfile": "FROM debian:bookworm-slim\n",
        "tests/test.sh": "#!/bin/bash\n",
        "tests/test_outputs.py": tests,
        "solution/solve.sh": "#!/bin/bash\n",
    }.items():
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        (b / rel).write_text(text, encoding="utf-8")
    return b


def _pool(*bundles: Path, source: str = "tmp") -> Pool:
    return Pool(source=source, tasks=tuple(load_task(b) for b in bundles))


def _independent_parts(bundle: Path) -> dict[str, set[tuple[str, ...]]]:
    """A task's word 5-grams per part, computed without the module: lower-case, split on whitespace."""

    def grams(text: str) -> set[tuple[str, ...]]:
        w = text.lower().split()
        return {tuple(w[i : i + 5]) for i in range(len(w) - 4)} if len(w) > 5 else {tuple(w)}

    tests = set()
    for path in sorted((bundle / "tests").glob("*.py")):
        tests |= grams(path.read_text())
    return {"i": grams((bundle / "instruction.md").read_text()), "t": tests}


def _independent_jaccard(a: Path, b: Path) -> float:
    """The larger of the two parts' Jaccard similarities."""
    pa, pb = _independent_parts(a), _independent_parts(b)
    return max(len(pa[k] & pb[k]) / len(pa[k] | pb[k]) for k in ("i", "t"))


# --------------------------------------------------------------------------- shingles and exact Jaccard


def test_shingles_are_lower_cased_word_five_grams_with_whitespace_collapsed():
    assert shingles("A b\tC  d\n\ne F") == {"a b c d e", "b c d e f"}
    assert shingles("only three words") == {"only three words"}
    assert shingles("  \n ") == set()


def test_exact_jaccard_matches_a_hand_count():
    # {abcde, bcdef} vs {abcde, bcdeg}: one shared of three distinct
    a, b = shingles("a b c d e f"), shingles("a B c d e G")
    assert jaccard(a, b) == 1 / 3
    assert jaccard(a, a) == 1.0
    assert jaccard(set(), set()) == 0.0


def test_exact_jaccard_of_tasks_matches_an_independent_computation(tmp_path):
    src = MINI / "wordfreq-script"
    copy = tmp_path / "copy" / "wordfreq-copy"
    shutil.copytree(src, copy)
    text = (copy / "instruction.md").read_text()
    (copy / "instruction.md").write_text(
        text.replace("most frequent", "commonest").replace("standard", "std")
    )
    a, b = _independent_parts(src), _independent_parts(copy)
    expected_instruction = len(a["i"] & b["i"]) / len(a["i"] | b["i"])
    (pair,) = find_overlaps(_pool(src), [_pool(copy)], threshold=0.5, method="exact")
    assert pair.instruction_jaccard == pytest.approx(expected_instruction, abs=1e-12)
    assert expected_instruction < 1.0 and pair.tests_jaccard == 1.0 == pair.exact_jaccard
    assert pair.exact_jaccard == _independent_jaccard(src, copy)


# --------------------------------------------------------------------------- near-duplicates


def test_a_copy_of_a_mini_task_with_a_few_words_changed_is_found(tmp_path):
    copy = tmp_path / "heldout" / "word-counts"
    shutil.copytree(MINI / "wordfreq-script", copy)
    text = (copy / "instruction.md").read_text()
    (copy / "instruction.md").write_text(text.replace("most frequent", "commonest"))
    tests = copy / "tests" / "test_outputs.py"
    tests.write_text(tests.read_text().replace("the best of times", "the finest of times"))
    pairs = find_overlaps(load_pool("builtin:mini"), [load_pool(tmp_path / "heldout")], threshold=0.8)
    assert [(p.train_task, p.eval_task) for p in pairs] == [("wordfreq-script", "word-counts")]
    (p,) = pairs
    assert p.eval_source == str(tmp_path / "heldout") and p.train_source == "builtin:mini"
    assert 0.8 <= p.exact_jaccard < 1.0
    # The estimate of 128 permutations lies within 4 standard errors sqrt(J (1 - J) / 128) of the exact value
    se = math.sqrt(p.exact_jaccard * (1 - p.exact_jaccard) / 128)
    assert abs(p.estimated_jaccard - p.exact_jaccard) <= 4 * se


def test_two_unrelated_mini_tasks_are_not_paired():
    a, b = MINI / "csv-region-totals", MINI / "git-bisect-first-bad"
    assert _independent_jaccard(a, b) < 0.05
    for method in ("minhash", "exact"):
        assert find_overlaps(_pool(a), [_pool(b)], threshold=0.05, method=method) == []


@pytest.mark.parametrize("method", ["minhash", "exact", "auto"])
def test_the_pool_against_itself_reports_every_task_against_itself_at_one(method):
    mini = load_pool("builtin:mini")
    pairs = find_overlaps(mini, [mini], threshold=0.8, method=method)
    assert sorted((p.train_task, p.eval_task) for p in pairs) == sorted((t.id, t.id) for t in mini)
    assert all(p.exact_jaccard == 1.0 and p.parts == "both" for p in pairs)
    if method == "minhash":
        assert all(p.estimated_jaccard == 1.0 for p in pairs)
    else:
        assert all(p.estimated_jaccard is None for p in pairs)


def test_pairs_are_sorted_closest_first_and_name_their_pool():
    mini = load_pool("builtin:mini")
    other = Pool(source="again", tasks=mini.tasks[:3])
    pairs = find_overlaps(mini, [mini, other], threshold=1e-9, method="exact")
    values = [p.exact_jaccard for p in pairs]
    assert values == sorted(values, reverse=True)
    parts = {t.id: _independent_parts(t.path) for t in mini}
    others = [*parts, *list(parts)[:3]]
    sharing = [(a, b) for a in parts for b in others if any(parts[a][k] & parts[b][k] for k in ("i", "t"))]
    assert len(pairs) == len(sharing)
    assert {p.eval_source for p in pairs if p.exact_jaccard == 1.0} == {"builtin:mini", "again"}


# --------------------------------------------------------------------------- threshold edges and parts


def _edge_pools(tmp_path: Path) -> tuple[Pool, Pool, Pool]:
    """Instructions share 2 of 4 shingles (Jaccard 0.5); tests are one shingle each, different for the
    second pool (0.0) and equal for the third (1.0)."""
    a = _bundle(tmp_path / "a", "t", "one two three four five six seven")
    b = _bundle(tmp_path / "b", "t", "one two three four five six eight", "def test_b():\n    assert 1\n")
    c = _bundle(tmp_path / "c", "t", "one two three four five six eight")
    return _pool(a), _pool(b), _pool(c)


def test_a_pair_exactly_at_the_threshold_is_reported_and_just_above_it_is_not(tmp_path):
    train, heldout, _ = _edge_pools(tmp_path)
    (p,) = find_overlaps(train, [heldout], threshold=0.5, method="exact")
    assert (p.exact_jaccard, p.instruction_jaccard, p.tests_jaccard, p.parts) == (
        0.5,
        0.5,
        0.0,
        "instruction",
    )
    assert find_overlaps(train, [heldout], threshold=math.nextafter(0.5, 1.0), method="exact") == []


def test_parts_name_each_part_at_or_above_the_threshold(tmp_path):
    train, _, same_tests = _edge_pools(tmp_path)
    assert find_overlaps(train, [same_tests], threshold=0.5, method="exact")[0].parts == "both"
    (p,) = find_overlaps(train, [same_tests], threshold=0.6, method="exact")
    assert (p.exact_jaccard, p.parts) == (1.0, "tests")


def test_threshold_one_keeps_only_identical_parts(tmp_path):
    train, heldout, _ = _edge_pools(tmp_path)
    same = _pool(
        _bundle(tmp_path / "d", "t", "one two three four five six seven", "def test_c():\n    assert 2\n")
    )
    assert find_overlaps(train, [heldout], threshold=1.0) == []
    (p,) = find_overlaps(train, [same], threshold=1.0)
    assert (p.exact_jaccard, p.parts, p.estimated_jaccard) == (1.0, "instruction", 1.0)


def test_an_identical_instruction_over_rewritten_tests_is_a_near_duplicate(tmp_path):
    copy = tmp_path / "heldout" / "perms"
    shutil.copytree(MINI / "fix-permissions", copy)
    tests = copy / "tests" / "test_outputs.py"
    tests.write_text(tests.read_text().replace("def test_", "def test_x_"))
    (p,) = find_overlaps(load_pool("builtin:mini"), [load_pool(copy.parent)], threshold=0.8)
    assert (p.train_task, p.parts, p.instruction_jaccard) == ("fix-permissions", "instruction", 1.0)
    assert p.tests_jaccard < 0.8 and p.exact_jaccard == 1.0


def test_an_instruction_rewritten_over_copied_tests_overlaps_on_tests_only(tmp_path):
    tests = (MINI / "log-5xx-report" / "tests" / "test_outputs.py").read_text()
    a = _bundle(tmp_path / "a", "t", "Report the server errors of the access log, one line per hour.", tests)
    b = _bundle(tmp_path / "b", "t", "Summarise which pages failed in the web log and how often.", tests)
    (p,) = find_overlaps(_pool(a), [_pool(b)], threshold=0.8)
    assert p.parts == "tests" and p.instruction_jaccard == 0.0 and p.tests_jaccard == 1.0


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.01])
def test_a_threshold_outside_zero_one_is_refused(threshold):
    mini = load_pool("builtin:mini", limit=1)
    with pytest.raises(ValueError, match="threshold must lie in"):
        find_overlaps(mini, [mini], threshold=threshold)


def test_too_few_permutations_and_an_unknown_method_are_refused():
    mini = load_pool("builtin:mini", limit=1)
    with pytest.raises(ValueError, match="num_perm"):
        find_overlaps(mini, [mini], threshold=0.8, num_perm=8)
    with pytest.raises(ValueError, match="method"):
        find_overlaps(mini, [mini], threshold=0.8, method="fuzzy")
