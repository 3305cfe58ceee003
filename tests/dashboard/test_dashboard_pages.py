"""The web console in a real headless Chromium against a real mesh (a name server, a broker, the dashboard
as processes): each page shows what ``rocketmesh admin`` prints, and what an operator does there reaches
the mesh. Every page is saved as a screenshot under the module's temporary folder."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from browserkit import Browser, chromium
from clientkit import FAST_CLIENT, make_topic, quietly
from procs import BrokerProcess, DashboardProcess, NamesrvProcess, run_cli, wait_for
from rocketmesh import (
    Admin,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from rocketmesh.model.message import MessageExt

PAGE_SIZE = 5


class Mesh:
    """The module's processes, an Admin, and a browser on the dashboard."""

    def __init__(self, root: Path) -> None:
        self.namesrv = NamesrvProcess(root / "namesrv").start()
        self.broker = BrokerProcess(root / "broker", self.namesrv.addr, channelExpiredTimeout=3000,
                                    clientScanInterval=500).start(timeout_s=30)
        self.broker.wait_registered()
        # Small pages, so that paging is exercised with a handful of messages.
        self.dashboard = DashboardProcess(root / "dashboard", self.namesrv.addr, collectIntervalMs=500,
                                          pageSize=PAGE_SIZE).start(30)
        self.admin = Admin(self.namesrv.addr)
        self.shots = root / "screenshots"

    def cli(self, *args: str) -> str:
        """``rocketmesh admin <args> -n namesrv``'s output (it must succeed)."""
        done = run_cli("admin", *args, "-n", self.namesrv.addr)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def stop(self) -> None:
        self.admin.close()
        for proc in (self.dashboard, self.broker, self.namesrv):
            proc.stop()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    m = Mesh(tmp_path_factory.mktemp("dashboard"))
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture(scope="module")
def browser(mesh: Mesh) -> Iterator[Browser]:
    with chromium() as driver:
        yield Browser(driver, mesh.dashboard.url, mesh.shots)


