"""What the RocketMQ client drivers share. A driver runs in the venv of one RocketMQ client (never
rocketmesh's): it reads its job as one JSON line on stdin, reports JSON lines (``{"event": ...}``) on
stdout, keeps running until the line ``stop`` (or the end of stdin) comes, and ends with ``os._exit``:
the C++ push consumer can crash while it shuts down, after everything was reported. A watchdog ends a
driver that outlives the job's ``timeout_s``."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_out = threading.Lock()

#: The properties every received message reports besides the job's own (RocketMQ's names).
SYSTEM_PROPERTIES = ("UNIQ_KEY", "DELAY", "RECONSUME_TIME", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID",
                     "TRAN_MSG", "PGROUP")


def now_ms() -> int:
    return int(time.time() * 1000)


def emit(event: str, **fields: Any) -> None:
    """One report line on stdout."""
    line = json.dumps({"event": event, **fields})
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def read_job() -> dict[str, Any]:
    """The job: the first line of stdin, a JSON object; a watchdog is armed with its ``timeout_s``."""
    job: dict[str, Any] = json.loads(sys.stdin.readline())
    timer = threading.Timer(float(job.get("timeout_s", 60)), _timed_out)
    timer.daemon = True
    timer.start()
    return job


def _timed_out() -> None:
    emit("timeout")
    os._exit(3)


def text(value: object) -> str | None:
    """A c_char_p value (bytes, or None for a NULL) as text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def build_message(message_class: Callable[[str], Any], spec: dict[str, Any]) -> Any:
    """A message of the client's ``Message`` class (0.4.4's and 2.0.0's have the same setters) from a spec:
    ``{"topic", "body", "tags"?, "keys"?, "props"?: {name: value}, "delay"?: level}``."""
    msg = message_class(spec["topic"])
    msg.set_body(spec["body"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    for name, value in (spec.get("props") or {}).items():
        msg.set_property(name, value)
    if spec.get("delay"):
        msg.set_delay_time_level(int(spec["delay"]))
    return msg


def record(msg: Any, props: list[str]) -> dict[str, Any]:
    """A received message (0.4.4's RecvMessage, 2.0.0's ReceivedMessage: the same accessors) as a dict. Both
    read the body as a C string: it ends at its first NUL byte (the tests' bodies are text)."""
    return {
        "t_ms": now_ms(), "id": text(msg.id), "topic": text(msg.topic), "tags": text(msg.tags),
        "keys": text(msg.keys), "body": text(msg.body), "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset, "reconsume_times": msg.reconsume_times,
        "delay_time_level": msg.delay_time_level, "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
        "props": {name: text(msg.get_property(name)) for name in (*SYSTEM_PROPERTIES, *props)},
    }


def guarded(where: str, fn: Callable[..., Any], fallback: Any) -> Callable[..., Any]:
    """``fn`` for a ctypes callback: an exception is reported and ``fallback`` returned, never raised into C."""
    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # nothing may cross into the C library
            emit("error", where=where, error=repr(exc))
            return fallback
    return call


def main(roles: dict[str, Callable[[dict[str, Any]], None]]) -> None:
    """Run the job's ``role``; a failure (a client that does not start, say) is reported as ``error`` and ends
    the process with status 2."""
    job = read_job()
    try:
        roles[job["role"]](job)
    except Exception as exc:
        emit("error", where=job.get("role"), error=str(exc))
    os._exit(2)


def serve_until_stopped(shutdown: Callable[[], object], bound_s: float = 5.0) -> None:
    """Block until ``stop`` or the end of stdin, then ``shutdown()`` (given ``bound_s`` at most, on a thread)
    and end the process."""
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    emit("stopping")
    worker = threading.Thread(target=shutdown, daemon=True)
    worker.start()
    worker.join(bound_s)
    emit("stopped", clean=not worker.is_alive())
    os._exit(0)
