"""Spec versions and the compatibility policy.

T1 recipes declare their spec version in their first key, ``schema: t1/v1``. The policy below is what the
loader implements for v1 and what it promises for a future v2; ``COMPATIBILITY_POLICY`` is that part of this
docstring, for the docs site.

**Spec versions and compatibility.**

Every recipe starts with `schema: t1/v1`. The version names the shape of the whole recipe (sections, field
names, units, meanings, defaults), and the JSON Schemas in `specs/v1/` are generated from exactly that shape.

*Within v1* the spec only grows compatibly: a new field gets a default that reproduces the earlier behaviour,
a new `kind:` is a new member of a discriminated union, and a rule may only be tightened when the recipe it
would now refuse could not have run correctly. Field names, units and the meaning of a default never change
within v1; the committed schemas in `specs/v1/` are checked against the code by a test, so a drift fails CI.

*A future v2* gets its own models, its own `specs/v2/` and its own loader entry. A v1 recipe is then either
migrated or refused, never silently reinterpreted:

1. `t1 recipe migrate <recipe>` (to be built with v2) rewrites a v1 file into v2 and prints every changed key
   with its old and new value; renamed fields move, changed units are converted, and a field whose v2 default
   differs is written out explicitly so the run stays the same.
2. If a v1 value has no faithful v2 equivalent, migration stops and names the field; the user decides.
3. Loading a v1 recipe with a v2-only T1 is refused by name ("schema 't1/v1' is no longer read; run
   `t1 recipe migrate`"), and an unknown version (including a missing `schema:`) is always refused, never
   guessed.
4. A base and an ablation that `extends:` it must carry the same version; mixed chains are refused.
"""

from __future__ import annotations

SCHEMA_VERSION = "t1/v1"
"""The only spec version this T1 reads and writes."""

KNOWN_SCHEMAS: tuple[str, ...] = (SCHEMA_VERSION,)
"""Every version the loader accepts."""

COMPATIBILITY_POLICY = __doc__[__doc__.index("**Spec versions and compatibility.**") :]
"""Markdown text of the compatibility policy, for the docs site."""


def unknown_schema_message(value: object) -> str:
    """The refusal message for a ``schema:`` value this T1 does not read.

    Args:
        value: the value found (``None`` when the key is missing).

    Returns:
        a message naming the value, the versions accepted and what to do.
    """
    if value is None:
        return f"missing `schema:`; add `schema: {SCHEMA_VERSION}` as the first key"
    known = ", ".join(KNOWN_SCHEMAS)
    return (
        f"unknown schema {value!r}: this T1 reads only {known}; write `schema: {SCHEMA_VERSION}` if the "
        f"recipe follows the v1 spec (see specs/v1/recipe.schema.json), or use the T1 release that "
        f"reads {value!r}"
    )
