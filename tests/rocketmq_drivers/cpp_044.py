"""Drives PyPI ``rocketmq`` 0.4.4 (the C++ client 1.x behind ctypes) for the tests; see driverkit for the
protocol. Every role signs its requests for ACL when the job has ``access_key`` and ``secret_key``. Roles:

- ``producer``: ``sends`` in order, each ``{"mode": "sync"|"oneway"|"orderly"|"batch", ...}`` with a
  ``message`` (``batch``: ``messages``; ``orderly``: an int ``arg``, the queue being ``arg % queues``);
  reports ``sent`` (status, msg_id, offset) or ``send_failed`` per send, then ``done``.
- ``push``: a PushConsumer (``model`` clustering or broadcasting, ``orderly``) of ``topic``/``expression``;
  reports ``started``, then ``msg`` per delivery; a message whose keys are in ``fail`` is answered
  RECONSUME_LATER that many times first (its callback raises, as the library's API has it).
- ``pull``: a PullConsumer reading ``topic`` until ``expect`` messages came; ``msg`` per message, ``done``.

A message spec: see driverkit.build_message.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from driverkit import build_message, emit, main, now_ms, record, serve_until_stopped
from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer, hashing_queue_selector


def sign_with(client: Any, job: dict[str, Any]) -> None:
    """RocketMQ's ACL credentials, when the job gives them (``access_key``, ``secret_key``)."""
    if job.get("access_key"):
        client.set_session_credentials(job["access_key"], job["secret_key"], "ALIYUN")


def message(spec: dict[str, Any]) -> Message:
    return build_message(Message, spec)


def produce(job: dict[str, Any]) -> None:
    producer = Producer(job["group"])
    producer.set_namesrv_addr(job["namesrv"])
    sign_with(producer, job)
    producer.set_timeout(int(job.get("send_timeout_ms", 5000)))
    producer.start()
    emit("started")
    for index, send in enumerate(job["sends"]):
        mode, t_ms = send["mode"], now_ms()
        try:
            if mode == "sync":
                result = producer.send_sync(message(send["message"]))
            elif mode == "orderly":
                result = producer.send_orderly(message(send["message"]), int(send["arg"]),
                                               queue_selector=hashing_queue_selector)
            elif mode == "batch":
                result = producer.send_batch([message(m) for m in send["messages"]])
            elif mode == "oneway":
                producer.send_oneway(message(send["message"]))
                emit("sent", index=index, mode=mode, t_ms=t_ms)
                continue
            else:
                raise ValueError(f"unknown send mode {mode!r}")
            emit("sent", index=index, mode=mode, t_ms=t_ms, status=int(result.status), msg_id=result.msg_id,
                 offset=result.offset)
        except Exception as exc:
            emit("send_failed", index=index, mode=mode, error=str(exc))
    emit("done")
    serve_until_stopped(producer.shutdown)


class Reconsume(Exception):
    """Raised by the callback: the library answers RECONSUME_LATER."""


def push(job: dict[str, Any]) -> None:
    model = MessageModel.BROADCASTING if job.get("model") == "broadcasting" else MessageModel.CLUSTERING
    consumer = PushConsumer(job["group"], orderly=bool(job.get("orderly")), message_model=model)
    consumer.set_namesrv_addr(job["namesrv"])
    sign_with(consumer, job)
    consumer.set_instance_name(job.get("instance", f"driver-{time.monotonic_ns()}"))
    consumer.set_thread_count(int(job.get("threads", 2)))
    props = list(job.get("props", []))
    fail: dict[str, int] = dict(job.get("fail", {}))
    attempts: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def on_message(msg: Any) -> None:
        rec = record(msg, props)
        with lock:
            attempts[rec["keys"] or ""] += 1
            attempt = attempts[rec["keys"] or ""]
        later = attempt <= fail.get(rec["keys"] or "", 0)
        emit("msg", **rec, attempt=attempt, answer="RECONSUME_LATER" if later else "CONSUME_SUCCESS")
        if later:
            raise Reconsume(rec["keys"])

    consumer.subscribe(job["topic"], on_message, job.get("expression", "*"))
    consumer.start()
    emit("started")
    serve_until_stopped(consumer.shutdown)


def pull(job: dict[str, Any]) -> None:
    consumer = PullConsumer(job["group"])
    consumer.set_namesrv_addr(job["namesrv"])
    sign_with(consumer, job)
    consumer.start()
    emit("started")
    props, expect, count = list(job.get("props", [])), int(job["expect"]), 0
    while count < expect:
        for msg in consumer.pull(job["topic"], job.get("expression", "*"), int(job.get("max_num", 32))):
            emit("msg", **record(msg, props))
            count += 1
        time.sleep(0.1)
    emit("done", count=count)
    serve_until_stopped(consumer.shutdown)


if __name__ == "__main__":
    main({"producer": produce, "push": push, "pull": pull})
