"""A train / held-out split of generated instances by seed that shares no instance and no parameter tuple.

Held-out results measure generalisation only if no held-out task was trained on: the split gives the two
sides disjoint seeds, and drops from the held-out side every instance whose parameter tuple
(`Instance.fingerprint`: the family, every step's operation and parameters) equals one on the training
side, or one already held out, so neither side holds the same request twice and the held-out side asks for
no request the training side asked for (the input data may differ; they are not parameters).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

from t1_tasks.synth.bundle import write_bundle
from t1_tasks.synth.families import generate

__all__ = ["SeedSplit", "SplitError", "split_seeds", "synth_split", "write_split"]

Key = tuple[str, int]  # (family, seed)


class SplitError(ValueError):
    """The split cannot be drawn: bad sizes, no family, or too few distinct instances in the seed range."""


@dataclass(frozen=True)
class SeedSplit:
    """The two sides of a split, each a list of ``(family, seed)`` keys in generation order.

    Attributes:
        train: the training side (``n_train`` keys).
        heldout: the held-out side (``n_heldout`` keys), none sharing a seed or a fingerprint with ``train``.
        skipped: keys drawn for either side and left out because their fingerprint was already taken.
    """

    train: list[Key]
    heldout: list[Key]
    skipped: list[Key]


def split_seeds(
    families: Sequence[str],
    n_train: int,
    n_heldout: int,
    *,
    seed: int = 0,
    fingerprint: Callable[[str, int], Hashable],
    max_draws: int | None = None,
) -> SeedSplit:
    """Draw ``n_train`` then ``n_heldout`` distinct instances, seeds counting up from ``seed``.

    Keys are drawn round-robin over ``families`` (family ``i % len(families)`` at the ``i``-th draw, its
    seed ``seed + i // len(families)``); a key whose fingerprint was seen before (on either side) is
    skipped. The training side takes the first ``n_train`` distinct keys, the held-out side the next
    ``n_heldout``: seeds of the held-out side are larger than every training seed of the same family. A pure
    function of its arguments.

    Args:
        families: family names, each at least once (``text``, ``csv``, ``files``).
        n_train: instances on the training side (>= 0).
        n_heldout: instances on the held-out side (>= 0).
        seed: the first seed of every family.
        fingerprint: ``(family, seed) -> a hashable parameter tuple`` (`Instance.fingerprint` of the generated
            instance in `synth_split`).
        max_draws: stop after this many draws (default: 20 times the requested total, at least 100).

    Raises:
        SplitError: a negative size, no family, or fewer distinct fingerprints than requested within
            ``max_draws`` draws.
    """
    if not families:
        raise SplitError("split: give at least one family")
    if n_train < 0 or n_heldout < 0:
        raise SplitError(f"split: sizes must be >= 0, got train {n_train}, held-out {n_heldout}")
    limit = max_draws if max_draws is not None else max(100, 20 * (n_train + n_heldout))
    seen: set[Hashable] = set()
    taken: list[Key] = []
    skipped: list[Key] = []
    draw = 0
    while len(taken) < n_train + n_heldout:
        if draw >= limit:
            raise SplitError(
                f"split: only {len(taken)} distinct instances of {', '.join(families)} in {limit} draws from "
                f"seed {seed}, {n_train + n_heldout} asked; ask for fewer or raise max_draws"
            )
        key = (families[draw % len(families)], seed + draw // len(families))
        draw += 1
        fp = fingerprint(*key)
        if fp in seen:
            skipped.append(key)
            continue
        seen.add(fp)
        taken.append(key)
    return SeedSplit(train=taken[:n_train], heldout=taken[n_train:], skipped=skipped)


def synth_split(families: Sequence[str], n_train: int, n_heldout: int, *, seed: int = 0) -> SeedSplit:
    """`split_seeds` over generated instances: fingerprints are `Instance.fingerprint` of `generate`.

    Raises:
        SplitError: as `split_seeds`.
        ValueError: an unknown family (from `generate`).
    """
    return split_seeds(
        families, n_train, n_heldout, seed=seed, fingerprint=lambda f, s: generate(f, s).fingerprint
    )


def write_split(split: SeedSplit, out: Path, *, overwrite: bool = False) -> dict[str, Path]:
    """Write both sides as pools: ``out/train/`` and ``out/heldout/`` (a side of 0 instances is not written).

    Each side is a directory of bundles, what a recipe's ``pool.source`` (and ``t1 eval``, ``t1 tasks
    validate``) takes; ``out/split.json`` lists every key and fingerprint of both sides and the skipped keys.

    Returns:
        side name -> its pool directory.

    Raises:
        FileExistsError: a bundle exists already and ``overwrite`` is false (from `write_bundle`).
    """
    dirs: dict[str, Path] = {}
    manifest: dict[str, object] = {"skipped": [list(k) for k in split.skipped]}
    for side, keys in (("train", split.train), ("heldout", split.heldout)):
        if not keys:
            continue
        dirs[side] = out / side
        dirs[side].mkdir(parents=True, exist_ok=True)
        rows = []
        for family, s in keys:
            inst = generate(family, s)
            write_bundle(inst, dirs[side], overwrite=overwrite)
            rows.append({"task": inst.task_id, "family": family, "seed": s, "fingerprint": inst.fingerprint})
        manifest[side] = rows
    out.mkdir(parents=True, exist_ok=True)
    (out / "split.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dirs
