"""Near-duplicate tasks between a training pool and evaluation pools, by MinHash over word shingles.

T1 §3: the training pool is out of distribution by construction, and checked to be disjoint from the
evaluation suites; this module is that check.

What is compared: each task's instruction (``instruction.md``) and its test content (every ``tests/**/*.py``
file, each file on its own), normalised to lower case with every run of whitespace collapsed to one space,
cut into word ``SHINGLE_WORDS``-grams (shingles; a text shorter than that is one shingle). The two parts
are compared apart, each by the Jaccard similarity of its shingle sets, ``|A ∩ B| / |A ∪ B|``, and a pair
is as close as its closer part: an instruction copied over rewritten tests is a near-duplicate (the agent
saw that prompt in training), and so are copied tests under a reworded instruction. An instruction of at
most five words is one shingle, so two such instructions match only when identical.

How: the library ``datasketch`` hashes each part into a MinHash signature of ``num_perm`` values, and one
``MinHashLSH`` index per part over the evaluation tasks returns, for every training task, the candidates
whose signatures agree on at least one band. The exact Jaccard of each candidate then decides (``>=
threshold``); the MinHash estimate is reported beside it (standard error ``sqrt(J (1 - J) / num_perm)``,
about 0.035 at J = 0.8 and the default 128). The index's bands are tuned by datasketch for the threshold
with false negatives weighted 0.95 against false positives 0.05 (``LSH_WEIGHTS``), because a missed pair is
the costly error here and a spurious candidate costs one exact comparison: at threshold 0.8 and 128
permutations (16 bands of 8) a pair at exactly J = 0.8 is a candidate with probability 0.95, at J = 0.9
with probability 0.9999. A threshold above 0.99 is tuned as 0.99 (datasketch refuses the single band it
would pick), which only adds candidates.

Cost (measured on a shared 2-core machine): importing datasketch takes about 1.5 s (it imports scipy); a
signature takes about 0.6 ms plus 3 ms per 1,000 shingles at 128 permutations (linear in ``num_perm``), two
per task; LSH queries are near-constant per task and the exact comparisons linear in the candidates: 1,500
training tasks of 500 shingles against 300 evaluation tasks took 7 s. ``method="exact"`` compares every
pair exactly and imports nothing (no estimate, no false negatives): quadratic, for small pools; ``"auto"``
picks it up to ``EXACT_PAIRS_MAX`` pairs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from t1_tasks.pool import Pool
from t1_tasks.task import Task, read_bundle_text

__all__ = [
    "EXACT_PAIRS_MAX",
    "LSH_WEIGHTS",
    "SHINGLE_WORDS",
    "OverlapPair",
    "find_overlaps",
    "jaccard",
    "shingles",
]

SHINGLE_WORDS = 5
"""Words per shingle: word 5-grams, a common choice for near-duplicate text (a changed word breaks at most
five shingles)."""

LSH_WEIGHTS = (0.05, 0.95)
"""``(false positive, false negative)`` weights that datasketch's ``MinHashLSH`` minimises when it picks its
bands; false negatives weigh more because the exact Jaccard then removes the false positives."""

EXACT_PAIRS_MAX = 10_000
"""Largest number of (training, evaluation) task pairs that ``method="auto"`` compares exactly (pairs)."""

Part = Literal["instruction", "tests"]
PARTS: tuple[Part, ...] = ("instruction", "tests")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class OverlapPair:
    """A training task and an evaluation task at or above the Jaccard threshold.

    Attributes:
        train_source: the training pool's source (``builtin:mini`` or a directory).
        train_task: the training task's id.
        eval_source: the evaluation pool's source.
        eval_task: the evaluation task's id.
        estimated_jaccard: the MinHash estimate of ``exact_jaccard``, the larger of the two parts' estimates
            (fraction); None when the pair was compared exactly only (``method="exact"``).
        exact_jaccard: the larger of ``instruction_jaccard`` and ``tests_jaccard`` (fraction): a pair is as
            close as its closer part, the value that decides.
        instruction_jaccard: the Jaccard similarity of the instruction shingles alone (fraction).
        tests_jaccard: the Jaccard similarity of the test shingles alone (fraction).
        parts: which part is at or above the threshold on its own: ``instruction``, ``tests`` or ``both``.
    """

    train_source: str
    train_task: str
    eval_source: str
    eval_task: str
    estimated_jaccard: float | None
    exact_jaccard: float
    instruction_jaccard: float
    tests_jaccard: float
    parts: Literal["instruction", "tests", "both"]


def shingles(text: str, size: int = SHINGLE_WORDS) -> set[str]:
    """The word ``size``-grams of ``text`` after lower-casing and collapsing whitespace.

    Args:
        text: any text.
        size: words per shingle (>= 1).

    Returns:
        The set of shingles, each its words joined by one space; one shingle holding every word when the
        text has fewer than ``size`` words; empty for a text with no words.
    """
    words = _WHITESPACE.sub(" ", text.lower()).split()
    if len(words) <= size:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i : i + size]) for i in range(len(words) - size + 1)}


def jaccard(a: set, b: set) -> float:
    """``|a ∩ b| / |a ∪ b|`` (fraction); 0.0 when both sets are empty (no content, no overlap)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def task_shingles(task: Task) -> dict[Part, set[str]]:
    """The instruction and test shingles of ``task`` (test files ``tests/**/*.py``, each shingled alone).

    Raises:
        TaskError: a test file is not UTF-8 or cannot be read (names it).
    """
    tests: set[str] = set()
    for path in sorted(task.tests_dir.rglob("*.py")):
        tests |= shingles(read_bundle_text(path))
    return {"instruction": shingles(task.instruction), "tests": tests}