def http(mesh: Mesh, path: str, data: dict[str, str] | None = None, jar: CookieJar | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, str]:
    """(status, body) of a GET (or a POST of ``data`` as a form) to the dashboard, with ``jar``'s cookies."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar if jar is not None else CookieJar()))
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(mesh.dashboard.url + path, data=body, headers=headers or {})
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def topic_list(mesh: Mesh) -> set[str]:
    return {line.strip() for line in mesh.cli("topic-list").splitlines() if line.strip()}


# -- what the pages show -------------------------------------------------------------


def test_the_overview_counts_what_admin_lists(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashOverview", queues=2)
    topics = topic_list(mesh)
    brokers = [line for line in mesh.cli("cluster-list").splitlines()[1:] if line.strip()]
    browser.open("/")
    browser.until(lambda: browser.text("#topic-count") == str(len(topics)), what=f"{len(topics)} topics")
    assert browser.text("#broker-count") == str(len(brokers)) == "1"
    assert browser.table("#namesrvs") == [[mesh.namesrv.addr, "up"]]
    [row] = browser.table("#brokers")
    assert row[:5] == ["DefaultCluster", "broker-a", "0", mesh.broker.addr, "ASYNC_MASTER"]
    browser.shot("overview")
    # The same figures for scripts.
    status, body = http(mesh, "/api/overview")
    doc = json.loads(body)
    assert status == 200 and doc["topicTotal"] == len(topics) and doc["brokers"][0]["addr"] == mesh.broker.addr


def test_the_cluster_page_shows_where_the_commitlog_ends_and_the_config(mesh: Mesh, browser: Browser) -> None:
    with Producer("dash-cluster-p", mesh.namesrv.addr) as p:
        for i in range(3):
            p.send(Message("DashOverview", f"cluster {i}".encode()))
    end = str(mesh.admin.broker_runtime_info(mesh.broker.addr)["commitLogMaxOffset"])
    browser.open("/cluster")
    browser.until(lambda: browser.text(".broker .commitlog-max") == end, what=f"commitlog max {end}")
    browser.shot("cluster")
    browser.find(".broker a[href^='/cluster/config']").click()
    config = dict(browser.table("#broker-config"))
    assert config["brokerName"] == "broker-a" and config["listenPort"] == str(mesh.broker.port)
    browser.shot("broker-config")


def test_a_topic_created_in_the_browser_is_in_the_topic_list(mesh: Mesh, browser: Browser) -> None:
    browser.open("/topics")
    browser.find("#create-topic summary").click()
    browser.fill({"#new-topic": "DashCreated"})
    browser.find("#create-topic-form input[name=readQueueNums]").clear()
    browser.find("#create-topic-form input[name=readQueueNums]").send_keys("3")
    browser.find("#create-topic-form input[name=writeQueueNums]").clear()
    browser.find("#create-topic-form input[name=writeQueueNums]").send_keys("3")
    browser.submit("#create-topic-submit")
    assert "topic DashCreated written to" in browser.text("#flash")
    assert [r[1] for r in browser.table("#queues")] == ["0", "1", "2"]
    browser.shot("topic")
    assert "DashCreated" in topic_list(mesh)
    route = mesh.cli("topic-route", "-t", "DashCreated")
    assert "broker-a" in route and "3" in route
    # Updated from its page: more queues.
    browser.find("#update-topic-form input[name=readQueueNums]").clear()
    browser.find("#update-topic-form input[name=readQueueNums]").send_keys("4")
    browser.find("#update-topic-form input[name=writeQueueNums]").clear()
    browser.find("#update-topic-form input[name=writeQueueNums]").send_keys("4")
    browser.submit("#update-topic-form button")
    assert "topic DashCreated written to" in browser.text("#flash")
    wait_for(lambda: [r[1] for r in browser.open("/topic?topic=DashCreated").table("#queues")] == ["0", "1", "2", "3"],
             20, what="the topic with 4 queues")
    browser.open("/topics?kind=normal&q=dashcreated")
    assert [r[0] for r in browser.table("#topics")] == ["DashCreated"]
    browser.open("/topics")
    browser.shot("topics")


def test_a_test_message_from_the_topic_page_is_found_by_key_and_its_trace_shows(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashSend", queues=2)
    browser.open("/topic?topic=DashSend")
    browser.fill({"#send-tags": "TagDash", "#send-keys": "dash-key-1", "#send-body": '{"order": 42, "ok": true}'})
    browser.submit("#send-submit")
    assert "sent: SEND_OK" in browser.text("#flash")
    browser.open("/messages?topic=DashSend&key=dash-key-1")
    [row] = browser.table("#messages")
    assert row[2:4] == ["TagDash", "dash-key-1"] and '"order": 42' in row[-1]
    found = mesh.cli("query-msg-by-key", "-t", "DashSend", "-k", "dash-key-1")
    assert row[0] in found or browser.find("a.msg").text
    browser.shot("messages")
    browser.find("a.msg").click()
    assert browser.text("#msg-keys") == "dash-key-1"
    assert json.loads(browser.text("#body-json")) == {"order": 42, "ok": True}
    # The trace is sent in the background: it shows once it is stored.
    browser.until(lambda: browser.all("#trace tr.trace-Pub"), what="the Pub trace record")
    browser.shot("message")
    # Paged by time: the topic's messages of the last hour include it.
    browser.open("/messages?topic=DashSend")
    assert any(r[3] == "dash-key-1" for r in browser.table("#messages"))


def test_offsets_reset_from_the_group_page_move_the_consumer_progress(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashReset", queues=2)
    before = int(time.time() * 1000) - 1000
    with Producer("dash-reset-p", mesh.namesrv.addr) as p:
        for i in range(10):
            p.send(Message("DashReset", f"reset {i}".encode()))
    got: list[MessageExt] = []
    consumer = PushConsumer("dash-reset-g", mesh.namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET", **FAST_CLIENT)
    consumer.subscribe("DashReset", "*")
    consumer.register_listener(lambda msgs: (got.extend(msgs), ConsumeConcurrentlyStatus.CONSUME_SUCCESS)[1])
    consumer.start()
    try:
        wait_for(lambda: len(got) >= 10, 30, what="the 10 messages consumed")
        # Committed: the topic's own queues at their ends (the group's retry topic alone would show no lag too).
        wait_for(quietly(lambda: sum(w.consumer_offset for w in mesh.admin.consume_stats(
            "dash-reset-g", "DashReset").offset_table.values()) == 10), 30, what="the progress committed")
    finally:
        consumer.shutdown()
    assert "Diff Total: 0" in mesh.cli("consumer-progress", "-g", "dash-reset-g")
    browser.open("/groups")
    browser.until(lambda: "dash-reset-g" in [r[0] for r in browser.table("#groups")], what="the group listed")
    browser.shot("groups")
    browser.open("/group?group=dash-reset-g")
    offsets = {r[2]: r[4] for r in browser.table("#group-queues") if r[0] == "DashReset"}
    assert sum(int(v) for v in offsets.values()) == 10, browser.table("#group-queues")
    assert browser.find("#reset-topic option").text == "DashReset"  # the group's own topic first, its retry topic last
    Select(browser.find("#reset-topic")).select_by_visible_text("DashReset")
    browser.fill({"#reset-time": str(before)})
    browser.submit("#reset-submit")
    assert "were reset" in browser.text("#flash")
    browser.shot("group")
    progress = mesh.cli("consumer-progress", "-g", "dash-reset-g")
    assert "Diff Total: 10" in progress, progress
    assert [r[4] for r in browser.table("#group-queues") if r[0] == "DashReset"] == ["0", "0"]


def test_a_running_group_shows_its_clients_and_the_queue_each_holds(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashOnline", queues=2)
    consumer = PushConsumer("dash-online-g", mesh.namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            **FAST_CLIENT)
    consumer.subscribe("DashOnline", "TagA || TagB")
    consumer.register_listener(lambda msgs: ConsumeOrderlyStatus.SUCCESS, orderly=True)
    consumer.start()
    try:
        with Producer("dash-online-p", mesh.namesrv.addr) as p:
            for i in range(4):
                p.send(Message("DashOnline", f"online {i}".encode(), tags="TagA"))
        client_id = consumer.client_id
        browser.open("/group?group=dash-online-g")
        browser.until(lambda: {r[0] for r in browser.table("#group-queues") if r[0] == "DashOnline"} and all(
            r[7] == client_id for r in browser.table("#group-queues") if r[0] == "DashOnline"),
            what="each queue held by the client")
        [conn] = browser.table("#connections")
        assert conn[0] == client_id and conn[2] == "PYTHON"
        assert ["DashOnline", "TagA || TagB TAG"] in browser.table("#subscriptions")
        assert browser.text("#group-orderly") == "True"
        printed = mesh.cli("consumer-connection", "-g", "dash-online-g")
        assert client_id in printed and "TagA || TagB" in printed
        browser.shot("group-online")
        # The topic page names the group; a message of it is run through the group's client on demand.
        browser.open("/topic?topic=DashOnline")
        assert "dash-online-g" in [li.text for li in browser.all("#consumers li")]
        browser.open("/messages?topic=DashOnline")
        browser.find("a.msg").click()
        browser.submit("#resend-direct-form button")
        assert f"{client_id} of dash-online-g consumed it: CR_SUCCESS" in browser.text("#flash")
    finally:
        consumer.shutdown()


def test_a_dead_letter_resent_from_the_page_is_consumed(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashDlq", queues=1)
    heal = threading.Event()
    got: list[MessageExt] = []

    def listener(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
        if not heal.is_set():
            return ConsumeConcurrentlyStatus.RECONSUME_LATER  # with max_reconsume_times=0: dead-lettered at once
        got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer("dash-dlq-g", mesh.namesrv.addr, consume_from="CONSUME_FROM_FIRST_OFFSET",
                            max_reconsume_times=0, **FAST_CLIENT)
    consumer.subscribe("DashDlq", "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        with Producer("dash-dlq-p", mesh.namesrv.addr) as p:
            p.send(Message("DashDlq", b"poison pill", keys="dlq-key"))
        wait_for(quietly(lambda: mesh.admin.dlq_messages("dash-dlq-g")), 30, what="the message dead-lettered")
        browser.open("/dlq?group=dash-dlq-g")
        [row] = browser.table("#messages")
        assert row[2] == "DashDlq" and row[4] == "dlq-key" and row[-1] == "poison pill"
        browser.shot("dlq")
        # The export has it too, as one JSON line.
        status, body = http(mesh, "/api/dlq/export?group=dash-dlq-g")
        lines = [json.loads(line) for line in body.splitlines()]
        assert status == 200 and [(d["originalTopic"], d["body"]) for d in lines] == [("DashDlq", "poison pill")]
        heal.set()
        browser.find("#messages input[type=checkbox]").click()
        browser.submit("#resend-selected")
        assert "resent 1 of 1 dead letters of dash-dlq-g" in browser.text("#flash")
        wait_for(lambda: [m.body for m in got] == [b"poison pill"], 30, what="the resent message consumed")
        # The dead-lettered copy stays (the log is append-only): "resend all" sends it once more.
        browser.open("/dlq?group=dash-dlq-g")
        browser.submit("#resend-all")
        assert "resent 1 of 1 dead letters of dash-dlq-g" in browser.text("#flash")
        wait_for(lambda: [m.body for m in got] == [b"poison pill"] * 2, 30, what="the second resend consumed")
        # The message's history: the original, then its dead-lettered copy.
        browser.open(f"/message?topic=DashDlq&msgId={row[1]}")  # row[0]: the checkbox
        topics = [r[1] for r in browser.table("#retry-history")]
        assert topics and topics[0] == "DashDlq" and "%DLQ%dash-dlq-g" in topics, browser.text("main")
    finally:
        consumer.shutdown()


def test_messages_of_a_time_range_are_paged_to_the_last_one(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashPaged", queues=3)
    begin = int(time.time() * 1000) - 1000
    with Producer("dash-paged-p", mesh.namesrv.addr) as p:
        sent = {p.send(Message("DashPaged", f"paged {i}".encode(), keys="same-key" if i < 7 else None)).msg_id
                for i in range(12)}
    browser.open(f"/messages?topic=DashPaged&begin={begin}")
    seen: list[str] = []
    pages = 0
    while True:
        pages += 1
        seen += [row[0] for row in browser.table("#messages")]
        if not browser.has(".pager a[rel=next]"):
            break
        browser.find(".pager a[rel=next]").click()
    assert pages == 3 and sorted(seen) == sorted(sent)
    assert "page 3 of 3 (12 in all)" in browser.text(".pager")
    # By key, paged too: 7 share one.
    browser.open("/messages?topic=DashPaged&key=same-key")
    first = [row[0] for row in browser.table("#messages")]
    browser.find(".pager a[rel=next]").click()
    second = [row[0] for row in browser.table("#messages")]
    assert len(first) == 5 and len(second) == 2 and not set(first) & set(second)
    assert not browser.has(".pager a[rel=next]")
    # By id: the one message.
    one = seen[0]
    browser.open(f"/messages?topic=DashPaged&msgId={one}")
    assert [row[0] for row in browser.table("#messages")] == [one]
    # A range that ends before they were sent holds none of them.
    browser.open(f"/messages?topic=DashPaged&begin={begin - 60_000}&end={begin - 30_000}")
    assert browser.table("#messages") == [["no message"]]


def test_what_a_message_carries_is_shown_as_text_never_run(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashXss", queues=1)
    body = "<script>window.injected = 1</script><img src=x onerror='window.injected = 2'>"
    with Producer("dash-xss-p", mesh.namesrv.addr) as p:
        sent = p.send(Message("DashXss", body.encode(), tags="<b>tag</b>", keys="xss-key"))
    for page in ("/messages?topic=DashXss&key=xss-key", f"/message?topic=DashXss&msgId={sent.msg_id}"):
        browser.open(page)
        assert browser.driver.execute_script("return window.injected") is None
        assert body[:40] in browser.text("main") and "<b>tag</b>" in browser.text("main")


def test_the_producers_page_lists_an_online_producer(mesh: Mesh, browser: Browser) -> None:
    with Producer("dash-producers-p", mesh.namesrv.addr, **FAST_CLIENT) as p:
        p.send(Message("DashOverview", b"heartbeat me"))
        browser.open("/producers?group=dash-producers-p")
        rows = browser.until(lambda: browser.table("#producers"), what="the producer listed")
        assert len(rows) == 1 and rows[0][0] == p.client_id and rows[0][2] == "PYTHON"
        browser.shot("producers")


class Undecided:
    """A transaction listener that never decides: its half message stays open."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW


