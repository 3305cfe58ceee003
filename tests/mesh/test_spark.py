"""The `rocketmesh` Spark data source against a real name server and broker, with a real local Spark.

One SparkSession (local[2,2]: two cores, and a failed task is retried once, as on a cluster) and one
mesh serve the whole module; each test uses topics and groups of its own.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from clientkit import make_topic
from procs import BrokerProcess, NamesrvProcess, run_cli, wait_for
from rocketmesh import Admin, ConsumeConcurrentlyStatus, Message, MessageQueue, Producer
from rocketmesh.client.consumer import PushConsumer

# The data source is the optional `spark` extra: without it, this module is one skip, not a collection error.
for _module in ("pyspark", "pyarrow"):
    pytest.importorskip(_module, reason=f"{_module} is not installed: the Spark tests need the spark extra "
                                        "(pip install 'rocketmesh[spark]')")

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

from pyspark.sql import SparkSession, functions as F  # noqa: E402

import rocketmesh.spark  # noqa: E402

#: Minutes of tests: scheduled first (tests/conftest.py).
pytestmark = pytest.mark.heavy

#: Bound of a streaming query's wait on this shared, busy machine.
QUERY_TIMEOUT_S = 120
#: How often a wait that runs a Spark job of its own looks again: each look is a job competing with the query
#: it waits for on the machine's cores.
SPARK_POLL_S = 1.0


@pytest.fixture(scope="module")
def mesh(tmp_path_factory) -> Iterator[tuple[NamesrvProcess, BrokerProcess]]:
    """A name server and a broker that filters by SQL92."""
    base = tmp_path_factory.mktemp("mesh")
    namesrv = NamesrvProcess(base / "namesrv").start()
    broker = BrokerProcess(base / "broker-a", namesrv.addr, enablePropertyFilter="true")
    try:
        broker.start(timeout_s=30)
        broker.wait_registered()
        yield namesrv, broker
    finally:
        broker.stop()
        namesrv.stop()


@pytest.fixture(scope="module")
def ns(mesh) -> str:
    return mesh[0].addr


@pytest.fixture(scope="module")
def admin(ns) -> Iterator[Admin]:
    with Admin(ns) as a:
        yield a


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    """The jobs' session (their defaults: shuffle partitions fitted to the two cores, no UI, no progress bars)."""
    from rocketmesh.spark.jobs.common import session as job_session

    session = job_session("test_spark", "local[2,2]", {"spark.sql.streaming.noDataProgressEventInterval": "1000",
                                                       "spark.log.level": "ERROR"})
    yield session
    session.stop()


def send(ns: str, topic: str, bodies: list[str], **kw) -> None:
    """Send ``bodies`` in batches of 50, spread over the topic's queues."""
    with Producer("spark-test-producer", ns) as p:
        p.instance.update_topic_route(topic)  # the instance is shared: see queues added since it last looked
        for i in range(0, len(bodies), 50):
            p.send_batch([Message(topic, b.encode(), **kw) for b in bodies[i:i + 50]])


def read_opts(ns: str, topic: str, group: str, **more: str) -> dict[str, str]:
    return {"namesrv": ns, "topic": topic, "consumerGroup": group, **more}


def parquet_bodies(spark: SparkSession, path: Path) -> list[str]:
    if not (path / "_spark_metadata").exists():
        return []
    return [r.body.decode() for r in read_parquet(spark, path).select("body").collect()]


def read_parquet(spark: SparkSession, path: Path):
    """The rows a file sink committed (its _spark_metadata log lists them)."""
    return spark.read.schema(rocketmesh.spark.SCHEMA).parquet(str(path))


def lag_is_zero(admin: Admin, group: str, topic: str) -> bool:
    try:
        stats = admin.consume_stats(group, topic)
    except Exception:  # noqa: BLE001 - not committed yet
        return False
    return stats.total_diff() == 0 and all(o.consumer_offset == o.broker_offset for o in stats.offset_table.values())


# --- streaming: exactly once through stop, kill and restart; the consumer group ---------------------------