def find_overlaps(
    train: Pool,
    evals: Sequence[Pool],
    *,
    threshold: float,
    num_perm: int = 128,
    seed: int = 1,
    method: Literal["minhash", "exact", "auto"] = "minhash",
) -> list[OverlapPair]:
    """Every (training task, evaluation task) pair whose instruction or tests reach ``threshold`` (Jaccard).

    Args:
        train: the training pool.
        evals: the evaluation pools (each pair names its pool's source); the training pool itself may be
            one of them, and then every task is reported against itself at 1.0.
        threshold: smallest exact Jaccard similarity of a part that is reported (fraction in (0, 1]);
            ``pool.max_eval_overlap`` in a recipe.
        num_perm: MinHash permutations (>= 16): more is a finer estimate and a slower signature (linear).
        seed: seed of the MinHash permutations; the same seed gives the same signatures and candidates.
        method: ``minhash`` (MinHash LSH candidates per part, then exact Jaccard; imports datasketch),
            ``exact`` (every pair, exact Jaccard only, ``estimated_jaccard`` None), ``auto`` (``exact`` up to
            ``EXACT_PAIRS_MAX`` pairs, ``minhash`` above).

    Returns:
        The pairs, closest first (exact Jaccard descending, then by training task, evaluation pool and
        evaluation task).

    Raises:
        ValueError: ``threshold`` outside (0, 1], ``num_perm`` below 16, or an unknown ``method``.
        TaskError: a test file cannot be read.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    if num_perm < 16:
        raise ValueError(f"num_perm must be >= 16 (LSH needs at least two bands), got {num_perm}")
    if method not in ("minhash", "exact", "auto"):
        raise ValueError(f"method must be minhash, exact or auto, got {method!r}")
    train_parts = [(t.id, task_shingles(t)) for t in train.tasks]
    eval_parts = [(p.source, t.id, task_shingles(t)) for p in evals for t in p.tasks]
    if method == "auto":
        method = "exact" if len(train_parts) * len(eval_parts) <= EXACT_PAIRS_MAX else "minhash"
    if method == "exact":
        candidates = {(i, j): None for i in range(len(train_parts)) for j in range(len(eval_parts))}
    else:
        candidates = _minhash_candidates(
            [p for _, p in train_parts], [p for *_, p in eval_parts], threshold, num_perm, seed
        )
    pairs = []
    for (i, j), estimate in candidates.items():
        train_id, a = train_parts[i]
        source, eval_id, b = eval_parts[j]
        by_part = {part: jaccard(a[part], b[part]) for part in PARTS}
        over = [part for part in PARTS if by_part[part] >= threshold]
        if not over:
            continue
        pairs.append(
            OverlapPair(
                train_source=train.source,
                train_task=train_id,
                eval_source=source,
                eval_task=eval_id,
                estimated_jaccard=estimate,
                exact_jaccard=max(by_part.values()),
                instruction_jaccard=by_part["instruction"],
                tests_jaccard=by_part["tests"],
                parts="both" if len(over) == 2 else over[0],
            )
        )
    return sorted(pairs, key=lambda p: (-p.exact_jaccard, p.train_task, p.eval_source, p.eval_task))


def _minhash_candidates(
    train_parts: list[dict[Part, set[str]]],
    eval_parts: list[dict[Part, set[str]]],
    threshold: float,
    num_perm: int,
    seed: int,
) -> dict[tuple[int, int], float]:
    """The pairs that either part's LSH index returns, each with the larger of its two parts' estimates.

    Returns:
        ``{(train index, eval index): MinHash estimate}`` (fraction).
    """
    from datasketch import MinHash, MinHashLSH

    def signature(items: set[str]) -> MinHash | None:
        if not items:  # an empty part overlaps nothing
            return None
        m = MinHash(num_perm=num_perm, seed=seed)
        m.update_batch(sorted(s.encode("utf-8") for s in items))
        return m

    train_sigs = [{part: signature(p[part]) for part in PARTS} for p in train_parts]
    eval_sigs = [{part: signature(p[part]) for part in PARTS} for p in eval_parts]
    found: set[tuple[int, int]] = set()
    for part in PARTS:
        # Above 0.99 datasketch's tuning picks one band, which it refuses: tune for 0.99 (more candidates).
        lsh = MinHashLSH(threshold=min(threshold, 0.99), num_perm=num_perm, weights=LSH_WEIGHTS)
        for j, sigs in enumerate(eval_sigs):
            if sigs[part] is not None:
                lsh.insert(j, sigs[part])
        for i, sigs in enumerate(train_sigs):
            if sigs[part] is not None:
                found |= {(i, j) for j in lsh.query(sigs[part])}

    def estimate(a: MinHash | None, b: MinHash | None) -> float:
        return 0.0 if a is None or b is None else float(a.jaccard(b))

    return {
        (i, j): max(estimate(train_sigs[i][part], eval_sigs[j][part]) for part in PARTS)
        for i, j in sorted(found)
    }
