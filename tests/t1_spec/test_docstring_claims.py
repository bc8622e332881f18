"""Field docs (the generated spec reference) promise only what is built, and say so where it is not.

Each claim is checked against the code that would have to honour it, so building the feature makes the
test fail until the doc is updated too.
"""

from __future__ import annotations

import pytest

from t1_spec import (
    DaytonaSandboxSpec,
    DockerSandboxSpec,
    HarborSandboxSpec,
    LivenessSpec,
    PoolSpec,
    RolloutSpec,
    SGLangEngineSpec,
    TitoSpec,
    TrainerSpec,
)


def field_doc(model, name: str) -> str:
    return " ".join((model.model_fields[name].description or "").split())


def test_pool_source_says_named_pools_are_not_resolvable_yet() -> None:
    doc = field_doc(PoolSpec, "source")
    assert "not resolvable yet" in doc and "builtin:mini" in doc
    assert "current working directory" in doc
    assert "resolves to a local directory" not in doc
    t1_tasks = pytest.importorskip("t1_tasks")
    with pytest.raises((FileNotFoundError, ValueError, LookupError)):
        t1_tasks.load_pool("T1-15k")  # the claim: a named pool does not load (yet)


def test_compaction_threshold_says_what_the_harness_does_at_it() -> None:
    doc = field_doc(RolloutSpec, "compaction_threshold_tokens")
    assert "not built" not in doc and "compaction_failed" in doc and "new TITO chunk" in doc
    harness = pytest.importorskip("t1_rollout.harness")
    source = (harness.__doc__ or "") + open(harness.__file__, encoding="utf-8").read()
    assert "compaction_failed" in source and "threshold_tokens" in source and "not built" not in source


@pytest.mark.parametrize("section", [HarborSandboxSpec])
def test_unbuilt_sections_say_so(section) -> None:
    doc = " ".join((section.__doc__ or "").split())
    assert "Not built yet" in doc or "Not runnable yet" in doc


def test_liveness_says_what_probes_it_and_what_is_not_probed() -> None:
    doc = " ".join((LivenessSpec.__doc__ or "").split())
    assert "Not built yet" not in doc and "t1.run.ray.liveness" in doc
    assert pytest.importorskip("t1.run.ray.liveness").LivenessMonitor
    assert "trainer worker is not probed" in doc


@pytest.mark.parametrize(
    ("section", "registry"),
    [
        (DockerSandboxSpec, "t1_sandbox:SANDBOXES"),
        (DaytonaSandboxSpec, "t1_sandbox:SANDBOXES"),
        (SGLangEngineSpec, "t1_rollout.engine:ENGINES"),
    ],
)
def test_built_sections_do_not_say_unbuilt_and_are_registered(section, registry) -> None:
    doc = " ".join((section.__doc__ or "").split())
    assert "Not built yet" not in doc and "Not runnable yet" not in doc
    module, _, name = registry.partition(":")
    table = getattr(pytest.importorskip(module), name)
    assert section.model_fields["kind"].default in table.kinds()


def test_megatron_backend_and_tito_repairs_say_what_is_built() -> None:
    # the megatron backend is built (t1_trainer.megatron); the field says what of it, and what is refused
    doc = field_doc(TrainerSpec, "backend")
    assert "not built yet" not in doc and "t1-trainer[megatron]" in doc and "refused by name" in doc
    # The normalized and retokenized repairs are built (t1_tito.stitch): the field no longer says otherwise.
    assert "not built" not in field_doc(TitoSpec, "repair") and "offset mapping" in field_doc(
        TitoSpec, "repair"
    )
