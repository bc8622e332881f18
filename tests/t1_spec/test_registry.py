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
