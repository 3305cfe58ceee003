"""Test kit for the client SDK: in-process fakes, and the helpers of the black-box client tests.

The fakes speak the real wire protocol (RemotingServer) but hold nothing: a
FakeBroker answers sends from a script of response codes and records what it
got; a FakeNamesrv serves the routes a test gives it. They pin down the
client's own decisions (test_client_producer_logic.py).

The black-box tests run real processes (procs.py, the fixtures of
conftest.py) and share ``FAST_CLIENT`` and ``make_topic`` from here.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson

from procs import wait_for
from rocketmesh import Admin, MQError
from rocketmesh.client.consumer import PullConsumer
from rocketmesh.model.codec import decode_batch, encode_host, encode_message_id
from rocketmesh.model.message import MessageExt
from rocketmesh.remoting import (
    RemotingCommand,
    RemotingServer,
    RequestCode,
    RequestContext,
    ResponseCode,
    response_to,
)


class FakeBroker:
    """Answers SEND_MESSAGE / SEND_BATCH_MESSAGE / HEARTBEAT / UNREGISTER_CLIENT.

    ``script`` holds response codes for the next sends (SUCCESS when empty);
    the code ``None`` means "do not answer" (the sender times out).
    """

    def __init__(self, name: str, cluster: str = "c1") -> None:
        self.name = name
        self.cluster = cluster
        self.server = RemotingServer("127.0.0.1:0", f"fake-{name}")
        self.script: collections.deque[int | None] = collections.deque()
        self.sends: list[tuple[dict[str, Any], bytes, bool]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.unregisters: list[dict[str, Any]] = []
        self._offsets: dict[int, itertools.count] = collections.defaultdict(itertools.count)
        self._phys = itertools.count(0, 100)
        self._lock = threading.Lock()
        self.server.register(RequestCode.SEND_MESSAGE, self._send)
        self.server.register(RequestCode.SEND_BATCH_MESSAGE, self._send)
        self.server.register(RequestCode.HEART_BEAT, self._heartbeat)
        self.server.register(RequestCode.UNREGISTER_CLIENT, self._unregister)
        self.server.start()
        self.addr = f"127.0.0.1:{self.server.port}"
        self._host = encode_host("127.0.0.1", self.server.port)

    def stop(self) -> None:
        self.server.stop(0.5)

    def _send(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand | None:
        with self._lock:
            self.sends.append((dict(cmd.ext), cmd.body, cmd.is_oneway))
            code = self.script.popleft() if self.script else ResponseCode.SUCCESS
        if code is None:
            return None  # an inline handler returning None answers later: here, never
        if code not in (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                        ResponseCode.SLAVE_NOT_AVAILABLE):
            return response_to(cmd, code, f"scripted {ResponseCode(code).name} from {self.name}")
        qid = cmd.ext["queueId"]
        n = len(decode_batch(cmd.ext["topic"], cmd.body)) if cmd.ext.get("batch") else 1
        ids = []
        first = None
        for _ in range(n):
            off = next(self._offsets[qid])
            first = off if first is None else first
            ids.append(encode_message_id(self._host, next(self._phys)))
        return response_to(cmd, code, None, {"msgId": ",".join(ids), "queueId": qid, "queueOffset": first})

    def _heartbeat(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.heartbeats.append(orjson.loads(cmd.body))
        return response_to(cmd, ResponseCode.SUCCESS)

    def _unregister(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        self.unregisters.append(dict(cmd.ext))
        return response_to(cmd, ResponseCode.SUCCESS)

    def sent_topics(self) -> list[str]:
        return [ext["topic"] for ext, _, _ in self.sends]


class FakeNamesrv:
    """Serves GET_ROUTEINFO_BY_TOPIC / GET_BROKER_CLUSTER_INFO from ``routes``."""

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, Any]] = {}
        self.brokers: dict[str, FakeBroker] = {}
        self.route_requests: list[str] = []
        self.server = RemotingServer("127.0.0.1:0", "fake-namesrv")
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        self.server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster)
        self.server.start()
        self.addr = f"127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        self.server.stop(0.5)

    def add_topic(self, topic: str, brokers: list[FakeBroker], queues: int = 4, perm: int = 6) -> None:
        for b in brokers:
            self.brokers[b.name] = b
        self.routes[topic] = {
            "queueDatas": [{"brokerName": b.name, "readQueueNums": queues, "writeQueueNums": queues, "perm": perm,
                            "topicSysFlag": 0} for b in brokers],
            "brokerDatas": [{"cluster": b.cluster, "brokerName": b.name, "brokerAddrs": {"0": b.addr}}
                            for b in brokers],
        }

    def add_dead_broker(self, topic: str, name: str, addr: str, queues: int = 4) -> None:
        route = self.routes[topic]
        route["queueDatas"].append({"brokerName": name, "readQueueNums": queues, "writeQueueNums": queues,
                                    "perm": 6, "topicSysFlag": 0})
        route["brokerDatas"].append({"cluster": "c1", "brokerName": name, "brokerAddrs": {"0": addr}})

    def _route(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        topic = cmd.ext["topic"]
        self.route_requests.append(topic)
        route = self.routes.get(topic)
        if route is None:
            return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, f"no route info of topic {topic}")
        return response_to(cmd, ResponseCode.SUCCESS, body=orjson.dumps(route))

    def _cluster(self, cmd: RemotingCommand, ctx: RequestContext) -> RemotingCommand:
        table = {b.name: {"cluster": b.cluster, "brokerName": b.name, "brokerAddrs": {"0": b.addr}}
                 for b in self.brokers.values()}
        clusters: dict[str, list[str]] = collections.defaultdict(list)
        for b in self.brokers.values():
            clusters[b.cluster].append(b.name)
        return response_to(cmd, ResponseCode.SUCCESS,
                           body=orjson.dumps({"brokerAddrTable": table, "clusterAddrTable": clusters}))


# --- helpers of the black-box SDK tests (real processes: see procs.py and conftest.py) ---

#: Producer and consumer settings that notice a joined, left or restarted service within a second or two.
FAST_CLIENT = dict(heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000)


def make_topic(admin: Admin, topic: str, queues: int = 4, timeout_s: float = 30.0, **kw: Any) -> None:
    """Create ``topic`` with ``queues`` read and write queues, or grow it to that many (``kw``: the rest of
    ``Admin.create_topic``'s arguments, ``perm`` say), and wait until the name servers route it with them."""
    admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues, **kw)
    admin.wait_topic_route(topic, timeout_s)
    wait_for(lambda: any(q.read_queue_nums == queues for q in admin.topic_route(topic).queue_datas), timeout_s,
             f"the route of {topic} with {queues} queues")


