"""Drives the Apache wrapper ``rocketmq-client-python`` 2.0.0 on the C++ client 2.1.0 library for the tests;
see driverkit for the protocol. Role ``transaction``: a TransactionMQProducer sends ``messages`` (specs as
driverkit.build_message reads them) in transactions; ``local`` and ``check`` map a message's keys to what
its local transaction and its check-back answer: ``commit``, ``rollback`` or ``unknown``. Reports
``executed`` (keys) and ``checked`` (keys, id) as the callbacks run, ``sent`` (status, msg_id, offset) or
``send_failed`` per message, then ``done``, and keeps answering check-backs until stopped."""

from __future__ import annotations

from typing import Any

from driverkit import build_message, emit, guarded, main, now_ms, serve_until_stopped, text
from rocketmq.client import Message, TransactionMQProducer, TransactionStatus

STATUS = {"commit": TransactionStatus.COMMIT, "rollback": TransactionStatus.ROLLBACK,
          "unknown": TransactionStatus.UNKNOWN}


def message(spec: dict[str, Any]) -> Message:
    return build_message(Message, spec)


def transaction(job: dict[str, Any]) -> None:
    local: dict[str, str] = job.get("local", {})
    check: dict[str, str] = job.get("check", {})

    def on_check(msg: Any) -> TransactionStatus:
        keys = text(msg.keys) or ""
        emit("checked", keys=keys, id=text(msg.id), t_ms=now_ms())
        return STATUS[check.get(keys, "unknown")]

    def on_execute(msg: Any, user_args: Any) -> TransactionStatus:
        # The wrapper hands over the message being sent as a ReceivedMessage; it has no id yet (reading one
        # crashes the library): its keys only.
        keys = text(msg.keys) or ""
        emit("executed", keys=keys, t_ms=now_ms())
        return STATUS[local.get(keys, "unknown")]

    # The wrapper's constructor passes a timeout on to the wrong parameter: none given, set_timeout after.
    producer = TransactionMQProducer(job["group"], guarded("check", on_check, TransactionStatus.UNKNOWN))
    producer.set_name_server_address(job["namesrv"])
    producer.set_timeout(int(job.get("send_timeout_ms", 5000)))
    producer.start()
    emit("started")
    for index, spec in enumerate(job["messages"]):
        try:
            result = producer.send_message_in_transaction(
                message(spec), guarded("execute", on_execute, TransactionStatus.UNKNOWN))
            emit("sent", index=index, keys=spec.get("keys"), status=int(result.status), msg_id=result.msg_id,
                 offset=result.offset)
        except Exception as exc:
            emit("send_failed", index=index, keys=spec.get("keys"), error=str(exc))
    emit("done")
    serve_until_stopped(producer.shutdown)


if __name__ == "__main__":
    main({"transaction": transaction})
