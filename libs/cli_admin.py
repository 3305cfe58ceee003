"""``rocketmesh admin <command>`` (mqadmin's commands, kebab-case) and ``rocketmesh produce``.

Every command takes ``-n host:port;host:port`` (default: NAMESRV_ADDR). Errors
print one line naming what went wrong and exit 1.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from typing import Any, Callable

from rocketmesh.client import Admin, MQError, Producer
from rocketmesh.message import Message, MessageExt


def _ts(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def _print_message(m: MessageExt) -> None:
    body = m.body.decode("utf-8", errors="replace")
    print(f"OffsetID:            {m.msg_id}")
    print(f"Topic:               {m.topic}")
    print(f"Tags:                [{m.tags or ''}]")
    print(f"Keys:                [{m.keys or ''}]")
    print(f"Queue ID:            {m.queue_id}")
    print(f"Queue Offset:        {m.queue_offset}")
    print(f"CommitLog Offset:    {m.commitlog_offset}")
    print(f"Reconsume Times:     {m.reconsume_times}")
    print(f"Born Timestamp:      {_ts(m.born_timestamp)}")
    print(f"Store Timestamp:     {_ts(m.store_timestamp)}")
    print(f"Born Host:           {m.born_host}")
    print(f"Store Host:          {m.store_host}")
    print(f"System Flag:         {m.sys_flag}")
    print(f"Properties:          {m.properties}")
    print(f"Message Body:        {body[:2000]}")


def update_topic(a: argparse.Namespace, admin: Admin) -> None:
    done = admin.create_topic(a.topic, a.read_queue_nums, a.write_queue_nums, a.perm, a.broker_addr, a.cluster,
                              order=a.order)
    for addr in done:
        print(f"create topic to {addr} success.")
    print(f"TopicConfig [topicName={a.topic}, readQueueNums={a.read_queue_nums}, "
          f"writeQueueNums={a.write_queue_nums}, perm={a.perm}, order={a.order}]")


def delete_topic(a: argparse.Namespace, admin: Admin) -> None:
    admin.delete_topic(a.topic, a.cluster)
    print(f"delete topic [{a.topic}] from cluster [{a.cluster or 'all'}] success.")


def topic_list(a: argparse.Namespace, admin: Admin) -> None:
    for t in sorted(admin.topic_list()):
        print(t)


def topic_route(a: argparse.Namespace, admin: Admin) -> None:
    route = admin.topic_route(a.topic)
    print(f"{'#Broker Name':<24}{'#Read':>8}{'#Write':>8}{'#Perm':>8}")
    for q in route.queue_datas:
        print(f"{q.broker_name:<24}{q.read_queue_nums:>8}{q.write_queue_nums:>8}{q.perm:>8}")
    print(f"{'#Broker Name':<24}{'#Cluster':<20}#Addresses")
    for b in route.broker_datas:
        print(f"{b.broker_name:<24}{b.cluster:<20}{b.broker_addrs}")


def topic_status(a: argparse.Namespace, admin: Admin) -> None:
    print(f"{'#Broker Name':<24}{'#QID':>5}{'#Min Offset':>14}{'#Max Offset':>14}  #Last Updated")
    for mq, off in admin.topic_status(a.topic).items():
        print(f"{mq.broker_name:<24}{mq.queue_id:>5}{off.min_offset:>14}{off.max_offset:>14}  "
              f"{_ts(off.last_update_timestamp)}")


def cluster_list(a: argparse.Namespace, admin: Admin) -> None:
    print(f"{'#Cluster Name':<20}{'#Broker Name':<20}{'#BID':>5}  {'#Addr':<24}{'#Version':<18}{'#InTPS(LOAD)':>14}")
    for b in admin.cluster_list(a.cluster):
        try:
            info = admin.broker_runtime_info(b.addr)
            version = info.get("brokerVersionDesc", "-")
            tps = info.get("putTps", "0").split()[0]
        except MQError:
            version, tps = "(unreachable)", "-"
        print(f"{b.cluster:<20}{b.broker_name:<20}{b.broker_id:>5}  {b.addr:<24}{version:<18}{tps:>14}")


def broker_status(a: argparse.Namespace, admin: Admin) -> None:
    for k, v in sorted(admin.broker_runtime_info(a.broker_addr).items()):
        print(f"{k:<36}: {v}")


def query_msg_by_id(a: argparse.Namespace, admin: Admin) -> None:
    _print_message(admin.query_msg_by_id(a.msg_id, a.topic))


def query_msg_by_key(a: argparse.Namespace, admin: Admin) -> None:
    msgs = admin.query_msg_by_key(a.topic, a.key, a.max_num)
    print(f"{'#Message ID':<34}{'#QID':>5}{'#Offset':>10}  #Store Time")
    for m in msgs:
        print(f"{m.msg_id:<34}{m.queue_id:>5}{m.queue_offset:>10}  {_ts(m.store_timestamp)}")
    if not msgs:
        print(f"no message with key {a.key!r} in topic {a.topic}")


def send_message(a: argparse.Namespace, admin: Admin) -> None:
    with Producer(a.group, namesrv=admin.namesrv_addrs) as producer:
        r = producer.send(Message(a.topic, a.body, tags=a.tags, keys=a.keys))
    print(f"{'#Broker Name':<20}{'#QID':>5}{'#Send Result':>16}  #MsgId")
    print(f"{r.message_queue.broker_name:<20}{r.message_queue.queue_id:>5}{r.send_status.value:>16}  {r.msg_id}")


COMMANDS: dict[str, tuple[str, Callable[[argparse.Namespace, Admin], None], Callable[[argparse.ArgumentParser], None]]] = {}


def _command(name: str, help_text: str):
    def wrap(setup: Callable[[argparse.ArgumentParser], None]):
        COMMANDS[name] = (help_text, globals()[name.replace("-", "_")], setup)
        return setup
    return wrap


@_command("update-topic", "create or update a topic on a broker, a cluster or everywhere")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--read-queue-nums", type=int, default=8)
    p.add_argument("-w", "--write-queue-nums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, help="2 write, 4 read, 6 both")
    p.add_argument("-b", "--broker-addr")
    p.add_argument("-c", "--cluster")
    p.add_argument("-o", "--order", action="store_true")


@_command("delete-topic", "delete a topic from the brokers and name servers")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--cluster")


@_command("topic-list", "every topic the name servers know")
def _(p):
    pass


@_command("topic-route", "queue and broker data of a topic")
def _(p):
    p.add_argument("-t", "--topic", required=True)


@_command("topic-status", "min/max offset of each queue of a topic")
def _(p):
    p.add_argument("-t", "--topic", required=True)


@_command("cluster-list", "brokers of each cluster")
def _(p):
    p.add_argument("-c", "--cluster")


@_command("broker-status", "a broker's runtime info")
def _(p):
    p.add_argument("-b", "--broker-addr", required=True)


@_command("query-msg-by-id", "a message by offset id (or by unique key with -t)")
def _(p):
    p.add_argument("-i", "--msg-id", required=True)
    p.add_argument("-t", "--topic")


@_command("query-msg-by-key", "messages of a topic by key")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-m", "--max-num", type=int, default=64)


@_command("send-message", "send one message")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True)
    p.add_argument("-k", "--keys")
    p.add_argument("-c", "--tags")
    p.add_argument("-g", "--group", default="rocketmesh-admin-producer")


def run_admin(a: argparse.Namespace) -> int:
    _, fn, _ = COMMANDS[a.admin_command]
    try:
        with Admin(namesrv=a.namesrv) as admin:
            fn(a, admin)
    except MQError as exc:
        print(f"{a.admin_command}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_produce(a: argparse.Namespace) -> int:
    """RocketMQ's quickstart Producer: N messages "Hello RocketMQ i", one SendResult each."""
    try:
        with Producer(a.group, namesrv=a.namesrv) as producer:
            for i in range(a.count):
                r = producer.send(Message(a.topic, f"Hello RocketMQ {i}", tags=a.tags, keys=f"KEY{i}"))
                mq = r.message_queue
                print(f"SendResult [sendStatus={r.send_status.value}, msgId={r.msg_id}, "
                      f"offsetMsgId={r.offset_msg_id}, messageQueue=MessageQueue [topic={mq.topic}, "
                      f"brokerName={mq.broker_name}, queueId={mq.queue_id}], queueOffset={r.queue_offset}]")
                if a.interval_ms:
                    time.sleep(a.interval_ms / 1000)
    except MQError as exc:
        print(f"produce: {exc}", file=sys.stderr)
        return 1
    return 0


def add_admin_commands(sub: Any) -> None:
    """Add ``admin`` and ``produce`` to the ``rocketmesh`` parser."""
    admin = sub.add_parser("admin", help="mqadmin's commands: update-topic, topic-status, query-msg-by-key ...")
    cmds = admin.add_subparsers(dest="admin_command", required=True)
    for name, (help_text, _fn, setup) in COMMANDS.items():
        p = cmds.add_parser(name, help=help_text)
        p.add_argument("-n", "--namesrv", help="host:port;host:port (default: NAMESRV_ADDR)")
        setup(p)
    admin.set_defaults(func=run_admin)

    produce = sub.add_parser("produce", help="the quickstart producer: send N messages, print each SendResult")
    produce.add_argument("-n", "--namesrv", help="host:port;host:port (default: NAMESRV_ADDR)")
    produce.add_argument("-t", "--topic", default="TopicTest")
    produce.add_argument("-c", "--count", type=int, default=10)
    produce.add_argument("--tags", default="TagA")
    produce.add_argument("-g", "--group", default="please_rename_unique_group_name")
    produce.add_argument("--interval-ms", type=int, default=0)
    produce.set_defaults(func=run_produce)
