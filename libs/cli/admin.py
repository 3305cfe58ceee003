"""``rocketmesh admin <command>`` (mqadmin's commands, kebab-case), ``rocketmesh produce`` and
``rocketmesh consume`` (the quickstart producer and consumer).

Every command takes ``-n host:port;host:port`` (default: NAMESRV_ADDR). Errors
print one line naming what went wrong and exit 1.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Unpack

# Where --access-key / --secret-key default from: the names the services read their own keys from.
from rocketmesh.acl.config import ACCESS_KEY_ENV, SECRET_KEY_ENV
from rocketmesh.client import Admin, MQBrokerError, MQClientError, MQError, Producer
from rocketmesh.client.instance import Credentials
from rocketmesh.client.running_info import PROP_CLIENT_VERSION, ConsumerRunningInfo
from rocketmesh.client.trace.trace_data import TraceMessageType, TraceRecord, TraceType
from rocketmesh.model.message import Message, MessageConst, MessageExt
from rocketmesh.model.topics import DLQ_GROUP_TOPIC_PREFIX, TRACE_TOPIC
from rocketmesh.remoting import ResponseCode
from rocketmesh.runtime.config import camel_case
from rocketmesh.runtime.help import HelpFormatter

#: RocketMQ's timestamp format of resetOffsetByTime: yyyy-MM-dd#HH:mm:ss:SSS (local time).
RESET_TIME_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"


def _ts(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def _ts_seconds(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def parse_bool(text: str, option: str) -> bool:
    """``true`` or ``false`` (any case) as a bool; MQClientError naming ``option`` otherwise."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise MQClientError(f"{option} takes true or false, got {text!r}", ResponseCode.MESSAGE_ILLEGAL)
    return value == "true"


def parse_timestamp(text: str) -> int:
    """A reset-offset time as epoch ms: ``now`` (-1, the end of each queue), epoch ms, or
    ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time. MQClientError for anything else."""
    value = text.strip()
    if value == "now":
        return -1
    if value.isdigit():
        return int(value)
    try:
        return int(datetime.datetime.strptime(value, RESET_TIME_FORMAT).timestamp() * 1000)
    except ValueError:
        raise MQClientError(f"bad timestamp {text!r}: give now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS",
                            ResponseCode.MESSAGE_ILLEGAL) from None


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
    """One line a broker: its role, where its commitlog ends and, for a slave, how far behind its master."""
    print(f"{'#Cluster Name':<20}{'#Broker Name':<20}{'#BID':>5}  {'#Addr':<24}{'#Role':<14}{'#Version':<18}"
          f"{'#InTPS(LOAD)':>14}{'#MaxOffset':>16}{'#HALagBytes':>14}")
    brokers = admin.cluster_list(a.cluster)
    infos: dict[str, dict] = {}
    for b in brokers:
        try:
            infos[b.addr] = admin.broker_runtime_info(b.addr)
        except MQError:
            pass
    masters = {b.broker_name: infos.get(b.addr, {}) for b in brokers if b.is_master}
    for b in brokers:
        info = infos.get(b.addr)
        if info is None:
            print(f"{b.cluster:<20}{b.broker_name:<20}{b.broker_id:>5}  {b.addr:<24}{'-':<14}{'(unreachable)':<18}")
            continue
        end = info.get("commitLogMaxOffset", 0)
        master_end = masters.get(b.broker_name, {}).get("commitLogMaxOffset")
        lag = "-" if b.is_master or master_end is None else str(max(0, master_end - end))
        print(f"{b.cluster:<20}{b.broker_name:<20}{b.broker_id:>5}  {b.addr:<24}{info.get('brokerRole', '-'):<14}"
              f"{info.get('brokerVersionDesc', '-'):<18}{info.get('putTps', '0').split()[0]:>14}{end:>16}{lag:>14}")


def broker_status(a: argparse.Namespace, admin: Admin) -> None:
    for k, v in sorted(admin.broker_runtime_info(a.broker_addr).items()):
        print(f"{k:<36}: {v}")