def test_the_transactions_page_lists_an_open_half_message(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "DashTx", queues=1)
    with TransactionProducer("dash-tx-p", mesh.namesrv.addr, Undecided()) as p:
        result = p.send_message_in_transaction(Message("DashTx", b"undecided", keys="tx-key"))
        browser.open("/transactions?topic=DashTx")
        rows = browser.until(lambda: browser.table("#pending"), what="the open transaction")
        assert rows[0][0] == result.transaction_id and rows[0][1] == "dash-tx-p" and rows[0][6] == "tx-key"
        browser.shot("transactions")


# -- what the pages refuse -------------------------------------------------------------


def test_a_form_posted_without_its_csrf_token_is_refused(mesh: Mesh) -> None:
    jar = CookieJar()
    status, body = http(mesh, "/api/session", jar=jar)
    token = json.loads(body)["csrfToken"]
    for data in ({"topic": "DashNoCsrf"}, {"topic": "DashNoCsrf", "csrf_token": "forged"}):
        status, body = http(mesh, "/topics/create", data, jar=jar)
        assert status == 403 and "CSRF" in body, (status, body[:300])
    assert "DashNoCsrf" not in topic_list(mesh)
    # With the token, the same form is taken.
    status, body = http(mesh, "/api/topics/create", {"topic": "DashWithCsrf", "readQueueNums": "1",
                                                     "writeQueueNums": "1"}, jar=jar, headers={"X-CSRF-Token": token})
    assert status == 200 and json.loads(body)["ok"], body
    assert "DashWithCsrf" in topic_list(mesh)


