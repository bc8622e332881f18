"""Typed errors raised by the trainer."""


class TrainerConfigError(ValueError):
    """A PPO setting the chosen backend does not build (advantage normalization, a KL loss, ...).

    Raised when a backend is constructed directly with such a spec; the run finds the same lines earlier,
    through the backend's ``preflight``. The message names the setting, the value and how to fix it.
    """


class SampleError(ValueError):
    """A training sample whose aligned streams are inconsistent (lengths, reward on a masked token, ...).

    The message names the sample (task id, trial id, chunk) and the stream at fault.
    """


class StalenessError(ValueError):
    """A training sample drawn by another policy version than the step expects (T1 Appendix 12).

    The staleness of a sample is the trainer's actor version (`TrainerBackend.policy_version`, publications so
    far) minus the version that sampled it (``sample.policy_version``). The synchronous loop trains at
    staleness 0 and the one-step asynchronous loop at exactly 1 after its first step (with
    ``runtime.max_staleness`` k: the step's own staleness, never above k), so any other value means the loop
    mixed batches or versions. A chunk whose turns came from more than one version
    (``policy_versions_mixed``) is refused the same way. Raised by `t1_trainer.step.ppo_step` before any
    update; the message names the sample (``task/trial#chunk``), its version, the trainer's version and the
    expected staleness.

    Attributes:
        sample: ``task/trial#chunk`` of the first sample at fault (empty for a bad ``staleness`` argument).
        sample_version: the weight version that sampled it (-1 when not applicable).
        trainer_version: the trainer's actor version at the step.
        expected: the staleness the step was asked to train at.
    """

    def __init__(
        self, message: str, *, sample: str = "", sample_version: int = -1, trainer_version: int, expected: int
    ) -> None:
        super().__init__(message)
        self.sample = sample
        self.sample_version = sample_version
        self.trainer_version = trainer_version
        self.expected = expected


class NonFiniteUpdateError(RuntimeError):
    """An optimizer step would produce, or produced, non-finite weights.

    Raised before the step when the gradient norm is not finite (the weights are left unchanged), and after it
    when a parameter became inf or NaN (e.g. a learning rate far too large). The message names the network
    (``actor`` or ``critic``), the first parameters at fault and the setting to look at.
    """
