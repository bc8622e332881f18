"""Recipe loading: YAML through OmegaConf, ``extends:`` merging, interpolation, dotlist overrides, validation.

Order of operations (``resolve_recipe``):

1. Read the file; it must be a mapping with a known ``schema:`` (every file, bases included).
2. If it has ``extends: <path>`` (relative to the file), load the base the same way (recursively, cycles
   refused) and deep-merge this file over it. Mappings merge key by key; lists and scalars replace. A
   polymorphic section (``reward``, ``sandbox``, ``engine``, ``ppo.advantage``) whose discriminator (``kind``
   / ``estimator``) changes is replaced whole, so ``reward: {kind: binary}`` over a dense base does not
   inherit ``scale``.
3. Apply dotlist overrides (``ppo.batch_size=2``) with the same merge rule.
4. Resolve OmegaConf interpolations (``${ppo.batch_size}``, ``${oc.env:VAR,default}``) on the merged tree.

``load_recipe`` then validates the plain dict into a frozen ``Recipe``; every problem is reported as a
``RecipeError`` naming the file and the dotted field.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from t1_spec._base import SpecRuleError
from t1_spec.errors import Problem, RecipeError
from t1_spec.recipe import Recipe
from t1_spec.versioning import SCHEMA_VERSION, unknown_schema_message

__all__ = [
    "POLYMORPHIC_SECTIONS",
    "SCHEMA_VERSION",
    "base_of",
    "load_recipe",
    "recipe_digest",
    "merge_recipe_dicts",
    "recipe_to_dict",
    "recipe_to_yaml",
    "resolve_recipe",
    "validate_recipe",
]

POLYMORPHIC_SECTIONS: dict[tuple[str, ...], str] = {
    ("reward",): "kind",
    ("sandbox",): "kind",
    ("engine",): "kind",
    ("ppo", "advantage"): "estimator",
}
"""Section path -> discriminator key. Such a section is replaced, not merged, when the discriminator
changes."""

_DISCRIMINATORS = frozenset(POLYMORPHIC_SECTIONS.values())
# the recipe's sections (mappings); the other top-level keys are scalars
_SECTIONS = tuple(
    name for name in Recipe.model_fields if name not in ("schema_", "name", "description", "seed")
)


def merge_recipe_dicts(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``child`` over ``base`` with the recipe rule (see the module docstring).

    Args:
        base: the base recipe tree (plain containers, interpolations unresolved).
        child: the tree that wins.

    Returns:
        a new merged tree; neither input is modified.
    """
    return _merge(base, child, ())


def _merge(
    base: Mapping[str, Any],
    child: Mapping[str, Any],
    at: tuple[str, ...],
    origins: dict[tuple[str, ...], str] | None = None,
    source: str = "",
) -> dict[str, Any]:
    """The merge rule; with ``origins``, every value ``child`` sets is also recorded as ``source``'s."""
    out = copy.deepcopy(dict(base))
    for key, value in child.items():
        path = (*at, str(key))
        old = out.get(key)
        disc = POLYMORPHIC_SECTIONS.get(path)
        if (
            isinstance(old, Mapping)
            and isinstance(value, Mapping)
            and not (disc is not None and disc in value and value[disc] != old.get(disc))
        ):
            out[key] = _merge(old, value, path, origins, source)
        else:
            out[key] = copy.deepcopy(value)
            if origins is not None:
                _mark_origin(origins, path, value, source)
    return out


