"""Typed errors raised by the trainer."""


class TrainerConfigError(ValueError):
    """A PPO setting the trainer refuses (for example a KL or load-balancing loss with routing replay on).

    The message names the setting, the value, the rule from the paper and how to fix it.
    """


class SampleError(ValueError):
    """A training sample whose aligned streams are inconsistent (lengths, reward on a masked token, ...).

    The message names the sample (task id, trial id, chunk) and the stream at fault.
    """