def quietly(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` for wait_for: an SDK error (say, a group not online yet) counts as "not yet"."""
    def call() -> object:
        try:
            return fn()
        except MQError:
            return None
    return call


def refused_with(fn: Callable[[], object], code: int) -> Callable[[], bool]:
    """``fn`` for wait_for: done once it raises an SDK error with response code ``code`` (a group whose last
    client left, say)."""
    def call() -> bool:
        try:
            fn()
        except MQError as exc:
            return exc.response_code == code
        return False
    return call


def read_back(namesrv: Any, topic: str, expected: int, timeout_s: float = 30.0) -> dict[tuple[int, int], MessageExt]:
    """Every stored message of ``topic`` by (queue id, queue offset), read from the first offset of each queue
    with a PullConsumer (each once: one read twice fails); ``namesrv`` is the name server process. Reads until
    ``expected`` are in and a poll brings nothing more, at most ``timeout_s``."""
    got: dict[tuple[int, int], MessageExt] = {}
    with PullConsumer(f"reader-{topic}", namesrv.addr, instance_name=f"reader-{topic}", pull_batch_size=32,
                      consume_from="CONSUME_FROM_FIRST_OFFSET") as c:
        c.assign(c.fetch_message_queues(topic))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = c.poll(timeout_ms=300)
            for m in batch:
                key = (m.queue_id, m.queue_offset)
                assert key not in got, f"read twice: {key}"
                got[key] = m
            if not batch and len(got) >= expected:
                break
    return got


def scrape(url: str) -> str:
    """The text a Prometheus endpoint serves at ``url``."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of ``name`` whose labels include ``labels`` (summed over the others); 0 when absent."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total