def _mark_origin(origins: dict[tuple[str, ...], str], at: tuple[str, ...], value: Any, source: str) -> None:
    """Record ``value``, set whole at ``at``, as ``source``'s (its scalars and lists), replacing what was."""
    for done in [f for f in origins if f[: len(at)] == at]:
        del origins[done]
    if isinstance(value, Mapping):
        for key, child in value.items():
            _mark_origin(origins, (*at, str(key)), child, source)
    else:
        origins[at] = source


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """``yaml.SafeLoader`` refusing a mapping with one key twice (plain YAML silently keeps the last)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {seen[key] + 1}); keep one",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(path, [Problem("", "file not found; check the path")]) from None
    except UnicodeDecodeError as exc:
        raise RecipeError(
            path,
            [
                Problem(
                    "",
                    f"not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at offset {exc.start}): "
                    "a recipe must be UTF-8 YAML; re-save the file as UTF-8",
                )
            ],
        ) from None
    except IsADirectoryError:
        raise RecipeError(path, [Problem("", "is a directory; give the recipe's YAML file")]) from None
    except OSError as exc:
        raise RecipeError(path, [Problem("", f"cannot read the file: {exc.strerror or exc}")]) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise RecipeError(path, [Problem("", f"not valid YAML: {_yaml_problem(exc)}")]) from None
    if not isinstance(data, dict):
        raise RecipeError(
            path, [Problem("", "a recipe must be a YAML mapping of sections (model:, pool:, ...)")]
        )
    size = _expanded_size(data, {})
    if size > MAX_RECIPE_VALUES:
        raise RecipeError(
            path,
            [
                Problem(
                    "",
                    f"the YAML expands to {size:,} values through anchors and aliases (at most "
                    f"{MAX_RECIPE_VALUES:,}); a recipe holds a few hundred: remove the nested aliases",
                )
            ],
        )
    if "schema" not in data:
        raise RecipeError(
            path, [Problem("schema", f"missing `schema:`; add `schema: {SCHEMA_VERSION}` as the first key")]
        )
    if data["schema"] != SCHEMA_VERSION:
        raise RecipeError(path, [Problem("schema", unknown_schema_message(data["schema"]))])
    return data


MAX_RECIPE_VALUES = 100_000
"""Most values a recipe may expand to, an alias counted each time it is used (guards against alias bombs)."""


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """Values in ``node`` once every alias is expanded, computed without expanding.

    PyYAML shares aliased objects, so each is measured once; the count stops growing past the cap.
    """
    if not isinstance(node, dict | list):
        return 1
    if id(node) in memo:
        return memo[id(node)]
    children = node.values() if isinstance(node, dict) else node
    total = 1
    for child in children:
        total += _expanded_size(child, memo)
        if total > MAX_RECIPE_VALUES:
            break
    memo[id(node)] = total
    return total


def _load_tree(
    path: Path, stack: tuple[Path, ...], origins: dict[tuple[str, ...], str] | None = None
) -> dict[str, Any]:
    """The merged tree of ``path`` and its bases; ``origins``, when given, gets each value's resolved file."""
    path = path.resolve()
    if path in stack:
        chain = " -> ".join(str(p) for p in (*stack, path))
        raise RecipeError(path, [Problem("extends", f"extends cycle: {chain}; break the cycle")])
    data = _read_file(path)
    parent = data.pop("extends", None)
    if parent is None:
        if origins is not None:
            for key, value in data.items():
                _mark_origin(origins, (str(key),), value, str(path))
        return data
    if not isinstance(parent, str) or not parent:
        raise RecipeError(
            path, [Problem("extends", f"extends must be a path to a base recipe, got {parent!r}")]
        )
    base_path = (path.parent / parent).resolve()
    if not base_path.is_file():
        raise RecipeError(
            path,
            [
                Problem(
                    "extends",
                    f"base recipe {parent!r} "
                    + ("is a directory" if base_path.is_dir() else "not found")
                    + f" (looked for {base_path}); extends is a YAML file, relative to this one",
                )
            ],
        )
    return _merge(_load_tree(base_path, (*stack, path), origins), data, (), origins, str(path))


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: the problem and where (line and column, 1-based)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None:
        return " ".join(str(exc).split())
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def _overrides_tree(path: Path, overrides: Sequence[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf  # imported on use: keeps `import t1_spec` light
    from omegaconf.errors import OmegaConfBaseException

    for item in overrides:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise RecipeError(
                path, [Problem("", f"override {item!r} is not key=value (e.g. ppo.batch_size=2)")]
            )
    for item in overrides:
        key, value = item.split("=", 1)
        if not value.strip():
            # YAML reads an empty value as null, which silently means "default" for many fields
            raise RecipeError(
                path,
                [
                    Problem(
                        key.strip(),
                        f"override {item!r} has no value; write {key.strip()}=null to unset the field",
                    )
                ],
            )
    # each value is parsed as YAML: name the override at fault, in one line (PyYAML's errors span several)
    for item in overrides:
        try:
            OmegaConf.from_dotlist([item])
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            key, value = item.split("=", 1)
            text = str(exc).strip()
            first = getattr(exc, "problem", None) or (text.splitlines()[0] if text else type(exc).__name__)
            raise RecipeError(
                path,
                [
                    Problem(
                        key.strip(),
                        f"override {item!r}: the value {value!r} is not valid YAML ({first}); "
                        f"quote it for a string, e.g. {key.strip()}='\"{value}\"'",
                    )
                ],
            ) from None
    try:
        tree = OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)), resolve=False)
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise RecipeError(path, [Problem("", f"cannot parse overrides {list(overrides)}: {exc}")]) from None
    assert isinstance(tree, dict)
    return tree