def stats(a: argparse.Namespace, admin: Admin) -> None:
    """Each broker's metrics, one Prometheus-style line a sample (the numbers its /metrics serves)."""
    addrs = [a.broker_addr] if a.broker_addr else [b.addr for b in admin.cluster_list(a.cluster)]
    for addr in addrs:
        url, samples = admin.broker_metrics(addr)
        print(f"# broker {addr}  prometheus: {url or '(metricsExporterType=DISABLE)'}")
        for s in samples:
            if a.metric and a.metric not in s["name"]:
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s["labels"].items())
                              if k not in ("cluster", "node_type", "node_id"))
            value = s["value"]
            shown = int(value) if float(value).is_integer() else round(value, 3)
            print(f"{s['name']}{{{labels}}} {shown}" if labels else f"{s['name']} {shown}")


def query_msg_by_id(a: argparse.Namespace, admin: Admin) -> None:
    _print_message(admin.query_msg_by_id(a.msg_id, a.topic))


def query_msg_by_key(a: argparse.Namespace, admin: Admin) -> None:
    msgs = admin.query_msg_by_key(a.topic, a.key, a.max_num)
    print(f"{'#Message ID':<34}{'#QID':>5}{'#Offset':>10}  #Store Time")
    for m in msgs:
        print(f"{m.msg_id:<34}{m.queue_id:>5}{m.queue_offset:>10}  {_ts(m.store_timestamp)}")
    if not msgs:
        print(f"no message with key {a.key!r} in topic {a.topic}")


def _trace_status(r: TraceRecord) -> str:
    if r.type is TraceType.SubAfter and not r.success:
        return f"failed({r.context_code.name})"
    return "success" if r.success else "failed"


