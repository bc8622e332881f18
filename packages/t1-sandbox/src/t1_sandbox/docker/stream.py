"""One ``docker exec`` on the event loop: its hijacked socket, standard input fed, output demultiplexed.

The Engine API's exec start (``POST /exec/{id}/start``, hijacked) turns the HTTP connection into the process's
standard streams. Without a terminal the daemon multiplexes stdout and stderr into frames of an 8-byte header
(stream id, three zero bytes, big-endian length) and the payload. The socket is read with the event loop's
``sock_recv``, so a deadline or a cancellation never waits on a blocked thread. Source: the Docker Engine API
reference ("Attach to a container": stream format).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

__all__ = ["CAP", "Frames", "exec_socket"]

CAP = 8 * 1024 * 1024  # bytes kept of each stream, as the local sandbox keeps


def exec_socket(api: Any, exec_id: str, *, tty: bool) -> socket.socket:
    """Start exec ``exec_id``; return its hijacked socket, non-blocking (a blocking call: run in a thread)."""
    raw = api.exec_start(exec_id, socket=True, tty=tty)
    sock = getattr(raw, "_sock", raw)
    sock.setblocking(False)
    return sock


class Frames:
    """The demultiplexed output of one exec, kept as it arrives (a deadline keeps what came before it).

    Args:
        cap: bytes kept of each stream (``None``: all); the rest is drained and counted in a marker line.
    """

    def __init__(self, cap: int | None = CAP) -> None:
        self.cap = cap
        self._out = {1: bytearray(), 2: bytearray()}
        self._dropped = {1: 0, 2: 0}

    def _marked(self, key: int) -> bytes:
        data = bytes(self._out[key])
        if self._dropped[key]:
            data += f"\n[... {self._dropped[key]} bytes omitted: over the {self.cap}-byte cap ...]\n".encode()
        return data

    @property
    def stdout(self) -> bytes:
        """Standard output so far."""
        return self._marked(1)

    @property
    def stderr(self) -> bytes:
        """Standard error so far."""
        return self._marked(2)

    async def pump(self, sock: socket.socket, stdin: bytes | None) -> None:
        """Feed ``stdin`` (then half-close the socket) and read the stream to its end."""
        loop = asyncio.get_running_loop()
        if stdin is not None:
            await loop.sock_sendall(sock, stdin)
            sock.shutdown(socket.SHUT_WR)
        buf = bytearray()
        while True:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                return
            buf += data
            while len(buf) >= 8:
                size = struct.unpack(">I", bytes(buf[4:8]))[0]
                if len(buf) < 8 + size:
                    break
                key = 2 if buf[0] == 2 else 1
                payload = bytes(buf[8 : 8 + size])
                del buf[: 8 + size]
                room = (
                    len(payload)
                    if self.cap is None
                    else min(len(payload), max(0, self.cap - len(self._out[key])))
                )
                self._out[key] += payload[:room]
                self._dropped[key] += len(payload) - room
