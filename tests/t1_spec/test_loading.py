"""Recipe loading: extends, overrides, interpolation, schema versions, and errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from t1_spec import (
    COMPATIBILITY_POLICY,
    SCHEMA_VERSION,
    RecipeError,
    load_recipe,
    recipe_to_yaml,
    resolve_recipe,
)

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p


def child_of_tiny(tmp: Path, body: str, name: str = "child.yaml") -> Path:
    return write(tmp, name, f"schema: t1/v1\nextends: {RECIPES / 'tiny-cpu.yaml'}\nname: child\n{body}")


def test_ablation_inherits_everything_it_does_not_change(prod) -> None:
    grpo = load_recipe(RECIPES / "grpo.yaml")
    assert grpo.ppo.clip_eps == prod.ppo.clip_eps
    assert grpo.plan == prod.plan
    assert grpo.model == prod.model
    assert grpo.ppo.advantage.estimator == "grpo"


def test_changing_a_kind_replaces_the_section_instead_of_merging() -> None:
    # A binary reward has no scale: merging the base's dense section would be refused as an unknown field.
    tree = resolve_recipe(RECIPES / "binary-tmax.yaml")
    assert tree["reward"] == {"kind": "binary"}
    assert "extends" not in tree


def test_same_kind_merges_key_by_key(tmp_path) -> None:
    r = load_recipe(child_of_tiny(tmp_path, "reward:\n  scale: 10\n"))
    assert (r.reward.kind, r.reward.scale, r.reward.fallback) == ("dense", 10.0, "binary")


def test_overrides_apply_after_extends_and_coerce_types() -> None:
    r = load_recipe(
        RECIPES / "grpo.yaml",
        [
            "ppo.batch_size=32",
            "ppo.advantage.group_size=16",
            "ppo.samples_per_task=16",
            "ppo.adam_betas=[0.9, 0.95]",
        ],
    )
    assert (r.ppo.batch_size, r.ppo.advantage.group_size, r.ppo.adam_betas) == (32, 16, (0.9, 0.95))
    assert r.rollout.admitted == 512  # unchanged; 32 * 16 = 512


def test_override_of_a_discriminator_replaces_the_section(tiny_path) -> None:
    r = load_recipe(tiny_path, ["reward.kind=ratio"])
    assert r.reward.kind == "ratio" and r.reward.coefficient == 0.4


def test_interpolation_resolves_on_the_merged_tree(tmp_path) -> None:
    body = "ppo:\n  batch_size: 3\nrollout:\n  admitted: ${ppo.batch_size}\n  launched: ${ppo.batch_size}\n"
    r = load_recipe(child_of_tiny(tmp_path, body), ["ppo.batch_size=2"])
    assert (r.ppo.batch_size, r.rollout.admitted, r.rollout.launched) == (2, 2, 2)


def test_broken_interpolation_names_the_field(tmp_path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(child_of_tiny(tmp_path, "rollout:\n  admitted: ${ppo.nope}\n"))
    assert info.value.field == "rollout.admitted"
    assert "interpolation" in str(info.value)


def test_missing_schema_is_refused(tmp_path) -> None:
    p = write(tmp_path, "r.yaml", "name: x\nseed: 0\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(p)
    assert info.value.field == "schema"
    assert f"schema: {SCHEMA_VERSION}" in str(info.value)


def test_unknown_schema_is_refused_by_name(tmp_path) -> None:
    p = write(tmp_path, "r.yaml", "schema: t1/v2\nname: x\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(p)
    assert "'t1/v2'" in str(info.value) and "t1/v1" in str(info.value)
    assert info.value.path == p


def test_a_base_with_another_schema_is_refused(tmp_path) -> None:
    write(tmp_path, "base.yaml", "schema: t1/v0\nname: base\n")
    child = write(tmp_path, "child.yaml", "schema: t1/v1\nextends: base.yaml\nname: c\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(child)
    assert "'t1/v0'" in str(info.value)
    assert info.value.path.name == "base.yaml"


def test_extends_cycle_is_refused(tmp_path) -> None:
    write(tmp_path, "a.yaml", "schema: t1/v1\nextends: b.yaml\nname: a\n")
    write(tmp_path, "b.yaml", "schema: t1/v1\nextends: a.yaml\nname: b\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "a.yaml")
    assert info.value.field == "extends" and "cycle" in str(info.value)


def test_missing_base_is_refused(tmp_path) -> None:
    p = write(tmp_path, "r.yaml", "schema: t1/v1\nextends: nowhere.yaml\nname: r\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(p)
    assert info.value.field == "extends" and "nowhere.yaml" in str(info.value)


def test_bad_yaml_and_non_mapping_are_refused(tmp_path) -> None:
    for text in ("schema: [unclosed\n", "- a\n- b\n"):
        with pytest.raises(RecipeError):
            load_recipe(write(tmp_path, "r.yaml", text))


def test_missing_file_is_a_recipe_error(tmp_path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "absent.yaml")
    assert "not found" in str(info.value)


def test_a_directory_given_as_the_recipe_is_named_as_one(tmp_path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path)
    assert "is a directory; give the recipe's YAML file" in str(info.value) and "Errno" not in str(info.value)


def test_unknown_field_names_its_dotted_path(tiny_path, problems_of) -> None:
    probs = problems_of(tiny_path, "ppo.batchsize=2")
    assert [p.field for p in probs] == ["ppo.batchsize"]
    assert "unknown field" in probs[0].message


def test_a_misspelled_field_an_interpolation_reads_is_reported_too(tmp_path, problems_of) -> None:
    text = (RECIPES / "tiny-cpu.yaml").read_text().replace("\n  batch_size: 4", "\n  batch_sizee: 4")
    typo = write(tmp_path, "typo.yaml", text.replace("../specs", str(RECIPES.parent / "specs")))
    probs = problems_of(typo)
    fields = [p.field for p in probs]
    assert "rollout.admitted" in fields  # `admitted: ${ppo.batch_size}` has nothing to read
    assert "ppo.batch_sizee" in fields  # ... because of this spelling
    assert "unknown field" in probs[fields.index("ppo.batch_sizee")].message


def test_error_message_names_file_and_field(tiny_path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(tiny_path, ["ppo.clip_eps=2"])
    err = info.value
    assert err.path == tiny_path and err.field == "ppo.clip_eps"
    assert str(tiny_path) in str(err) and "ppo.clip_eps" in str(err)


def test_error_inside_a_union_member_drops_the_tag(tiny_path, problems_of) -> None:
    probs = problems_of(tiny_path, "ppo.advantage.gamma=2")
    assert [p.field for p in probs] == ["ppo.advantage.gamma"]


def test_malformed_override_is_refused(tiny_path) -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe(tiny_path, ["ppo.batch_size"])
    assert "key=value" in str(info.value)


def test_shown_yaml_loads_back_to_the_same_recipe(tmp_path) -> None:
    for name in ("tiny-cpu", "t1-122b", "grpo", "binary-tmax"):
        r = load_recipe(RECIPES / f"{name}.yaml")
        again = load_recipe(write(tmp_path, f"{name}.yaml", recipe_to_yaml(r)))
        assert again == r


def test_specs_are_frozen(tiny) -> None:
    with pytest.raises(ValidationError):
        tiny.ppo.batch_size = 8  # type: ignore[misc]


def test_compatibility_policy_says_how_v1_is_migrated_or_refused() -> None:
    text = COMPATIBILITY_POLICY
    assert "v2" in text and "migrate" in text and "refused" in text


def test_duplicate_keys_are_refused_not_silently_overwritten(tmp_path) -> None:
    p = write(tmp_path, "r.yaml", "schema: t1/v1\nname: a\nppo:\n  batch_size: 1\nppo:\n  batch_size: 2\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(p)
    assert "duplicate key 'ppo'" in str(info.value)


def test_unknown_kind_names_the_discriminator(tiny_path, problems_of) -> None:
    probs = problems_of(tiny_path, "sandbox.kind=podman")
    assert [p.field for p in probs] == ["sandbox.kind"]
    assert "'local'" in probs[0].message and "'daytona'" in probs[0].message


def test_environment_interpolation(tmp_path, monkeypatch) -> None:
    body = "model:\n  name: ${oc.env:T1_TEST_MODEL_NAME,fallback}\n"
    assert load_recipe(child_of_tiny(tmp_path, body)).model.name == "fallback"
    monkeypatch.setenv("T1_TEST_MODEL_NAME", "from-env")
    assert load_recipe(child_of_tiny(tmp_path, body)).model.name == "from-env"


def test_digest_is_stable_and_tracks_every_change_but_the_description(tiny_path) -> None:
    from t1_spec import recipe_digest

    a, b = load_recipe(tiny_path), load_recipe(tiny_path)
    assert recipe_digest(a) == recipe_digest(b) and len(recipe_digest(a)) == 12
    assert recipe_digest(load_recipe(tiny_path, ["ppo.steps=3"])) != recipe_digest(a)
    assert recipe_digest(load_recipe(tiny_path, ["description=reworded"])) == recipe_digest(a)


def test_non_utf8_recipe_is_a_recipe_error_naming_the_file(tmp_path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("schema: t1/v1\ndescription: caf\u00e9\n".encode("latin-1"))
    with pytest.raises(RecipeError) as info:
        load_recipe(bad)
    assert info.value.path == bad
    assert str(bad) in str(info.value) and "UTF-8" in str(info.value)


def test_non_utf8_base_is_a_recipe_error_naming_the_base(tmp_path) -> None:
    base = tmp_path / "base.yaml"
    base.write_bytes("schema: t1/v1\ndescription: caf\u00e9\n".encode("latin-1"))
    child = write(tmp_path, "child.yaml", "schema: t1/v1\nextends: base.yaml\nname: child\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(child)
    assert info.value.path == base.resolve()
    assert "UTF-8" in info.value.problems[0].message


@pytest.mark.parametrize(
    "name", ["../../escaped", "/tmp/abs", "a/b", ".hidden", "..", "has space", "x" * 101]
)
def test_run_name_must_be_a_safe_slug(tiny_path, problems_of, name) -> None:
    # The name becomes <run_root>/<name>-<digest>: a separator or '..' would escape logging.run_root.
    probs = problems_of(tiny_path, f"name='{name}'")
    assert [p.field for p in probs] == ["name"]
    assert "safe slug" in probs[0].message and "run_root" in probs[0].message


@pytest.mark.parametrize("name", ["tiny-cpu", "T1_122b.v2", "0run", "x" * 100])
def test_ordinary_run_names_are_accepted(tiny_path, name) -> None:
    assert load_recipe(tiny_path, [f"name={name}"]).name == name


@pytest.mark.parametrize(
    ("field", "low", "floor"),
    [("memory_mb", 1, 64), ("max_processes", 1, 8), ("cpu_time_s", 0.5, 1), ("disk_mb", 0, 1)],
)
def test_local_sandbox_limits_have_workable_floors(tiny_path, problems_of, field, low, floor) -> None:
    # e.g. RLIMIT_AS = 1 MiB stops bubblewrap itself from mapping libc: refused at load time, not at run time.
    probs = problems_of(tiny_path, f"sandbox.{field}={low}")
    assert [p.field for p in probs] == [f"sandbox.{field}"]
    assert str(floor) in probs[0].message
    assert getattr(load_recipe(tiny_path, [f"sandbox.{field}={floor}"]).sandbox, field) == floor


def test_tiny_cpu_batch_size_override_carries_admitted_along():
    # the example of the walking-skeleton issue: `t1 train recipes/tiny-cpu.yaml ppo.batch_size=2`
    r = load_recipe(RECIPES / "tiny-cpu.yaml", ["ppo.batch_size=2"])
    assert (r.ppo.batch_size, r.rollout.admitted, r.rollout.launched) == (2, 2, 5)


@pytest.mark.parametrize(
    "override",
    ["ppo.actor_lr=inf", "ppo.critic_lr=.inf", "ppo.actor_lr=nan", "rollout.remote_deadline_s=-inf"],
)
def test_non_finite_numbers_are_refused_naming_the_field(override):
    field = override.split("=")[0]
    with pytest.raises(RecipeError, match=rf"{field}: .*finite"):
        load_recipe(RECIPES / "tiny-cpu.yaml", [override])


@pytest.mark.parametrize("override", ["plan.cp=@", "name=[", "name=*a", "name=%x"])
def test_an_override_that_is_not_yaml_is_a_recipe_error_naming_it_in_one_line(override):
    with pytest.raises(RecipeError) as info:
        load_recipe(RECIPES / "tiny-cpu.yaml", [override])
    message = str(info.value)
    assert f"override {override!r}" in message and "not valid YAML" in message and "\n" not in message


def test_a_yaml_error_in_the_file_is_one_line_with_its_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: t1/v1\nname: a\nppo:\n\tsteps: 1\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(bad)
    assert "cannot start any token" in str(info.value) and "line 4, column 1" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_yaml_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    lines = ["schema: t1/v1", "name: bomb", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, cur in zip("abcdefg", "bcdefgh", strict=True):
        lines.append(f"{cur}: &{cur} [{', '.join([f'*{prev}'] * 10)}]")  # 10**8 values once expanded
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecipeError, match="expands to .* values through anchors and aliases"):
        load_recipe(bomb)


@pytest.mark.parametrize("override", ["ppo=3", "ppo=[1]", "ppo=null"])
def test_a_section_replaced_by_a_scalar_is_named_itself(override):
    with pytest.raises(RecipeError, match=r"ppo: a section is a mapping of fields"):
        load_recipe(RECIPES / "tiny-cpu.yaml", [override])


def test_an_override_without_a_value_is_refused_not_read_as_null():
    with pytest.raises(
        RecipeError, match=r"ppo.steps: override 'ppo.steps=' has no value; write ppo.steps=null"
    ):
        load_recipe(RECIPES / "tiny-cpu.yaml", ["ppo.steps="])
    assert load_recipe(RECIPES / "tiny-cpu.yaml", ["ppo.steps=null"]).ppo.steps is None


@pytest.mark.parametrize("override", ["ppo.steps=true", "seed=false", "rollout.max_turns=true"])
def test_a_boolean_where_a_number_belongs_is_refused_not_read_as_1(override):
    field = override.split("=")[0]
    with pytest.raises(RecipeError, match=rf"{field}: expected a number, got a boolean"):
        load_recipe(RECIPES / "tiny-cpu.yaml", [override])


def test_extends_pointing_at_a_directory_says_so(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(f"schema: t1/v1\nextends: {tmp_path}\nname: child\n")
    with pytest.raises(RecipeError, match="extends: base recipe .* is a directory"):
        load_recipe(child)


def test_a_bad_value_from_a_base_names_the_base_that_set_it(tmp_path) -> None:
    child_of_tiny(tmp_path, "ppo:\n  clip_eps: 2.0\n", name="base.yaml")
    body = "schema: t1/v1\nextends: base.yaml\nname: c\nppo:\n  actor_lr: 1.0e-4\n"
    child = write(tmp_path, "child.yaml", body)
    with pytest.raises(RecipeError) as info:
        load_recipe(child)
    assert info.value.path == child
    [problem] = info.value.problems
    assert problem.field == "ppo.clip_eps" and problem.message.endswith("(set in base.yaml)")


def test_a_bad_value_from_an_override_names_the_override(tmp_path) -> None:
    child = child_of_tiny(tmp_path, "")
    with pytest.raises(RecipeError) as info:
        load_recipe(child, ["ppo.clip_eps=3"])
    assert info.value.problems[0].message.endswith("(override ppo.clip_eps=3)")


def test_a_bad_value_in_the_named_file_carries_no_origin(tmp_path) -> None:
    child = child_of_tiny(tmp_path, "ppo:\n  clip_eps: 2.0\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(child)
    assert "set in" not in str(info.value) and "override" not in str(info.value)


def test_a_section_whose_kind_changes_drops_the_bases_origins_with_its_values(tmp_path) -> None:
    # the base sets ppo.advantage as GAE with lam; the child switches it to GRPO, which replaces it whole
    # (POLYMORPHIC_SECTIONS): lam is gone from the merged recipe, and so is its origin
    from t1_spec.loading import _field_origins

    base = child_of_tiny(tmp_path, "ppo:\n  clip_eps: 2.0\n  advantage:\n    lam: 0.9\n", name="base.yaml")
    child = write(
        tmp_path,
        "child.yaml",
        "schema: t1/v1\nextends: base.yaml\nname: c\n"
        "ppo:\n  advantage:\n    estimator: grpo\n    group_size: 0\n",
    )
    origins = _field_origins(child, ["ppo.advantage.group_size=2"])
    assert ("ppo", "advantage", "lam") not in origins
    assert origins[("ppo", "advantage", "estimator")] == str(child.resolve())
    assert origins[("ppo", "advantage", "group_size")] == "override ppo.advantage.group_size=2"
    assert origins[("ppo", "clip_eps")] == str(base.resolve())
    assert origins[("model", "hidden_size")] == str((RECIPES / "tiny-cpu.yaml").resolve())
    with pytest.raises(RecipeError) as info:
        load_recipe(child)
    by_field = {p.field: p.message for p in info.value.problems}
    assert by_field["ppo.clip_eps"].endswith("(set in base.yaml)")
    assert "set in" not in by_field["ppo.advantage.group_size"]