def query_msg_trace_by_id(a: argparse.Namespace, admin: Admin) -> None:
    records = admin.query_msg_trace(a.msg_id, a.trace_topic, a.max_num, a.begin_timestamp, a.end_timestamp)
    if not records:
        print(f"no trace of message {a.msg_id} in topic {a.trace_topic or TRACE_TOPIC}")
        return
    row = "{:<15} {:<32} {:<16} {:<24} {:>9}  {}"
    pubs = [r for r in records if r.type is TraceType.Pub]
    for r in pubs:
        print(row.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"))
        print(row.format("Pub", r.group, r.client_host, _ts(r.timestamp), f"{r.cost_ms}ms", _trace_status(r)))
        kind = {TraceMessageType.Delay_Msg: "delayed", TraceMessageType.Trans_Msg_Half: "transactional (half)"
                }.get(r.msg_type, "normal")
        where = f"broker {r.store_host or '-'}"
        if r.offset_msg_id:
            try:
                where += f", queue {admin.view_message(r.offset_msg_id).queue_id}"
            except MQError:
                pass
        print(f"  topic {r.topic}, tags [{r.tags or ''}], keys [{r.keys or ''}], {kind} message, {where}, "
              f"offset msg id {r.offset_msg_id or '-'}")
        print()
    for r in (r for r in records if r.type is TraceType.EndTransaction):
        print(row.format("#Type", "#ProducerGroup", "#ClientHost", "#Time", "#FromCheck", "#TransactionState"))
        print(row.format("EndTransaction", r.group, r.client_host, _ts(r.timestamp), str(r.from_transaction_check),
                         r.transaction_state))
        print()
    # A SubAfter names no group: it is the group of the SubBefore of the same listener call.
    before = {r.request_id: r for r in records if r.type is TraceType.SubBefore}
    by_group: dict[str, list[tuple[TraceRecord, TraceRecord]]] = {}
    for r in records:
        if r.type is TraceType.SubAfter and r.request_id in before:
            b = before[r.request_id]
            by_group.setdefault(b.group, []).append((b, r))
    for group, calls in by_group.items():
        print(row.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status")
              + "  #Retry")
        for b, r in calls:
            print(row.format("Sub", group, r.client_host, _ts(b.timestamp), f"{r.cost_ms}ms", _trace_status(r))
                  + f"  {b.retry_times}")
        print()
    waiting = [b for rid, b in before.items() if not any(r.request_id == rid for r in records
                                                       if r.type is TraceType.SubAfter)]
    for b in waiting:
        print(f"SubBefore without an outcome yet: group {b.group}, client {b.client_host}, since {_ts(b.timestamp)}")


def send_message(a: argparse.Namespace, admin: Admin) -> None:
    with Producer(a.group, namesrv=admin.namesrv_addrs, **credentials(a)) as producer:
        r = producer.send(Message(a.topic, a.body, tags=a.tags, keys=a.keys))
    print(f"{'#Broker Name':<20}{'#QID':>5}{'#Send Result':>16}  #MsgId")
    print(f"{r.message_queue.broker_name:<20}{r.message_queue.queue_id:>5}{r.send_status.value:>16}  {r.msg_id}")


def consumer_progress(a: argparse.Namespace, admin: Admin) -> None:
    stats = admin.consume_stats(a.group, a.topic)
    print(f"{'#Topic':<32}  {'#Broker Name':<24}  {'#QID':<4}  {'#Broker Offset':<16}  {'#Consumer Offset':<16}  "
          f"{'#Diff':<12}  #LastTime")
    for mq, w in stats.offset_table.items():
        print(f"{mq.topic:<32}  {mq.broker_name:<24}  {mq.queue_id:<4}  {w.broker_offset:<16}  "
              f"{w.consumer_offset:<16}  {w.diff:<12}  {_ts_seconds(w.last_timestamp)}")
    print()
    print(f"Consume TPS: {stats.consume_tps:.2f}")
    print(f"Diff Total: {stats.total_diff()}")


def consumer_connection(a: argparse.Namespace, admin: Admin) -> None:
    cc = admin.consumer_connection(a.group)
    print(f"{'#No':<5}{'#ClientId':<40}  {'#ClientAddr':<24}  {'#Language':<10}  #LastHeartbeat")
    for i, c in enumerate(cc.connections, 1):
        print(f"{i:03d}  {c.client_id:<40}  {c.client_addr:<24}  {c.language:<10}  "
              f"{_ts(c.last_update_timestamp)}")
    print()
    print("Subscriptions:")
    print(f"{'#No':<5}{'#Topic':<40}  {'#Type':<6}  #SubExpression")
    for i, (topic, sub) in enumerate(cc.subscriptions.items(), 1):
        print(f"{i:03d}  {topic:<40}  {sub.get('expressionType') or 'TAG':<6}  {sub.get('subString', '')}")
    print()
    print(f"ConsumeType: {cc.consume_type or '-'}")
    print(f"MessageModel: {cc.message_model or '-'}")
    print(f"ConsumeFromWhere: {cc.consume_from_where or '-'}")


def consumer_status(a: argparse.Namespace, admin: Admin) -> None:
    """RocketMQ's consumerStatus: with -i one client's running info in full, else a line per client of the
    group and what looks wrong (different subscriptions, stuck queues)."""
    if a.client_id:
        _print_running_info(admin.consumer_running_info(a.group, a.client_id, a.jstack))
        return
    infos = {cid: admin.consumer_running_info(a.group, cid, a.jstack) for cid in admin.consumer_ids(a.group)}
    if not infos:
        raise MQClientError(f"the consumer group {a.group} is not online", ResponseCode.CONSUMER_NOT_ONLINE)
    print(f"{'#Index':<8}{'#ClientId':<40}  {'#Version':<20}  {'#Queues':>8}  {'#Cached':>8}")
    for i, (cid, info) in enumerate(infos.items(), 1):
        cached = sum(pq.cached_msg_count for pq in info.mq_table.values())
        print(f"{i:03d}     {cid:<40}  {info.properties.get(PROP_CLIENT_VERSION, '-'):<20}  "
              f"{len(info.mq_table):>8}  {cached:>8}")
    print()
    subscriptions = {frozenset((s.topic, s.sub_string, s.expression_type.value) for s in info.subscriptions)
                     for info in infos.values()}
    print("Same subscription in the same group of consumer" if len(subscriptions) == 1
          else "WARN: Different subscription in the same group of consumer!!!")
    for cid, info in infos.items():
        for mq, why in info.stalled_queues().items():
            print(f"{cid} {mq} {why}")
        if a.jstack and info.jstack:
            print(f"\n#Consumer jstack# {cid}\n{info.jstack}")


def _print_running_info(info: ConsumerRunningInfo) -> None:
    print("#Consumer Properties#")
    for k, v in sorted(info.properties.items()):
        print(f"{k:<40}: {v}")
    print("\n\n#Consumer Subscription#")
    for i, s in enumerate(info.subscriptions, 1):
        print(f"{i:03d} Topic: {s.topic:<40} Type: {s.expression_type.value:<6} SubExpression: {s.sub_string}")
    print("\n\n#Consumer Offset#")
    print(f"{'#Topic':<32}  {'#Broker Name':<24}  {'#QID':<4}  #Consumer Offset")
    for mq, pq in info.mq_table.items():
        print(f"{mq.topic:<32}  {mq.broker_name:<24}  {mq.queue_id:<4}  {pq.commit_offset}")
    print("\n\n#Consumer MQ Detail#")
    print(f"{'#Topic':<32}  {'#Broker Name':<24}  {'#QID':<4}  {'#Cached':>7}  {'#Cached Offsets':<20}  "
          f"{'#Locked':<7}  {'#Last Pull':<23}  #Last Consume")
    for mq, pq in info.mq_table.items():
        span = f"{pq.cached_msg_min_offset}..{pq.cached_msg_max_offset}" if pq.cached_msg_count else "-"
        print(f"{mq.topic:<32}  {mq.broker_name:<24}  {mq.queue_id:<4}  {pq.cached_msg_count:>7}  {span:<20}  "
              f"{str(pq.locked).lower():<7}  {_ts(pq.last_pull_timestamp):<23}  {_ts(pq.last_consume_timestamp)}")
    if info.status_table:
        print("\n\n#Consumer RT&TPS#")
        for topic, status in sorted(info.status_table.items()):
            print(f"{topic:<32}  " + "  ".join(f"{k}={v}" for k, v in sorted(status.items())))
    if info.jstack:
        print("\n\n#Consumer jstack#")
        print(info.jstack)


def consume_message_directly(a: argparse.Namespace, admin: Admin) -> None:
    r = admin.consume_message_directly(a.group, a.client_id, a.msg_id, a.topic)
    result = r.consume_result.value if r.consume_result is not None else "null"
    print(f"ConsumeMessageDirectlyResult [order={str(r.order).lower()}, autoCommit={str(r.auto_commit).lower()}, "
          f"consumeResult={result}, remark={r.remark if r.remark is not None else 'null'}, "
          f"spentTimeMills={r.spent_time_mills}]")


def reset_offset_by_time(a: argparse.Namespace, admin: Admin) -> None:
    timestamp = parse_timestamp(a.timestamp)
    force = parse_bool(a.force, "-f/--force") if a.force is not None else True
    offsets = admin.reset_offset_by_time(a.group, a.topic, timestamp, force)
    print(f"reset offsets of group [{a.group}] in topic [{a.topic}] to timestamp [{a.timestamp}] "
          f"({timestamp} ms), force [{str(force).lower()}]")
    print(f"{'#brokerName':<32}  {'#queueId':<10}  #offset")
    for mq, offset in offsets.items():
        print(f"{mq.broker_name:<32}  {mq.queue_id:<10}  {offset}")


def update_sub_group(a: argparse.Namespace, admin: Admin) -> None:
    def flag(value: str | None, option: str, default: bool) -> bool:
        return default if value is None else parse_bool(value, option)

    config: dict[str, Any] = {
        "consume_enable": flag(a.consume_enable, "--consume-enable", True),
        "consume_from_min_enable": flag(a.consume_from_min_enable, "--consume-from-min-enable", True),
        "consume_broadcast_enable": flag(a.consume_broadcast_enable, "--consume-broadcast-enable", True),
        "notify_consumer_ids_changed_enable": flag(a.notify_consumer_ids_changed_enable,
                                                   "--notify-consumer-ids-changed-enable", True),
        "retry_queue_nums": a.retry_queue_nums,
        "retry_max_times": a.retry_max_times,
        "broker_id": a.broker_id,
        "which_broker_when_consume_slowly": a.which_broker_when_consume_slowly,
    }
    for addr in admin.update_subscription_group(a.group, broker_addr=a.broker_addr, cluster=a.cluster, **config):
        print(f"create or update subscription group [{a.group}] on {addr} success.")
    print(f"SubscriptionGroupConfig [groupName={a.group}, "
          + ", ".join(f"{camel_case(k)}={str(v).lower() if isinstance(v, bool) else v}" for k, v in config.items())
          + "]")


def delete_sub_group(a: argparse.Namespace, admin: Admin) -> None:
    admin.delete_subscription_group(a.group, a.cluster)
    print(f"delete subscription group [{a.group}] from cluster [{a.cluster or 'all'}] success.")


def list_dlq(a: argparse.Namespace, admin: Admin) -> None:
    letters = admin.dlq_messages(a.group, a.max_num)
    print(f"{'#Message ID':<34}{'#Original Topic':<28}{'#Reconsume':>11}  {'#Store Time':<25}#Body")
    for d in letters:
        print(f"{d.msg_id:<34}{d.original_topic:<28}{d.reconsume_times:>11}  {_ts(d.store_timestamp):<25}"
              f"{d.body_preview!r}")
    print(f"{len(letters)} message(s) in the dead-letter queue of group {a.group}"
          + (f" (first {a.max_num} shown)" if len(letters) >= a.max_num else ""))


def resend_dlq(a: argparse.Namespace, admin: Admin) -> None:
    results = admin.resend_dlq(a.group, None if a.all else a.msg_id)
    print(f"{'#Message ID':<34}{'#Topic':<28}#Result")
    failed = 0
    for r in results:
        if r.sent is not None:
            outcome = f"{r.sent.send_status.value} new msgId={r.sent.msg_id}"
        else:
            failed += 1
            outcome = f"FAILED {r.error}"
        print(f"{r.letter.msg_id:<34}{r.letter.original_topic:<28}{outcome}")
    if failed:
        raise MQClientError(f"{failed} of {len(results)} dead letters were not resent")
    print(f"resent {len(results)} message(s) of the dead-letter queue of group {a.group}")


def retry_history(a: argparse.Namespace, admin: Admin) -> None:
    copies = admin.retry_history(a.msg_id, a.group, a.topic)
    print(f"{'#Topic':<32}{'#Reconsume':>11}  {'#Store Time':<25}{'#Offset Msg ID':<34}#Note")
    for m in copies:
        real_topic = m.properties.get(MessageConst.REAL_TOPIC)
        note = ""
        if real_topic:
            note = f"parked for {real_topic} (delay level {m.properties.get(MessageConst.DELAY_TIME_LEVEL, '?')})"
        elif m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            note = "dead-lettered"
        print(f"{m.topic:<32}{m.reconsume_times:>11}  {_ts(m.store_timestamp):<25}{m.msg_id:<34}{note}")


def pending_half_messages(a: argparse.Namespace, admin: Admin) -> None:
    pending = admin.pending_half_messages(a.topic, a.max_num)
    print(f"{'#Transaction ID':<34}{'#Broker Name':<20}{'#QID':>5}  {'#Producer Group':<28}{'#Checks':>8}  #Born Time")
    for p in pending:
        print(f"{p.transaction_id:<34}{p.broker_name:<20}{p.queue_id:>5}  {p.producer_group:<28}{p.check_times:>8}  "
              f"{_ts(p.born_timestamp)}")
    print(f"{len(pending)} half message(s) of topic {a.topic} wait for their transaction's outcome")


Command = Callable[[argparse.Namespace, Admin], None]
Arguments = Callable[[argparse.ArgumentParser], None]
COMMANDS: dict[str, tuple[str, Command, Arguments]] = {}


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


@_command("stats", "brokers' metrics (rocketmq_messages_in_total, rocketmq_consumer_lag_messages, ...) "
                   "without Prometheus")
def _(p):
    p.add_argument("-b", "--broker-addr", help="one broker (default: every broker of the cluster list)")
    p.add_argument("-c", "--cluster")
    p.add_argument("-m", "--metric", help="only metrics whose name contains this")


@_command("query-msg-by-id", "a message by offset id (or by unique key with -t)")
def _(p):
    p.add_argument("-i", "--msg-id", required=True)
    p.add_argument("-t", "--topic")


@_command("query-msg-by-key", "messages of a topic by key")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-m", "--max-num", type=int, default=64)


@_command("query-msg-trace-by-id", "the message trace of a message: who sent it, who consumed it, when, "
                                   "how long, with what outcome")
def _(p):
    p.add_argument("-i", "--msg-id", required=True, help="the message's id (or its offset id)")
    p.add_argument("-t", "--trace-topic", help=f"the trace topic (default {TRACE_TOPIC})")
    p.add_argument("-b", "--begin-timestamp", type=int, default=0, help="stored from (epoch ms)")
    p.add_argument("-e", "--end-timestamp", type=int, help="stored until (epoch ms)")
    p.add_argument("-m", "--max-num", type=int, default=64, help="at most this many trace messages per broker")


@_command("send-message", "send one message")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True)
    p.add_argument("-k", "--keys")
    p.add_argument("-c", "--tags")
    p.add_argument("-g", "--group", default="rocketmesh-admin-producer")