def resolve_recipe(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Load a recipe file into a plain dict: ``extends:`` merged, overrides applied, interpolations resolved.

    Defaults are not filled in (that is validation's job, see ``load_recipe``).

    Args:
        path: the recipe YAML.
        overrides: dotlist overrides, ``"section.field=value"``, applied after ``extends:`` merging.

    Returns:
        the resolved tree, without the ``extends`` key.

    Raises:
        RecipeError: unreadable file, bad YAML, missing or unknown ``schema:``, ``extends`` cycle or
            missing base, malformed override, or an interpolation that does not resolve.
    """
    from omegaconf import OmegaConf  # imported on use: keeps `import t1_spec` light
    from omegaconf.errors import OmegaConfBaseException

    path = Path(path)
    tree = _load_tree(path, ())
    if overrides:
        tree = merge_recipe_dicts(tree, _overrides_tree(path, overrides))
    if tree.get("schema") != SCHEMA_VERSION:
        raise RecipeError(path, [Problem("schema", unknown_schema_message(tree.get("schema")))])
    # a section set to a scalar (`ppo=3`) would otherwise surface as an interpolation error elsewhere
    for section in _SECTIONS:
        # an optional section may be null (`sft: null`: no such phase), as recipe_to_yaml writes it
        null_ok = Recipe.model_fields[section].default is None and tree.get(section, 0) is None
        if section in tree and not isinstance(tree[section], dict) and not null_ok:
            raise RecipeError(
                path,
                [
                    Problem(
                        section,
                        f"a section is a mapping of fields, got {tree[section]!r}; "
                        f"set one field instead, e.g. {section}.<field>=<value>",
                    )
                ],
            )
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or ""
        text = str(getattr(exc, "msg", None) or exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__  # OmegaConf appends key/type lines
        # a misspelled field that an interpolation names is the cause: report it beside the failure
        raise RecipeError(
            path, [Problem(str(key), f"interpolation failed: {first}"), *_unknown_section_fields(tree)]
        ) from None
    assert isinstance(resolved, dict)
    return resolved


def _unknown_section_fields(tree: Mapping[str, Any]) -> list[Problem]:
    """The keys of each section of the unresolved ``tree`` that its spec does not have (one level deep).

    Used when interpolation fails, before pydantic's own unknown-field check can run.
    """
    problems = []
    for section in _SECTIONS:
        body = tree.get(section)
        model = _section_model(section)
        if not isinstance(body, Mapping) or model is None:
            continue
        known = {f.alias or name for name, f in model.model_fields.items()} | set(model.model_fields)
        for key in body:
            if key not in known:
                problems.append(Problem(f"{section}.{key}", _HINTS["extra_forbidden"]))
    return problems


def _section_model(section: str) -> type[BaseModel] | None:
    """The pydantic model of a recipe section, or ``None`` where it is a union or not a model."""
    annotation = Recipe.model_fields[section].annotation
    candidates = [a for a in (annotation, *getattr(annotation, "__args__", ())) if isinstance(a, type)]
    models = [a for a in candidates if issubclass(a, BaseModel)]
    return models[0] if len(models) == 1 else None


def _field_path(loc: tuple[int | str, ...], data: Any) -> list[str]:
    """Dotted-path parts of a pydantic error location, dropping discriminator tags pydantic inserts."""
    parts: list[str] = []
    node = data
    for elem in loc:
        if isinstance(node, Mapping) and elem not in node and elem in [node.get(k) for k in _DISCRIMINATORS]:
            continue
        parts.append(str(elem))
        if isinstance(node, Mapping):
            node = node.get(elem)
        elif isinstance(node, list) and isinstance(elem, int) and 0 <= elem < len(node):
            node = node[elem]
        else:
            node = None
    return parts


_HINTS = {
    "extra_forbidden": "unknown field; check its spelling against `t1 recipe schema` or remove it",
    "missing": "required field is missing; add it",
}

_FIELD_HINTS = {
    ("name", "string_pattern_mismatch"): "the run name becomes a folder under logging.run_root, so it must "
    "be a safe slug: start with a letter or digit, then up to 99 letters, digits, '.', '_' or '-' "
    "(no '/', no '..', no spaces)",
}

_FLOOR_WHY = {
    "sandbox.memory_mb": "RLIMIT_AS also binds bubblewrap and the shell, which cannot map libc below this",
    "sandbox.max_processes": "bubblewrap, the shell and a simple pipeline already need several processes",
    "sandbox.cpu_time_s": "RLIMIT_CPU counts whole seconds and the launch itself spends CPU",
}


def _kinds_with_field(parts: list[str]) -> list[str]:
    """The kinds of a polymorphic section whose spec has the field ``parts`` names (none: not such a field).

    An unknown field there is another kind's (``sandbox.build_network`` is Docker's), not a misspelling.
    """
    key = POLYMORPHIC_SECTIONS.get(tuple(parts[:1])) if len(parts) == 2 else None
    if key is None:
        return []
    members = get_args(Recipe.model_fields[parts[0]].annotation)
    return [str(m.model_fields[key].default) for m in members if parts[1] in m.model_fields]


def _problems(exc: ValidationError, data: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for err in exc.errors():
        parts = _field_path(tuple(err["loc"]), data)
        ctx_err = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_err, SpecRuleError):
            for v in ctx_err.violations:
                problems.append(
                    Problem(".".join([*parts, v.field]) if v.field else ".".join(parts), v.message, v.rule)
                )
            continue
        kind = err["type"]
        if kind in ("union_tag_invalid", "union_tag_not_found"):
            parts.append(str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'"))
        msg = _FIELD_HINTS.get((".".join(parts), kind)) or _HINTS.get(kind) or err["msg"]
        if kind == "extra_forbidden" and (kinds := _kinds_with_field(parts)):
            key = f"{parts[0]}.{POLYMORPHIC_SECTIONS[(parts[0],)]}"
            here = (data.get(parts[0]) or {}).get(POLYMORPHIC_SECTIONS[(parts[0],)])
            msg = f"a field of {key} {' / '.join(kinds)} only, not of {here}; set {key} or remove the field"
        if kind not in _HINTS and "input" in err and not isinstance(err["input"], Mapping | list):
            msg = f"{msg}; got {err['input']!r}"
        why = _FLOOR_WHY.get(".".join(parts)) if kind == "greater_than_equal" else None
        if why:
            msg = f"{msg} ({why}); raise it"
        problems.append(Problem(".".join(parts), msg, kind))
    return problems


def validate_recipe(data: Mapping[str, Any], path: str | Path | None = None) -> Recipe:
    """Validate a resolved recipe tree into a frozen ``Recipe``.

    Args:
        data: the tree ``resolve_recipe`` returns (or any mapping with the same shape).
        path: the file it came from, for error messages.

    Raises:
        RecipeError: with one ``Problem`` per broken field or rule, each naming its dotted field.
    """
    if data.get("schema") != SCHEMA_VERSION:
        raise RecipeError(path, [Problem("schema", unknown_schema_message(data.get("schema")))])
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(path, _problems(exc, data)) from None
    coerced = list(_bools_read_as_numbers(data, recipe, ()))
    if coerced:
        raise RecipeError(
            path,
            [Problem(f, "expected a number, got a boolean (true/false)", "bool_as_number") for f in coerced],
        )
    return recipe


def _bools_read_as_numbers(node: Any, value: Any, at: tuple[str, ...]) -> Iterator[str]:
    """Dotted fields where the YAML held true/false and the spec took it as a number (pydantic's lax mode)."""
    if isinstance(node, Mapping):
        for key, child in node.items():
            sub = value.get(key) if isinstance(value, Mapping) else getattr(value, str(key), None)
            yield from _bools_read_as_numbers(child, sub, (*at, str(key)))
    elif isinstance(node, list) and isinstance(value, list | tuple):
        for i, (child, sub) in enumerate(zip(node, value, strict=False)):
            yield from _bools_read_as_numbers(child, sub, (*at, str(i)))
    elif isinstance(node, bool) and isinstance(value, int | float) and not isinstance(value, bool):
        yield ".".join(at)


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Load, merge, override, resolve and validate a recipe file.

    Args:
        path: the recipe YAML, e.g. ``recipes/tiny-cpu.yaml``.
        overrides: dotlist overrides such as ``["ppo.batch_size=2", "rollout.admitted=2"]``.

    Returns:
        the validated, frozen ``Recipe``.

    Raises:
        RecipeError: anything wrong, with the file and the dotted field.
    """
    tree = resolve_recipe(path, overrides)
    try:
        return validate_recipe(tree, path)
    except RecipeError as exc:
        raise _with_origins(exc, Path(path), overrides) from None


def _with_origins(exc: RecipeError, path: Path, overrides: Sequence[str]) -> RecipeError:
    """``exc`` with each problem's field traced to the base file or override that set it, where not ``path``.

    A problem in a field of a base recipe (``extends:``) or of an override would otherwise read as a problem
    of the file the user named.
    """
    origins = _field_origins(path, overrides)
    top = str(path.resolve())
    problems = []
    for p in exc.problems:
        parts = tuple(p.field.split(".")) if p.field else ()
        # the value's origin, or that of the list holding it (mappings merge, so only leaves are recorded)
        source = next((origins[parts[:n]] for n in range(len(parts), 0, -1) if parts[:n] in origins), None)
        if source is None or source == top:
            problems.append(p)
            continue
        where = source if source.startswith("override ") else f"set in {_shown(Path(source), path)}"
        problems.append(Problem(p.field, f"{p.message} ({where})", p.rule))
    return RecipeError(exc.path, problems)


def _shown(file: Path, top: Path) -> str:
    """A base file's name as the user reads it: relative to the named recipe's folder when inside it."""
    try:
        return str(file.relative_to(top.resolve().parent))
    except ValueError:
        return str(file)


def _field_origins(path: Path, overrides: Sequence[str]) -> dict[tuple[str, ...], str]:
    """Field path -> the resolved file (or ``"override k=v"``) whose value the merged recipe holds.

    Scalars and lists only: mappings merge, so a mapping has no single origin. Loads the files again with
    ``resolve_recipe``'s merge rule; called only on the error path, after they have loaded once.
    """
    origins: dict[tuple[str, ...], str] = {}
    tree = _load_tree(path, (), origins)
    for item in overrides:
        tree = _merge(tree, _overrides_tree(path, [item]), (), origins, f"override {item}")
    return origins


def base_of(path: str | Path) -> Path | None:
    """The file a recipe ``extends:`` (resolved against the recipe's folder), or ``None``.

    Raises:
        RecipeError: unreadable or schema-less file.
    """
    path = Path(path).resolve()
    parent = _read_file(path).get("extends")
    return (path.parent / parent).resolve() if isinstance(parent, str) and parent else None


def recipe_to_dict(recipe: Recipe) -> dict[str, Any]:
    """Every field of ``recipe`` with defaults filled in, as JSON-compatible containers (YAML key names)."""
    return recipe.model_dump(mode="json", by_alias=True)


def recipe_to_yaml(recipe: Recipe) -> str:
    """``recipe_to_dict`` as YAML in declaration order; loading it back gives an equal ``Recipe``."""
    return yaml.safe_dump(
        recipe_to_dict(recipe), sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def recipe_digest(recipe: Recipe, length: int = 12) -> str:
    """Stable short hash of everything a run does, for naming run folders (``runs/<name>-<digest>``).

    Hashes the canonical JSON of ``recipe_to_dict`` (keys sorted) without ``description``, so rewording the
    description keeps the digest while any other change, defaults included, alters it.

    Args:
        recipe: a validated recipe.
        length: hex characters to keep (1-64).

    Returns:
        the first ``length`` hex digits of the SHA-256.
    """
    data = recipe_to_dict(recipe)
    data.pop("description", None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:length]
