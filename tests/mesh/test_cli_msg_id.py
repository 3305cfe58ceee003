"""The two ids a send prints: the client's ``msgId`` needs its topic, the broker's ``offsetMsgId`` does not;
asking for the first without a topic says exactly that. On the session's shared mesh (conftest.py's
``mesh_admin``)."""

from __future__ import annotations

import pytest

from procs import run_cli, wait_for
from rocketmesh import Admin, Message, Producer
from rocketmesh.client import MQClientError


def test_query_by_client_message_id_asks_for_the_topic(rocketmesh_namesrv: str, mesh_producer: Producer,
        mesh_admin: Admin) -> None:
    sent = mesh_producer.send(Message("IdTopic", "find me", keys="k1"))
    without = run_cli("admin", "query-msg-by-id", "-n", rocketmesh_namesrv, "-i", sent.msg_id)
    assert without.returncode == 1
    assert "client message id" in without.stderr and f"-i {sent.msg_id} -t TOPIC" in without.stderr
    assert "port" not in without.stderr.lower()

    def found() -> str:
        shown = run_cli("admin", "query-msg-by-id", "-n", rocketmesh_namesrv, "-i", sent.msg_id, "-t", "IdTopic")
        return shown.stdout if shown.returncode == 0 else ""
    assert "find me" in wait_for(found, 10, "the message found by its client id")

    by_offset = run_cli("admin", "query-msg-by-id", "-n", rocketmesh_namesrv, "-i", sent.offset_msg_id)
    assert by_offset.returncode == 0 and "find me" in by_offset.stdout, by_offset.stderr


def test_view_message_of_a_client_message_id_says_what_it_is(mesh_producer: Producer, mesh_admin: Admin) -> None:
    sent = mesh_producer.send(Message("IdTopic", "view me"))
    with pytest.raises(MQClientError, match="client message id") as err:
        mesh_admin.view_message(sent.msg_id)
    assert "query_msg_by_id(msg_id, topic)" in str(err.value)
    assert mesh_admin.view_message(sent.offset_msg_id).body == b"view me"
