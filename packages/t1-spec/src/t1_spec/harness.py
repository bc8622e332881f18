"""The agent harness of a trial: T1's built-in one, or an external program driving the model over HTTP."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from t1_spec._base import Spec


class BuiltinHarnessSpec(Spec):
    """T1's own Terminus-style harness: one JSON action per turn in a persistent shell (the default)."""

    kind: Literal["builtin"] = "builtin"
    """Discriminator: T1's built-in harness (`t1_rollout.harness`)."""


class ExternalHarnessSpec(Spec):
    """An agent harness T1 does not own (mini-swe-agent, a Harbor agent, a user's loop) run as a command.

    The command runs on the rollout host beside the trial's sandbox. T1 starts an OpenAI-compatible
    chat-completions endpoint on loopback for the trial and gives the command its URL and a per-trial key
    (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); every call is rendered with the model's chat template, its
    boundary with the previous call checked under TITO's four cases, and its sampled ids, log-probs, routing
    rows and weight version kept: the trial's sample is stitched from those, never from the harness's text
    (T1 §4.1, §4.2). Commands the harness runs go into the sandbox through ``T1_SANDBOX_EXEC``, a small
    command that speaks the ``run``/``exec``/``rm`` subset of the ``docker`` command line. The command's
    exit status, crash or overrun of ``rollout.agent_deadline_s`` end the episode with that cause; the
    verifier then grades the sandbox as for the built-in harness.
    """

    kind: Literal["external"] = "external"
    """Discriminator: an external harness through T1's endpoint (`t1_rollout.external`)."""

    command: list[str] = Field(min_length=1)
    """The harness's argv (no shell). ``$NAME`` is replaced by the trial's variables (``T1_INSTRUCTION``,
    ``T1_INSTRUCTION_FILE``, ``T1_SANDBOX_EXEC``, ``T1_TRIAL_DIR``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
    ``T1_MODEL``) and by those of ``env``; an unknown name is left as written. Write ``$NAME``, not
    ``${NAME}``: the recipe loader reads ``${...}`` as its own interpolation (escape it as ``\\${NAME}``)."""

    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables of the command (after T1's own, which they cannot replace). The
    command inherits no other variable of the rollout process but ``PATH``, ``HOME``, ``LANG`` and
    ``TMPDIR``."""

    model: str = Field(default="t1", min_length=1)
    """The model name the endpoint answers to (``T1_MODEL``; ``/v1/models`` lists it); any name is served."""

    kill_grace_s: float = Field(default=5.0, gt=0)
    """Seconds between SIGTERM and SIGKILL when the command outlives the agent deadline or the trial is
    cancelled (seconds; chosen)."""


HarnessSpec = Annotated[BuiltinHarnessSpec | ExternalHarnessSpec, Field(discriminator="kind")]
"""The harness section, selected by ``kind: builtin | external``; both are built."""