def test_stream_to_parquet_exactly_once_across_stop_kill_and_restart(spark, ns, admin, tmp_path):
    topic, group = "SparkOnce", "spark-once"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    make_topic(admin, topic, 2)
    sent = [f"m{i}" for i in range(3600)]
    send(ns, topic, sent[:1200])

    def start(limit: int):
        df = spark.readStream.format("rocketmesh").options(
            **read_opts(ns, topic, group, startingOffsets="earliest", maxRecordsPerTrigger=str(limit))).load()
        return (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="500 milliseconds").start())

    # 1. A query runs; the group is registered while it does; it is stopped part way.
    query = start(100)
    try:
        conn = wait_for(lambda: _connection(admin, group), QUERY_TIMEOUT_S,
                        "the Spark driver listed by consumer-connection")
        assert topic in conn.subscriptions
        assert conn.consume_type == "CONSUME_ACTIVELY"
        shown = _cli("admin", "consumer-connection", "-n", ns, "-g", group)
        assert conn.connections[0].client_id in shown and topic in shown
        wait_for(lambda: len(parquet_bodies(spark, out)) >= 100, QUERY_TIMEOUT_S, "a first micro-batch in parquet",
                 interval_s=SPARK_POLL_S)
    finally:
        query.stop()
    assert len(parquet_bodies(spark, out)) < 1200, "stopped part way"

    # 2. Restarted from its checkpoint; the topic grows from 2 to 4 queues while it runs.
    query = start(600)
    try:
        make_topic(admin, topic, 4)
        send(ns, topic, sent[1200:2400])
        wait_for(lambda: read_parquet(spark, out).where("queue_id >= 2").count() > 0, QUERY_TIMEOUT_S,
                 "rows of the added queues", interval_s=SPARK_POLL_S)
    finally:
        query.stop()

    # 3. The job runs as its own Spark process and is killed (SIGKILL: driver and JVM) mid-way.
    send(ns, topic, sent[2400:])
    before = len(parquet_bodies(spark, out))
    job = subprocess.Popen(
        [sys.executable, "-m", "rocketmesh.spark.jobs.archive", "-n", ns, "-t", topic, "-g", group,
         "--starting-offsets", "earliest", "--max-records-per-trigger", "100", "--trigger-seconds", "0.5",
         "--output", str(out), "--checkpoint", str(checkpoint)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: len(parquet_bodies(spark, out)) >= before + 100 or job.poll() is not None, QUERY_TIMEOUT_S,
                 "the job's first micro-batches", interval_s=SPARK_POLL_S)
        assert job.poll() is None, job.stdout.read().decode()[-3000:]
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    assert len(parquet_bodies(spark, out)) < len(sent), "killed part way"

    # 4. Restarted from the checkpoint once more, to the end of what is there (Trigger.AvailableNow).
    df = spark.readStream.format("rocketmesh").options(
        **read_opts(ns, topic, group, startingOffsets="earliest", maxRecordsPerTrigger="1000")).load()
    query = (df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    got = parquet_bodies(spark, out)
    dupes = [b for b, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"{len(dupes)} messages twice, e.g. {dupes[:5]}"
    assert sorted(got) == sorted(sent)

    # The group's offsets on the broker are the queues' ends: consumer-progress shows no lag.
    wait_for(lambda: lag_is_zero(admin, group, topic), 30, "zero lag of the Spark group")
    assert "Diff Total: 0" in _cli("admin", "consumer-progress", "-n", ns, "-g", group)
    stats = admin.consume_stats(group, topic)
    status = admin.topic_status(topic)
    assert {mq: o.consumer_offset for mq, o in stats.offset_table.items()} == \
        {mq: o.max_offset for mq, o in status.items()}
    assert len(status) == 4


def _cli(*args: str) -> str:
    """What `rocketmesh <args>` prints."""
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _connection(admin: Admin, group: str):
    try:
        return admin.consumer_connection(group)
    except Exception:  # noqa: BLE001 - not registered yet
        return None


def test_reset_offset_by_time_moves_where_a_group_start_begins(spark, ns, admin, tmp_path):
    topic, group = "SparkReset", "spark-reset"
    make_topic(admin, topic, 2)
    send(ns, topic, [f"old{i}" for i in range(20)])
    time.sleep(1.1)  # store times are milliseconds: keep the two sends apart
    boundary = int(time.time() * 1000)
    time.sleep(0.1)
    send(ns, topic, [f"new{i}" for i in range(20)])

    def run_once(name: str) -> list[str]:
        df = spark.readStream.format("rocketmesh").options(**read_opts(ns, topic, group)).load()
        q = (df.select(F.col("body").cast("string").alias("b")).writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / name)).trigger(availableNow=True).start())
        assert q.awaitTermination(QUERY_TIMEOUT_S)
        return sorted(r.b for r in spark.table(name).collect())

    # The group has consumed everything (its offsets are at the queues' ends) ...
    admin.reset_offset_by_time(group, topic, -1)
    assert run_once("reset_none") == []
    # ... an admin moves it back in time while no query runs; the next start (no checkpoint) begins there.
    admin.reset_offset_by_time(group, topic, boundary)
    assert run_once("reset_new") == sorted(f"new{i}" for i in range(20))

    # startingOffsets as a store time starts at the first message stored at or after it.
    rows = spark.read.format("rocketmesh").options(
        **read_opts(ns, topic, "spark-reset-batch", startingOffsets=str(boundary))).load().collect()
    assert sorted(r.body.decode() for r in rows) == sorted(f"new{i}" for i in range(20))


# --- filters, batch ranges, read limits ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tagged(ns, admin) -> str:
    """A topic of 4 queues holding 400 messages: tag A or B, property n = 0..399."""
    topic = "SparkTagged"
    make_topic(admin, topic, 4)
    with Producer("spark-test-tagged", ns) as p:
        p.instance.update_topic_route(topic)
        for i in range(0, 400, 25):  # 100 messages a queue
            p.send_batch([Message(topic, f"t{j}".encode(), tags="A" if j % 2 else "B", keys=f"k{j}",
                                  properties={"n": str(j)}) for j in range(i, i + 25)],
                         queue=MessageQueue(topic, "broker-a", i // 25 % 4))
    return topic


def test_rows_carry_the_message_fields(spark, ns, tagged):
    rows = spark.read.format("rocketmesh").options(**read_opts(ns, tagged, "spark-fields")).load().collect()
    assert len(rows) == 400
    by_body = {r.body: r for r in rows}
    r = by_body[b"t7"]
    assert (r.topic, r.broker, r.tags, r.keys, r.properties["n"]) == (tagged, "broker-a", "A", "k7", "7")
    assert r.msg_id == r.properties["UNIQ_KEY"] and len(r.msg_id) == 32
    assert r.store_timestamp >= r.born_timestamp and r.reconsume_times == 0
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == \
        sorted((q, o) for q in range(4) for o in range(100))


def test_tag_and_sql92_filters_apply(spark, ns, tagged):
    def bodies(**opts: str) -> set[str]:
        df = spark.read.format("rocketmesh").options(**read_opts(ns, tagged, "spark-filter", **opts)).load()
        return {r.body.decode() for r in df.select("body").collect()}

    assert bodies(subExpression="A") == {f"t{j}" for j in range(1, 400, 2)}
    assert bodies(subExpression="A || B") == {f"t{j}" for j in range(400)}
    assert bodies(sql="n BETWEEN 10 AND 19 AND TAGS = 'B'") == {f"t{j}" for j in range(10, 20, 2)}

    # The same filters on a stream.
    df = spark.readStream.format("rocketmesh").options(
        **read_opts(ns, tagged, "spark-filter-stream", startingOffsets="earliest", sql="n < 5")).load()
    q = (df.select(F.col("body").cast("string").alias("b")).writeStream.format("memory").queryName("sqlstream")
         .trigger(availableNow=True).start())
    assert q.awaitTermination(QUERY_TIMEOUT_S)
    assert sorted(r.b for r in spark.table("sqlstream").collect()) == [f"t{j}" for j in range(5)]


def test_batch_read_by_offset_range_returns_exactly_that_range(spark, ns, tagged):
    start = '{"broker-a:0": 10, "broker-a:1": 0, "broker-a:2": 99, "broker-a:3": 50}'
    end = '{"broker-a:0": 20, "broker-a:1": 5, "broker-a:2": 100, "broker-a:3": 50}'
    rows = spark.read.format("rocketmesh").options(
        **read_opts(ns, tagged, "spark-range", startingOffsets=start, endingOffsets=end)).load() \
        .select("queue_id", "queue_offset").collect()
    want = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)] + [(2, 99)]
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == want

    # A queue left out starts at its earliest (start) and ends at its latest (end) offset.
    rows = spark.read.format("rocketmesh").options(
        **read_opts(ns, tagged, "spark-range", startingOffsets='{"broker-a:3": 95}',
                    endingOffsets='{"broker-a:0": 3}')).load().select("queue_id", "queue_offset").collect()
    want = [(0, o) for o in range(3)] + [(q, o) for q in (1, 2) for o in range(100)] + [(3, o) for o in range(95, 100)]
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == want


def test_max_records_per_trigger_bounds_each_micro_batch(spark, ns, tagged, tmp_path):
    df = spark.readStream.format("rocketmesh").options(
        **read_opts(ns, tagged, "spark-limit", startingOffsets="earliest", maxRecordsPerTrigger="70")).load()
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert q.awaitTermination(QUERY_TIMEOUT_S)
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    sizes = [p["numInputRows"] for p in progress]
    assert sum(sizes) == 400
    assert max(sizes) <= 70 and len(sizes) >= 6, sizes
    # Shared fairly: the first batch takes 17 or 18 offsets from each of the 4 queues.
    end = progress[0]["sources"][0]["endOffset"]
    first = (orjson.loads(end) if isinstance(end, str) else end)["offsets"][tagged]
    assert sum(first.values()) == 70 and sorted(first.values()) == [17, 17, 18, 18], first


@pytest.mark.parametrize("options,needle", [
    ({"bogus": "1"}, "unknown option 'bogus'"),
    ({"startingOffsets": "{not json"}, "option 'startingOffsets' is not valid JSON"),
    ({"topic": "NoSuchTopicHere"}, "option 'topic': topic 'NoSuchTopicHere' does not exist"),
    ({"namesrv": "127.0.0.1:1"}, "option 'namesrv'"),
    ({"maxRecordsPerTrigger": "0"}, "option 'maxRecordsPerTrigger' must be at least 1"),
])
def test_a_bad_option_fails_at_once_naming_it(spark, ns, tagged, options, needle):
    opts = {**read_opts(ns, tagged, "spark-bad"), **options}
    began = time.monotonic()
    with pytest.raises(Exception) as info:
        spark.readStream.format("rocketmesh").options(**opts).load().writeStream.format("noop").start() \
            .awaitTermination(QUERY_TIMEOUT_S)
    assert needle in str(info.value)
    assert time.monotonic() - began < QUERY_TIMEOUT_S


# --- the writer --------------------------------------------------------------------------------------------

def _consume(ns: str, topic: str, group: str, want: int) -> list:
    got: list = []
    lock = threading.Lock()

    def listener(msgs):
        with lock:
            got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, ns, consume_from="CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(topic, "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        wait_for(lambda: len(got) >= want, QUERY_TIMEOUT_S, f"{want} messages consumed")
        time.sleep(2)  # anything sent twice would arrive now
    finally:
        consumer.shutdown()
    return got


def test_writer_round_trips_a_dataframe_to_a_topic(spark, ns, admin):
    topic = "SparkWritten"
    make_topic(admin, topic, 4)
    df = spark.range(1000).select(
        F.concat(F.lit("body-"), F.col("id").cast("string")).alias("body"),
        F.concat(F.lit("key-"), F.col("id").cast("string")).alias("keys"),
        F.when(F.col("id") % 2 == 0, F.lit("Even")).otherwise(F.lit("Odd")).alias("tags"),
        F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
        F.when(F.col("id") < 100, F.lit("merchant-7")).alias("sharding_key"),
    ).repartition(3)
    df.write.format("rocketmesh").option("namesrv", ns).option("topic", topic).mode("append").save()

    msgs = _consume(ns, topic, "spark-written-reader", 1000)
    bodies = collections.Counter(m.body.decode() for m in msgs)
    assert len(msgs) == 1000 and set(bodies) == {f"body-{i}" for i in range(1000)}
    m = next(m for m in msgs if m.body == b"body-3")
    assert (m.keys, m.tags, m.properties["n"]) == ("key-3", "Odd", "3")
    # Rows with one sharding key go to one queue.
    assert len({m.queue_id for m in msgs if int(m.properties["n"]) < 100}) == 1


def test_a_retried_write_task_does_not_send_rows_twice(spark, ns, admin):
    topic = "SparkRetried"
    make_topic(admin, topic, 2)
    from pyspark.sql.types import StringType

    @F.udf(StringType(), useArrow=False)
    def body_or_fail(i):
        from pyspark import TaskContext

        # The first attempt fails after 1500 rows: its first two send batches (512 rows each) are stored.
        if i == 1500 and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError("the first attempt of the task fails here")
        return f"row-{i}"

    df = spark.range(0, 2000, numPartitions=1).select(body_or_fail("id").alias("body"))
    df.write.format("rocketmesh").option("namesrv", ns).option("topic", topic).mode("append").save()
    msgs = _consume(ns, topic, "spark-retried-reader", 2000)
    counts = collections.Counter(m.body.decode() for m in msgs)
    assert [b for b, n in counts.items() if n > 1] == []
    assert set(counts) == {f"row-{i}" for i in range(2000)}


def test_stream_writer_and_overwrite_refused(spark, ns, admin, tagged, tmp_path):
    topic = "SparkStreamWritten"  # not created: the first send creates it (autoCreateTopicEnable)
    src = spark.readStream.format("rocketmesh").options(
        **read_opts(ns, tagged, "spark-copy", startingOffsets="earliest", subExpression="A")).load()
    q = (src.select("body", "keys", "tags").writeStream.format("rocketmesh").option("namesrv", ns)
         .option("topic", topic).option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert q.awaitTermination(QUERY_TIMEOUT_S)
    msgs = _consume(ns, topic, "spark-copy-reader", 200)
    assert sorted(m.body.decode() for m in msgs) == sorted(f"t{j}" for j in range(1, 400, 2))
    assert all(m.tags == "A" for m in msgs)

    with pytest.raises(Exception, match="append"):
        spark.range(1).select(F.lit("x").alias("body")).write.format("rocketmesh") \
            .option("namesrv", ns).option("topic", topic).mode("overwrite").save()


# --- the jobs ----------------------------------------------------------------------------------------------

def test_the_jobs_session_fits_the_cores_and_the_users_settings_win(spark):
    import argparse

    from rocketmesh.spark.jobs import common

    # The module's session is the jobs' (see the fixture): Spark's 200 shuffle partitions would be 200 tasks
    # and state stores each micro-batch on these two cores.
    conf = spark.sparkContext.getConf()
    assert spark.conf.get("spark.sql.shuffle.partitions") == str(spark.sparkContext.defaultParallelism) == "2"
    assert conf.get("spark.ui.showConsoleProgress") == "false" and conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.log.level") == "ERROR"  # the fixture's, over the jobs' WARN

    parser = argparse.ArgumentParser()
    common.add_source_args(parser, topic="Orders", group="g")
    args = parser.parse_args(["--checkpoint", "cp", "--shuffle-partitions", "3",
                              "--conf", "spark.sql.streaming.stateStore.minDeltasForSnapshot=4"])
    assert common.job_conf(args) == {"spark.sql.shuffle.partitions": "3",
                                     "spark.sql.streaming.stateStore.minDeltasForSnapshot": "4"}
    with pytest.raises(SystemExit):
        parser.parse_args(["--checkpoint", "cp", "--conf", "no-value"])
    try:
        job = common.session("test_spark", "local[2,2]", common.job_conf(args))
        assert job.conf.get("spark.sql.shuffle.partitions") == "3"
        assert job.conf.get("spark.sql.streaming.stateStore.minDeltasForSnapshot") == "4"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.conf.unset("spark.sql.streaming.stateStore.minDeltasForSnapshot")
        spark.sparkContext.setLogLevel("ERROR")


def test_merchant_totals_job_writes_closed_windows_and_alerts(spark, ns, admin, tmp_path):
    from rocketmesh.spark.jobs import merchant_totals
    from rocketmesh.spark.jobs.order_events import order_events, send_events

    topic, alerts_topic = "SparkOrders", "SparkMerchantAlerts"
    make_topic(admin, topic, 2)
    make_topic(admin, alerts_topic, 2)
    start_ms = 1_764_000_000_000 - 1_764_000_000_000 % 60_000  # on a minute
    events = list(order_events(1800, merchants=5, start_ms=start_ms, spacing_ms=100, seed=7))  # 3 minutes
    with Producer("spark-test-orders", ns) as p:
        p.instance.update_topic_route(topic)
        assert send_events(p, topic, iter(events)) == 1800

    # The first two windows are closed (the watermark passed their end); the third is still open.
    want: dict[tuple[int, str], list] = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        window = (e.event_time - start_ms) // 60_000
        if window < 2:
            want[(window, e.merchant)][0] += 1
            want[(window, e.merchant)][1] += e.amount
    amounts = sorted(amount for _, amount in want.values())
    threshold = round((amounts[len(amounts) // 2 - 1] + amounts[len(amounts) // 2]) / 2, 2)  # half the windows alert

    merchant_totals.main(["-n", ns, "-t", topic, "-g", "spark-merchants", "--starting-offsets", "earliest",
                          "--output", str(tmp_path / "totals"), "--checkpoint", str(tmp_path / "cp"),
                          "--alerts-topic", alerts_topic, "--alert-amount", str(threshold), "--window", "1 minute",
                          "--watermark", "0 seconds", "--available-now"])
    # The job committed its last batch before returning: its group shows no lag at once.
    assert lag_is_zero(admin, "spark-merchants", topic) and lag_is_zero(admin, "spark-merchants-alerts", topic)

    rows = spark.read.parquet(str(tmp_path / "totals")).collect()
    got = {(int(r.window_start.timestamp() * 1000 - start_ms) // 60_000, r.merchant): (r.orders, r.amount)
           for r in rows}
    assert sorted(got) == sorted(want)
    for key, (orders, amount) in want.items():
        assert got[key][0] == orders and abs(got[key][1] - amount) < 0.011, key

    alerting = {key for key, (_, amount) in want.items() if amount >= threshold}
    assert alerting and len(alerting) < len(want), "the threshold splits the windows"
    msgs = _consume(ns, alerts_topic, "spark-alerts-reader", len(alerting))
    alerts = [orjson.loads(m.body) for m in msgs]
    assert sorted((a["merchant"], a["orders"]) for a in alerts) == sorted((k[1], want[k][0]) for k in alerting)
    assert all(m.tags == "alert" and m.keys == orjson.loads(m.body)["merchant"] for m in msgs)


# --- last: a broker joins the module's mesh ----------------------------------------------------------------

def test_a_broker_added_while_a_query_runs_is_read(spark, ns, admin, mesh, tmp_path):
    topic = "SparkGrown"
    admin.create_topic(topic, 2, 2, broker_addr=mesh[1].addr)
    admin.wait_topic_route(topic)
    send(ns, topic, [f"a{i}" for i in range(50)])
    df = spark.readStream.format("rocketmesh").options(
        **read_opts(ns, topic, "spark-grown", startingOffsets="earliest")).load()
    query = (df.select("broker", F.col("body").cast("string").alias("b")).writeStream.format("memory")
             .queryName("grown").trigger(processingTime="500 milliseconds").start())
    broker_b = BrokerProcess(tmp_path / "broker-b", ns, name="broker-b")
    try:
        wait_for(lambda: spark.table("grown").count() == 50, QUERY_TIMEOUT_S, "broker-a's messages")
        broker_b.start(timeout_s=30)
        broker_b.wait_registered()
        admin.create_topic(topic, 2, 2, broker_addr=broker_b.addr)
        wait_for(lambda: len(admin.topic_route(topic).broker_datas) == 2, 30, "the route naming broker-b")
        with Producer("spark-test-grown", ns) as p:
            p.instance.update_topic_route(topic)
            p.send_batch([Message(topic, f"b{i}".encode()) for i in range(30)],
                         queue=MessageQueue(topic, "broker-b", 1))
        wait_for(lambda: spark.table("grown").where("broker = 'broker-b'").count() == 30, QUERY_TIMEOUT_S,
                 "broker-b's messages")
    finally:
        query.stop()
        broker_b.stop()
    rows = spark.table("grown").collect()
    assert sorted(r.b for r in rows) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)])
