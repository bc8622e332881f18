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


class NonFiniteUpdateError(RuntimeError):
    """An optimizer step would produce, or produced, non-finite weights.

    Raised before the step when the gradient norm is not finite (the weights are left unchanged), and after it
    when a parameter became inf or NaN (e.g. a learning rate far too large). The message names the network
    (``actor`` or ``critic``), the first parameters at fault and the setting to look at.
    """
