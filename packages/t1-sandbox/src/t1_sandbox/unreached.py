"""What a command could not reach, named from its own output: ``"<tool>: no network to <host>"`` and kin.

Read from the messages that apt, pip (urllib3 1 and 2), curl, git, wget, npm and uv print when a host does
not resolve, does not answer or presents a certificate the image does not trust (a TLS-intercepting proxy).
Used where the output is T1's own and not the agent's: a failed image build (the Dockerfile's step) and the
reference solution's verifier run in ``t1 tasks validate``. Training never blames the environment from what
a run printed (an agent could print it); ``t1_rollout.attribution`` says why.
"""

from __future__ import annotations

import re

__all__ = ["STEP_TOOLS", "unreached_cause"]

#: Commands that fetch from the network, in the order a step's command is searched for the one that failed.
STEP_TOOLS = ("curl", "git", "wget", "uvx", "uv", "pip3", "pip", "npm", "apt-get", "apt")
_INDEX = "the package index (pypi.org unless configured)"
# (pattern whose group 1 is the host, the tool that prints it: None when curl and git print it alike)
_UNREACHED = (
    (re.compile(r"Temporary failure resolving '([^']+)'"), "apt-get"),
    (re.compile(r"Could not resolve '([^']+)'"), "apt-get"),
    (re.compile(r"Could not connect to ([A-Za-z0-9.-]+)"), "apt-get"),
    (re.compile(r"Failed to resolve '([^']+)'"), "pip"),  # urllib3 2
    (re.compile(r"HTTPS?ConnectionPool\(host='([^']+)'"), "pip"),
    (re.compile(r"unable to resolve host address '([^']+)'"), "wget"),
    (re.compile(r"getaddrinfo E(?:NOTFOUND|AI_AGAIN) ([A-Za-z0-9.-]+)"), "npm"),
    (re.compile(r"Could not resolve host: ([A-Za-z0-9.-]+)"), None),
    # urllib3 1 names only the path: the index is pypi.org unless pip.conf says otherwise
    (re.compile(r"Failed to establish a new connection.*?': /simple/()"), "pip"),
)
_TLS = re.compile(
    r"invalid peer certificate: (\w+)|SSL certificate problem: ([^\n]+)|CERTIFICATE_VERIFY_FAILED|"
    r"certificate verify failed"
)
_UV_FETCH = re.compile(r"Failed to fetch: `?https?://([A-Za-z0-9.-]+)")
_URL_HOST = re.compile(r"https?://([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)")
_UV_DNS = re.compile(r"dns error|failed to lookup address|Connection refused|timed out", re.IGNORECASE)


def _tool_of(command: str, default: str) -> str:
    """The first of `STEP_TOOLS` that ``command`` runs, else ``default``."""
    for tool in STEP_TOOLS:
        if re.search(rf"(^|[\s;&|(/]){re.escape(tool)}\b", command):
            return tool
    return default


def unreached_cause(output: str, command: str = "") -> str | None:
    """What ``output`` says its command could not reach, in one phrase, or None when it says nothing of it.

    Args:
        output: the command's stdout and stderr (ANSI colours already removed).
        command: the command line, to name the tool when the message is shared (curl and git print the same
            ``Could not resolve host``); empty: the tool is named from the message alone.

    Returns:
        ``"apt-get: no network to deb.debian.org"``, ``"pip: no network to pypi.org"``, ``"uv: no network to
        pypi.org"``, ``"uv: TLS to pypi.org failed certificate verification (UnknownIssuer) ..."``, or None.
    """
    tls = _TLS.search(output)
    if tls:
        fetched = _UV_FETCH.search(output) or _URL_HOST.search(output)
        host = fetched.group(1) if fetched else "a host"
        tool = "uv" if _UV_FETCH.search(output) else _tool_of(command, "a command")
        why = tls.group(1) or (tls.group(2) or "").strip() or "certificate verify failed"
        return (
            f"{tool}: TLS to {host} failed certificate verification ({why}): the image does not trust the "
            "certificate this network presents (a TLS-intercepting proxy's authority is not installed in it)"
        )
    for pattern, tool in _UNREACHED:
        match = pattern.search(output)
        if match:
            if tool == "apt-get" and _tool_of(command, "apt-get") == "apt":  # `apt install` prints the same
                tool = "apt"
            return f"{tool or _tool_of(command, 'a command')}: no network to {match.group(1) or _INDEX}"
    fetched = _UV_FETCH.search(output)
    if fetched and _UV_DNS.search(output):
        return f"uv: no network to {fetched.group(1)}"
    return None
