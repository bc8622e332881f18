"""The megatron backend's CPU adaptations (the pipeline schedule's CUDA calls, the Gated DeltaNet's fla
kernels) are put back when the body raises, as when it returns: nothing outlives the schedule or forward."""

import pytest
import torch

pytest.importorskip("megatron.core")


class Boom(Exception):
    pass


def test_cpu_schedule_is_undone_when_the_schedule_raises():
    from t1_trainer.megatron.pipeline import cpu_schedule

    sync, current = torch.cuda.synchronize, torch.cuda.current_device
    with pytest.raises(Boom), cpu_schedule(True):
        assert torch.zeros([], device="cuda").device.type == "cpu"
        raise Boom
    assert torch.cuda.synchronize is sync and torch.cuda.current_device is current
    assert torch.overrides._get_current_function_mode_stack() == []  # the CUDA-to-CPU mode is gone too


def test_gated_deltanet_kernels_are_undone_when_the_forward_raises(monkeypatch):
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, common, gdn

    from t1_trainer.megatron.gdn_cpu import CpuGatedDeltaNet

    before = (common.HAVE_FLA, common.l2norm, gdn.causal_conv1d)
    seen = []

    def failing_forward(self, *args, **kwargs):
        seen.append((common.HAVE_FLA, common.l2norm, gdn.causal_conv1d))
        raise Boom

    monkeypatch.setattr(GatedDeltaNet, "forward", failing_forward)
    layer = object.__new__(CpuGatedDeltaNet)  # only the forward's scope is under test, not a built layer
    object.__setattr__(layer, "cp_size", 1)  # megatron's constructor sets it; one rank: megatron's forward
    with pytest.raises(Boom):
        layer.forward(torch.zeros(1, 1, 1))
    assert seen and seen[0] != before  # the torch kernels were in place during the forward
    assert (common.HAVE_FLA, common.l2norm, gdn.causal_conv1d) == before
