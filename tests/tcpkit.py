"""Test kit for the RocketMQ TCP door: a client written here that speaks RocketMQ's remoting frames
(rocketmq_wire) over one blocking socket, as RocketMQ's own clients would."""

from __future__ import annotations

import socket
import time
from collections import deque

from rocketmesh.remoting import RemotingCommand, split_addr
from rocketmesh.remoting.protocol.rocketmq_wire import (
    SERVER_VERSION,
    Decoded,
    FrameDecoder,
    LanguageCode,
    SerializeType,
    encode,
)


class RawClient:
    """A RocketMQ-style client: one blocking TCP connection, frames written and cut by rocketmq_wire."""

    def __init__(self, address: str, rcvbuf: int = 0) -> None:
        host, port = split_addr(address)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(5)
        self.sock.connect((host, port))
        self.decoder = FrameDecoder()
        self.ready: deque[Decoded] = deque()
        #: Requests the server sent this client (NOTIFY_CONSUMER_IDS_CHANGED ...) while ``call`` waited.
        self.pushed: list[Decoded] = []

    @property
    def identity(self) -> bytes:
        """The identity the door gives this connection."""
        host, port = self.sock.getsockname()[:2]
        return f"tcp:{host}:{port}".encode()

    def send(self, cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON,
             language: LanguageCode = LanguageCode.JAVA, version: int = SERVER_VERSION) -> None:
        """Write ``cmd`` as a client in ``language`` at ``version`` (RocketMQ's version code) would."""
        self.sock.sendall(encode(cmd, serialize_type, language, version))

    def recv(self, timeout_s: float = 5.0) -> Decoded:
        """The next frame from the door; fails the test after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not self.ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no frame within {timeout_s} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                raise ConnectionError("the door closed the connection")
            self.ready.extend(self.decoder.feed(data))
        return self.ready.popleft()

    def call(self, cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON,
             language: LanguageCode = LanguageCode.JAVA, version: int = SERVER_VERSION) -> Decoded:
        """Send ``cmd`` and return its response; requests the server sends meanwhile go to ``pushed``."""
        self.send(cmd, serialize_type, language, version)
        while True:
            frame = self.recv()
            if frame[0].is_response:
                return frame
            self.pushed.append(frame)

    def nothing_within(self, timeout_s: float) -> bool:
        """True when no frame comes within ``timeout_s``."""
        try:
            self.recv(timeout_s)
        except AssertionError:
            return True
        return False

    def closed_within(self, timeout_s: float) -> bool:
        """True once the door has closed the connection (end of stream or reset), within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
        return False

    def close(self) -> None:
        self.sock.close()


def cmd(code: int, opaque: int, ext: dict[str, str] | None = None, body: bytes = b"", flag: int = 0) -> RemotingCommand:
    """A request (or, with the response flag, an answer) as a RocketMQ client writes one."""
    return RemotingCommand(code, opaque, flag, None, {} if ext is None else ext, body)
