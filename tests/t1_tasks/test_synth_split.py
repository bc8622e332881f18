"""The train / held-out split of generated tasks: disjoint seeds, no shared parameter tuple, deterministic."""

from __future__ import annotations

import json

import pytest

from t1_tasks import load_pool
from t1_tasks.synth import SplitError, generate, split_seeds, synth_split, write_split


def test_sides_share_no_seed_and_no_parameter_tuple():
    split = synth_split(["text", "csv", "files"], 90, 45, seed=7)
    assert len(split.train) == 90 and len(split.heldout) == 45
    assert not set(split.train) & set(split.heldout)
    train_fp = {generate(*k).fingerprint for k in split.train}
    held_fp = [generate(*k).fingerprint for k in split.heldout]
    assert len(train_fp) == 90 and len(set(held_fp)) == 45
    assert not train_fp & set(held_fp)


def test_colliding_fingerprints_are_skipped_not_shared():
    # Fingerprint = seed mod 5: only five distinct requests exist, whatever the seed.
    split = split_seeds(["a"], 3, 2, seed=0, fingerprint=lambda f, s: s % 5)
    assert split.train == [("a", 0), ("a", 1), ("a", 2)]
    assert split.heldout == [("a", 3), ("a", 4)]
    with pytest.raises(SplitError, match="only 5 distinct instances of a in 120 draws"):
        split_seeds(["a"], 3, 3, seed=0, fingerprint=lambda f, s: s % 5)
    split = split_seeds(["a"], 1, 1, seed=0, fingerprint=lambda f, s: s // 2)
    assert split.train == [("a", 0)] and split.heldout == [("a", 2)] and split.skipped == [("a", 1)]


def test_split_is_a_pure_function_of_its_arguments():
    a = synth_split(["csv", "text"], 10, 5, seed=3)
    assert a == synth_split(["csv", "text"], 10, 5, seed=3)
    assert a != synth_split(["csv", "text"], 10, 5, seed=4)


def test_bad_sizes_and_no_family_refused():
    with pytest.raises(SplitError, match="at least one family"):
        split_seeds([], 1, 1, fingerprint=lambda f, s: s)
    with pytest.raises(SplitError, match="train -1"):
        split_seeds(["a"], -1, 1, fingerprint=lambda f, s: s)


def test_written_sides_are_pools_a_recipe_can_name(tmp_path):
    split = synth_split(["text", "files"], 4, 2, seed=0)
    dirs = write_split(split, tmp_path)
    assert set(dirs) == {"train", "heldout"}
    train, held = load_pool(str(dirs["train"])), load_pool(str(dirs["heldout"]))
    assert len(train.tasks) == 4 and len(held.tasks) == 2
    assert not {t.id for t in train.tasks} & {t.id for t in held.tasks}
    manifest = json.loads((tmp_path / "split.json").read_text())
    assert sorted(r["task"] for r in manifest["heldout"]) == sorted(t.id for t in held.tasks)
