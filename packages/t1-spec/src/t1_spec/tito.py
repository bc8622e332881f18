"""Token-in-token-out stitching of multi-turn trajectories (T1 §4.1, Eqs. 6-8, Fig. 5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t1_spec._base import Spec, Violation, raise_if

NORMALIZE_BOUNDS = (96, 16)
"""The paper's box (s, u) in [0, 96] x [0, 16] of the normalized case (tokens; T1 §4.1)."""


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
    """s bound of the normalized case: most tokens dropped from the prompt side p_i (tokens), e.g. the
    generation prompt's empty think block a template leaves out of the history. 96, the paper's bound, which
    a recipe may lower but not raise (T1 §4.1)."""

    normalize_max_u: int = Field(default=16, ge=0)
    """u bound of the normalized case: most tokens dropped from the sampled side a_i (tokens), e.g. trailing
    whitespace or a stop id the harness strips; each is a sampled id later turns are trained on although
    inference did not see it. 16, the paper's bound, which a recipe may lower but not raise (T1 §4.1)."""

    @model_validator(mode="after")
    def _check(self) -> TitoSpec:
        v: list[Violation] = []
        max_s, max_u = NORMALIZE_BOUNDS
        swapped = self.normalize_max_s <= max_u < self.normalize_max_u <= max_s
        hint = (
            "; the two bounds look swapped: s is the prompt side p_i (96), u the sampled side a_i (16)"
            if swapped
            else ""
        )
        if self.normalize_max_s > max_s:
            v.append(
                Violation(
                    "tito.normalize_max_s_bound",
                    "normalize_max_s",
                    f"normalize_max_s {self.normalize_max_s} exceeds the paper's bound {max_s} on the prompt "
                    f"ids a normalized boundary drops (T1 §4.1: (s, u) in [0, 96] x [0, 16]): lower it",
                )
            )
        if self.normalize_max_u > max_u:
            v.append(
                Violation(
                    "tito.normalize_max_u_bound",
                    "normalize_max_u",
                    f"normalize_max_u {self.normalize_max_u} exceeds the paper's bound {max_u} on the "
                    "sampled ids a normalized boundary drops (T1 §4.1: (s, u) in [0, 96] x [0, 16]): lower "
                    f"it{hint}",
                )
            )
        raise_if(v)
        return self