def test_served_beyond_loopback_without_acl_it_warns(mesh: Mesh, tmp_path: Path) -> None:
    exposed = DashboardProcess(tmp_path, mesh.namesrv.addr, listenAddress="0.0.0.0").start(30)
    try:
        assert "warning: the dashboard listens on 0.0.0.0" in exposed.output() and "ACL is off" in exposed.output()
    finally:
        exposed.stop()
    assert "warning" not in mesh.dashboard.output()  # loopback: nothing to say


def test_bad_input_gets_a_page_saying_what_was_wrong(mesh: Mesh, browser: Browser) -> None:
    browser.open("/topics?page=abc")
    assert "page must be a whole number" in browser.text("#error")
    status, body = http(mesh, "/api/topic?topic=NoSuchDashTopic")
    assert status == 502 and "NoSuchDashTopic" in json.loads(body)["error"]
    status, body = http(mesh, "/api/groups?sort=size")
    assert status == 400 and "sort must be one of" in json.loads(body)["error"]
    assert browser.driver.find_elements(By.CSS_SELECTOR, "header nav a")  # the page still has its frame


def test_the_overview_ranks_the_groups_furthest_behind(mesh: Mesh, browser: Browser) -> None:
    """Last of the module: after its traffic, the overview's chart has filled in and the group whose offsets
    were reset leads the lag table with what consumer-progress prints."""
    diff = int(mesh.cli("consumer-progress", "-g", "dash-reset-g").rsplit("Diff Total:", 1)[1].split()[0])
    assert diff == 10
    browser.open("/")
    top = browser.until(lambda: browser.table("#top-lag"), what="the lag table")
    assert top[0][:2] == ["dash-reset-g", str(diff)]
    assert browser.all("svg.chart polyline")  # the rates chart has its lines
    browser.shot("overview-after")
    # The groups list by rate: consumed/s never rises down the list.
    browser.open("/groups?sort=tps")
    rates = [float(r[2]) for r in browser.table("#groups")]
    assert rates and rates == sorted(rates, reverse=True)
