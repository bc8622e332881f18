import pytest

from t1_spec import BackendNotBuilt, Registry


def test_load_imports_the_registered_attribute() -> None:
    reg = Registry("sandbox.kind", {"json": "json:dumps"})
    import json

    assert reg.load("json") is json.dumps
    assert reg.kinds() == ("json",)
    assert reg.problem("json") is None


def test_unregistered_kind_is_refused_naming_the_field_and_what_is_built() -> None:
    reg = Registry("sandbox.kind", {"local": "json:dumps"})
    with pytest.raises(BackendNotBuilt) as err:
        reg.load("docker")
    assert err.value.field == "sandbox.kind" and err.value.kind == "docker"
    assert str(err.value) == reg.problem("docker")
    assert "sandbox.kind 'docker'" in str(err.value) and "built: local" in str(err.value)
    assert isinstance(err.value, NotImplementedError)


def test_malformed_entry_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="not 'module:Attribute'"):
        Registry("engine.kind", {"embedded": "t1_rollout.engine.embedded.EmbeddedEngine"})


def test_preflight_uses_the_light_check_without_importing_the_backend() -> None:
    # The entry's module does not exist: importing it would raise, so the check alone must answer.
    reg = Registry("engine.kind", {"heavy": "t1_no_such_module:Engine"}, checks={"heavy": "builtins:repr"})
    assert reg.preflight("heavy", ("recipe",)) == repr(("recipe",))


def test_preflight_without_a_check_asks_the_class() -> None:
    class Backend:
        @classmethod
        def preflight(cls, recipe: object) -> list[str]:
            return [f"trainer.backend: refused {recipe}"]

    import types

    module = types.ModuleType("t1_registry_test_backend")
    module.Backend = Backend
    import sys

    sys.modules[module.__name__] = module
    try:
        reg = Registry("trainer.backend", {"b": "t1_registry_test_backend:Backend"})
        assert reg.preflight("b", "R") == ["trainer.backend: refused R"]
        with pytest.raises(BackendNotBuilt):
            reg.preflight("other", "R")
    finally:
        del sys.modules[module.__name__]


def test_check_for_a_kind_without_an_entry_or_malformed_is_refused() -> None:
    with pytest.raises(ValueError, match="checks for kinds with no entry: ghost"):
        Registry("engine.kind", {"embedded": "json:dumps"}, checks={"ghost": "json:dumps"})
    with pytest.raises(ValueError, match="check 'embedded'.*not 'module:Attribute'"):
        Registry("engine.kind", {"embedded": "json:dumps"}, checks={"embedded": "json.dumps"})
