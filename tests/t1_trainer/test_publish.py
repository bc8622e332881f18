"""Weight publication: quiesce, advance the version by one, resume, whatever fails (T1 §7)."""

import pytest
import torch

from t1_trainer.publish import WeightReceiver, publish_weights


class Backend:
    def __init__(self):
        self.exports = 0
        self.weights = {"lm_head.weight": torch.ones(2, 2)}

    def export_weights(self):
        self.exports += 1
        return self.weights


class Engine:
    def __init__(self, version=0, fail=False, log=None):
        self.weight_version = version
        self.fail = fail
        self.log = [] if log is None else log
        self.paused = False

    def pause(self):
        self.paused = True
        self.log.append(("pause", id(self)))

    def resume(self):
        self.paused = False
        self.log.append(("resume", id(self)))

    def update_weights(self, state_dict, *, weight_version):
        assert self.paused, "weights must only change while generation is quiesced"
        if self.fail:
            raise RuntimeError("update failed")
        self.state_dict = state_dict
        self.weight_version = weight_version
        self.log.append(("update", id(self)))


def test_an_engine_is_a_weight_receiver():
    assert isinstance(Engine(), WeightReceiver)


def test_publication_advances_the_version_by_one_and_resumes():
    backend, engine = Backend(), Engine(version=3)
    seconds = publish_weights(backend, engine)
    assert engine.weight_version == 4 and not engine.paused
    assert engine.state_dict is backend.weights and backend.exports == 1
    assert [e for e, _ in engine.log] == ["pause", "update", "resume"]
    assert seconds >= 0.0


def test_a_failed_update_still_resumes_generation():
    engine = Engine(version=2, fail=True)
    with pytest.raises(RuntimeError, match="update failed"):
        publish_weights(Backend(), engine)
    assert not engine.paused and engine.weight_version == 2


def test_replicas_are_all_paused_before_any_update_and_all_resumed_after_a_failure():
    log = []
    good, bad = Engine(version=5, log=log), Engine(version=5, fail=True, log=log)
    backend = Backend()
    with pytest.raises(RuntimeError):
        publish_weights(backend, [good, bad])
    assert [e for e, _ in log[:2]] == ["pause", "pause"]
    assert not good.paused and not bad.paused and backend.exports == 1
    ok = [Engine(version=5), Engine(version=5)]
    publish_weights(backend, ok)
    assert [e.weight_version for e in ok] == [6, 6]


def test_replicas_on_different_versions_are_refused_before_any_pause():
    a, b = Engine(version=1), Engine(version=2)
    with pytest.raises(ValueError, match=r"versions \[1, 2\]"):
        publish_weights(Backend(), [a, b])
    assert a.log == [] and b.log == []
