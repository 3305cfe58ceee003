"""The broker's side of the dispatch worker: start it, publish the commitlog end, hear what it built."""

from __future__ import annotations

import itertools
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from rocketmesh.broker.store.config import MessageStoreConfig
from rocketmesh.broker.store.dispatch.position_cell import PositionCell
from rocketmesh.runtime.log import get_logger
from rocketmesh.runtime.python_process import python_module_argv

log = get_logger("broker", component="dispatch_link")

#: Restarts of a worker that died before the broker gives up on it (and logs it loudly).
MAX_RESTARTS = 5
#: Recovery rebuilds queues from the checkpoint on; on a big store that takes a while.
READY_TIMEOUT_S = 600.0

Ready = tuple[dict, dict, int]


class DispatchWorkerError(RuntimeError):
    """The dispatch worker could not be started or did not answer."""


class DispatchLink:
    """Runs the worker process and the thread that reads its reports."""

    def __init__(self, config: MessageStoreConfig, on_persisted: Callable[[list, int], None],
                 on_ready: Callable[[Ready], None]) -> None:
        self.config = config
        self.on_persisted = on_persisted
        self.on_ready = on_ready
        #: cell[0]: the commitlog's written end, set by the broker after each put.
        self.cell = PositionCell.create()
        self._proc: subprocess.Popen | None = None
        self._conn: Any = None
        self._send_lock = threading.Lock()
        self._replies: dict[int, Any] = {}
        self._reply_cond = threading.Condition()
        self._ids = itertools.count(1)
        self._reader: threading.Thread | None = None
        self._stopping = False
        self.restarts = 0

    def publish(self, end: int) -> None:
        self.cell.publish(end)

    def start(self, end: int) -> Ready:
        """Start the worker on a commitlog that ends at ``end``; returns its ``ready`` report."""
        self.cell[0] = end
        ready = self._spawn(end)
        self._reader = threading.Thread(target=self._read_loop, name="DispatchLink", daemon=True)
        self._reader.start()
        return ready

    def _spawn(self, end: int) -> Ready:
        mine, theirs = socket.socketpair()
        proc = subprocess.Popen(
            python_module_argv("rocketmesh.broker.store.dispatch.dispatch_worker", str(theirs.fileno()),
                               str(self.cell.fd), str(self.cell.wake_fd)),
            pass_fds=(theirs.fileno(), self.cell.fd, self.cell.wake_fd), stdin=subprocess.DEVNULL)
        theirs.close()
        conn = Connection(mine.detach())
        conn.send(("init", self.config, end))
        if not conn.poll(READY_TIMEOUT_S):
            proc.kill()
            raise DispatchWorkerError(f"dispatch worker not ready after {READY_TIMEOUT_S:.0f}s")
        try:
            msg = conn.recv()
        except EOFError:
            proc.wait(5)
            raise DispatchWorkerError(f"dispatch worker exited with {proc.returncode} during recovery") from None
        if msg[0] != "ready":
            proc.kill()
            raise DispatchWorkerError(f"dispatch worker said {msg[0]!r} instead of ready")
        self._proc, self._conn = proc, conn
        return msg[1], msg[2], msg[3]

    def _read_loop(self) -> None:
        while True:
            conn = self._conn
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                if self._stopping:
                    return
                if not self._restart():
                    return
                continue
            kind = msg[0]
            if kind == "persisted":
                try:
                    self.on_persisted(msg[1], msg[2])
                except Exception:  # noqa: BLE001 - the reports must keep flowing
                    log.exception("dispatch_report_failed")
            elif kind == "reply":
                with self._reply_cond:
                    self._replies[msg[1]] = msg[2]
                    self._reply_cond.notify_all()

    def _restart(self) -> bool:
        code = self._proc.poll() if self._proc is not None else None
        if self.restarts >= MAX_RESTARTS:
            log.critical("dispatch_worker_gone", exitcode=code, restarts=self.restarts,
                         note="consume queues and index no longer advance; restart the broker")
            return False
        self.restarts += 1
        log.error("dispatch_worker_died", exitcode=code, restart=self.restarts)
        time.sleep(min(5.0, 0.2 * 2 ** self.restarts))
        try:
            ready = self._spawn(self.cell[0])
        except DispatchWorkerError as exc:
            log.error("dispatch_worker_restart_failed", error=str(exc))
            return self._restart()
        self.on_ready(ready)
        return True

    def request(self, kind: str, arg: Any, timeout_s: float = 30.0) -> Any:
        """Send a command and wait for its reply (DispatchWorkerError on timeout)."""
        req_id = next(self._ids)
        with self._send_lock:
            self._conn.send((kind, req_id, arg))
        deadline = time.monotonic() + timeout_s
        with self._reply_cond:
            while req_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DispatchWorkerError(f"dispatch worker did not answer {kind!r} in {timeout_s:.0f}s")
                self._reply_cond.wait(left)
            return self._replies.pop(req_id)

    def stop(self, final_end: int, timeout_s: float = 60.0) -> int | None:
        """Let the worker dispatch up to ``final_end``, flush and exit; returns where it got."""
        if self._proc is None:
            return None
        self.cell[0] = final_end
        self._stopping = True
        log.info("dispatch_worker_stopping", final_end=final_end)
        reached = None
        try:
            reached = self.request("stop", final_end, timeout_s)
        except (DispatchWorkerError, OSError, EOFError) as exc:
            log.error("dispatch_worker_stop_failed", error=str(exc))
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        try:
            self._conn.close()
        except OSError:
            pass
        if self._reader is not None:
            self._reader.join(5)
        self.cell.close()
        return reached

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None
