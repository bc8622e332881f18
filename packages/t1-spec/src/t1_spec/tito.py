"""Token-in-token-out stitching of multi-turn trajectories (T1 §4.1, Eqs. 6-8, Fig. 5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t1_spec._base import Spec


class TitoSpec(Spec):
    """How turn boundaries are stitched into one token stream.

    At each boundary the stitcher tries the cases in order - strict prefix, normalized, retokenized - up to
    ``repair``, and otherwise splits the trajectory into a new chunk (the fourth case). Sampled ids are never
    re-encoded in any case (T1 §4.1).
    """

    repair: Literal["strict", "normalized", "retokenized"] = "retokenized"
    """Most permissive boundary repair tried before a split. ``strict``: only a bit-exact prefix T_i of
    p_(i+1) extends the chunk; ``normalized``: also drop up to (s, u) tokens of p_i and a_i, minimising s +
    u; ``retokenized``: also accept a re-encoded copy of a_i with the same bytes, located by offset mapping
    (its sampled ids stay in the stream, the copy never enters it). The paper uses all three (T1 §4.1).
    Boundaries no enabled case repairs split into a new chunk; strict boundaries stitch the same under every
    mode."""

    normalize_max_s: int = Field(default=96, ge=0)
    """s bound of the normalized case: most tokens dropped from the prompt side p_i (tokens). 96 (T1 §4.1)."""

    normalize_max_u: int = Field(default=16, ge=0)
    """u bound of the normalized case: most tokens dropped from the sampled side a_i (tokens). 16 (T1 §4.1).
    """