@_command("consumer-progress", "a consumer group's offsets and lag per queue")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", help="only this topic (default: every topic the group consumes)")


@_command("consumer-connection", "a consumer group's running clients and subscriptions")
def _(p):
    p.add_argument("-g", "--group", required=True)


@_command("consumer-status", "a consumer group's clients as they see themselves: settings, subscriptions, "
                              "each queue's offsets and cached messages (asked through a broker)")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-i", "--client-id", help="this client in full (default: a line per client of the group)")
    p.add_argument("-s", "--jstack", action="store_true", help="with the clients' thread stacks")


@_command("consume-message-directly", "have one client of a group run a message through its listener now "
                                      "(nothing is retried or committed) and print the outcome")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-d", "--client-id", required=True, help="the client, as consumer-connection lists it")
    p.add_argument("-i", "--msg-id", required=True, help="the message's offset id (or its unique key with -t)")
    p.add_argument("-t", "--topic", help="the message's topic, to find it by unique key")


@_command("reset-offset-by-time", "move a consumer group's offsets in a topic to a point in time")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, help="now | epoch ms | yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", metavar="true|false",
                   help="true (default): every queue goes to the time; false: a queue only goes back, never forward")


@_command("update-sub-group", "create or update a subscription group on a broker or a cluster")
def _(p):
    p.add_argument("-g", "--group", required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("-b", "--broker-addr")
    where.add_argument("-c", "--cluster")
    p.add_argument("-s", "--consume-enable", metavar="true|false")
    p.add_argument("-m", "--consume-from-min-enable", metavar="true|false")
    p.add_argument("-d", "--consume-broadcast-enable", metavar="true|false")
    p.add_argument("-a", "--notify-consumer-ids-changed-enable", metavar="true|false")
    p.add_argument("-q", "--retry-queue-nums", type=int, default=1)
    p.add_argument("-r", "--retry-max-times", type=int, default=16)
    p.add_argument("-i", "--broker-id", type=int, default=0)
    p.add_argument("-w", "--which-broker-when-consume-slowly", type=int, default=1)


@_command("delete-sub-group", "delete a subscription group (and its offsets) from the brokers")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-c", "--cluster")


@_command("list-dlq", "messages in a consumer group's dead-letter queue (%DLQ%<group>)")
def _(p):
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-m", "--max-num", type=int, default=100)


@_command("resend-dlq", "resend dead-lettered messages of a group to their original topic")
def _(p):
    p.add_argument("-g", "--group", required=True)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("-i", "--msg-id", help="one message: its id (unique key) or offset id")
    which.add_argument("-a", "--all", action="store_true", help="every message in the dead-letter queue")


@_command("retry-history", "every stored copy of a message: original, retries, dead letter")
def _(p):
    p.add_argument("-i", "--msg-id", required=True, help="the message's id (unique key) or any copy's offset id")
    p.add_argument("-g", "--group", help="only this group's retry and dead-letter topics (default: every group's)")
    p.add_argument("-t", "--topic", help="the original topic (found from the copies when not given)")


@_command("pending-half-messages", "half messages of a topic whose transaction is not decided yet")
def _(p):
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-m", "--max-num", type=int, default=100, help="at most this many per broker (default 100)")


def run_admin(a: argparse.Namespace) -> int:
    _, fn, _ = COMMANDS[a.admin_command]
    try:
        with Admin(namesrv=a.namesrv, **credentials(a)) as admin:
            fn(a, admin)
    except MQError as exc:
        print(f"{a.admin_command}: {exc}", file=sys.stderr)
        return 1
    return 0


def run_produce(a: argparse.Namespace) -> int:
    """RocketMQ's quickstart Producer: N messages "Hello RocketMQ i", one SendResult each."""
    try:
        with Producer(a.group, namesrv=a.namesrv, **credentials(a)) as producer:
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


def require_topic(namesrv: str | None, topic: str, **account: Unpack[Credentials]) -> None:
    """MQClientError(TOPIC_NOT_EXIST) saying what to do when no name server has a route for ``topic``;
    ``account``: the ACL keys (access_key, secret_key) to ask with."""
    with Admin(namesrv=namesrv, **account) as admin:
        try:
            admin.topic_route(topic)
        except MQBrokerError as exc:
            if exc.response_code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            raise MQClientError(f"topic {topic} does not exist: no name server has a route for it. Create it "
                                f"(rocketmesh admin update-topic -t {topic}) or send to it first (brokers with "
                                "autoCreateTopicEnable create it)", ResponseCode.TOPIC_NOT_EXIST) from None


def run_consume(a: argparse.Namespace) -> int:
    """RocketMQ's quickstart Consumer: a push consumer printing one line per message.

    Stops, shutting the consumer down cleanly and exiting 0, after ``--count``
    messages, after ``--timeout`` seconds in which no message came (an idle
    timeout, counted from the start until the first message), or on Ctrl-C /
    SIGTERM. Messages are consumed on one thread, so lines come in arrival
    order; a message past ``--count`` is not acknowledged, so the group gets
    it again next time.
    """
    from rocketmesh.client.consumer import ConsumeConcurrentlyStatus, PushConsumer

    if a.count < 0 or (a.timeout is not None and a.timeout <= 0):
        print("consume: --count must be >= 0 and --timeout > 0", file=sys.stderr)
        return 1
    if a.sql is not None and a.subscription != "*":
        print("consume: give either -s (tags) or --sql, not both", file=sys.stderr)
        return 1
    stop = threading.Event()
    received = 0
    last_message = time.monotonic()
    lock = threading.Lock()

    def on_messages(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        nonlocal received, last_message
        for m in msgs:
            with lock:
                over = bool(a.count) and received >= a.count
                if not over:
                    received += 1
                    last_message = time.monotonic()
                    body = m.body.decode("utf-8", errors="replace")
                    print(f"Receive New Messages: {m.unique_key or m.msg_id} {m.topic} {m.queue_id} "
                          f"{m.queue_offset} {m.tags or ''} {body}", flush=True)
                    if a.count and received >= a.count:
                        stop.set()
            if over:
                # A message past --count is not acknowledged: held until the consumer is shutting down,
                # a failure then leaves it unconsumed (not sent back), so the offsets persisted at
                # shutdown stop before it and the group's next run starts there.
                while consumer is not None and consumer.running:
                    time.sleep(0.05)
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consume_from = "CONSUME_FROM_FIRST_OFFSET" if a.from_ == "first" else "CONSUME_FROM_LAST_OFFSET"
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    consumer = None
    try:
        consumer = PushConsumer(a.group, a.namesrv, consume_from=consume_from, consume_thread_nums=1,
                                **credentials(a))
        consumer.subscribe(a.topic, a.subscription, sql=a.sql)  # a bad expression is refused first, locally
        require_topic(a.namesrv, a.topic, **credentials(a))
        consumer.register_listener(on_messages)
        consumer.start()
        print(f"Consumer Started. group={a.group} topic={a.topic}", file=sys.stderr, flush=True)
        while not stop.wait(0.1):
            if a.timeout is not None and time.monotonic() - last_message >= a.timeout:
                print(f"consume: no message for {a.timeout:g} s; received {received}", file=sys.stderr)
                break
    except MQError as exc:
        print(f"consume: {exc}", file=sys.stderr)
        return 1
    finally:
        if consumer is not None:
            # Short: the only listener that can still be running is one holding back a message past --count,
            # which returns as soon as shutdown begins.
            consumer.shutdown(timeout_s=2.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def credentials(a: argparse.Namespace) -> Credentials:
    """The ACL keywords (access_key, secret_key) of a command's --access-key / --secret-key."""
    return Credentials(access_key=getattr(a, "access_key", None) or None,
                       secret_key=getattr(a, "secret_key", None) or None)


def add_admin_commands(sub: Any) -> None:
    """Add ``admin``, ``produce`` and ``consume`` to the ``rocketmesh`` parser."""
    def command(parent: Any, name: str, text: str) -> argparse.ArgumentParser:
        # argparse %-formats help strings (a topic like %DLQ%<group> must not be read as a format).
        p = parent.add_parser(name, help=text.replace("%", "%%"), description=text[0].upper() + text[1:] + ".",
                              formatter_class=HelpFormatter)
        p.add_argument("-n", "--namesrv", help="name server list host:port;host:port (default: NAMESRV_ADDR)")
        p.add_argument("--access-key", default=os.environ.get(ACCESS_KEY_ENV),
                       help=f"ACL account to sign requests with (default: {ACCESS_KEY_ENV})")
        p.add_argument("--secret-key", default=os.environ.get(SECRET_KEY_ENV),
                       help=f"its secret key (default: {SECRET_KEY_ENV}, which keeps it out of the process list)")
        return p

    admin = sub.add_parser("admin", help="mqadmin's commands: update-topic, topic-status, query-msg-by-key ...",
                           description="mqadmin's commands, kebab-case. Each takes -n host:port;host:port "
                                       "(default: NAMESRV_ADDR); rocketmesh admin COMMAND --help says more.",
                           formatter_class=HelpFormatter)
    cmds = admin.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    for name, (help_text, _fn, setup) in COMMANDS.items():
        setup(command(cmds, name, help_text))
    admin.set_defaults(func=run_admin)

    produce = command(sub, "produce", "the quickstart producer: send N messages \"Hello RocketMQ i\", print each "
                                      "SendResult")
    produce.add_argument("-t", "--topic", default="TopicTest", help="the topic to send to")
    produce.add_argument("-c", "--count", type=int, default=10, help="how many messages to send")
    produce.add_argument("--tags", default="TagA", help="the tag of every message")
    produce.add_argument("-g", "--group", default="please_rename_unique_group_name", help="the producer group")
    produce.add_argument("--interval-ms", type=int, default=0, help="pause between sends")
    produce.set_defaults(func=run_produce)

    consume = command(sub, "consume", "the quickstart consumer: print each message a push consumer of a group "
                                      "receives; offsets are committed when it stops")
    consume.add_argument("-t", "--topic", default="TopicTest", help="the topic to consume")
    consume.add_argument("-g", "--group", default="please_rename_unique_group_name_4", help="the consumer group")
    consume.add_argument("-s", "--subscription", default="*", help='tags, e.g. "TagA || TagB"')
    consume.add_argument("--sql", help="a SQL92 filter on message properties instead of tags")
    consume.add_argument("--from", dest="from_", choices=("first", "last"), default="first",
                         help="where a group with no stored offset starts")
    consume.add_argument("-c", "--count", type=int, default=0,
                         help="exit after N messages (default 0: run until stopped)")
    consume.add_argument("--timeout", type=float, help="exit after SECONDS without a message")
    consume.set_defaults(func=run_consume)
