"""The web console over a mesh that checks ACL: operators sign in with their account, the dashboard signs as
it and shows only what it may do; a wrong secret and a change beyond the account are refused."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path

import pytest

from browserkit import Browser, chromium
from clientkit import make_topic
from procs import BrokerProcess, DashboardProcess, NamesrvProcess, run_cli
from rocketmesh import Admin
from rocketmesh.acl import SessionCredentials
from rocketmesh.acl.config import account_env

ADMIN = SessionCredentials("dashadmin", "adminsecret1")
OPERATOR = SessionCredentials("operator1", "operatorsecret")

ACL_YAML = f"""\
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {OPERATOR.access_key}
    secretKey: {OPERATOR.secret_key}
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


class Mesh:
    def __init__(self, root: Path) -> None:
        acl_file = root / "plain_acl.yml"
        acl_file.write_text(ACL_YAML)
        acl = dict(aclEnable="true", aclFile=str(acl_file))
        self.namesrv = NamesrvProcess(root / "namesrv", **acl).start()
        self.broker = BrokerProcess(root / "broker", self.namesrv.addr, credentials=ADMIN, **acl).start(timeout_s=30)
        self.broker.wait_registered()
        self.dashboard = DashboardProcess(root / "dashboard", self.namesrv.addr, aclEnable="true",
                                          collectIntervalMs=500).start(30)
        self.admin = Admin(self.namesrv.addr, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key)
        self.shots = root / "screenshots"

    def topic_list(self) -> set[str]:
        done = run_cli("admin", "topic-list", "-n", self.namesrv.addr,
                       env=account_env(ADMIN.access_key, ADMIN.secret_key))
        assert done.returncode == 0, done.stderr
        return {line.strip() for line in done.stdout.splitlines() if line.strip()}

    def stop(self) -> None:
        self.admin.close()
        for proc in (self.dashboard, self.broker, self.namesrv):
            proc.stop()


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    m = Mesh(tmp_path_factory.mktemp("dashboard-acl"))
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def browser(mesh: Mesh) -> Iterator[Browser]:
    """A fresh browser (its own cookies) for each test: each signs in as somebody else."""
    with chromium() as driver:
        yield Browser(driver, mesh.dashboard.url, mesh.shots)


class Script:
    """A script using the JSON API: a cookie jar, the session's CSRF token."""

    def __init__(self, mesh: Mesh) -> None:
        self.base = mesh.dashboard.url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        self.token = self.call("GET", "/api/session")[1]["csrfToken"]

    def call(self, method: str, path: str, fields: dict[str, str] | None = None) -> tuple[int, dict]:
        data = json.dumps(fields).encode() if fields is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={
            "Content-Type": "application/json", **({"X-CSRF-Token": self.token} if method == "POST" else {})})
        try:
            with self.opener.open(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def login(self, who: SessionCredentials) -> dict:
        status, doc = self.call("POST", "/api/login", {"accessKey": who.access_key, "secretKey": who.secret_key})
        assert status == 200, doc
        self.token = doc["csrfToken"]  # a new session at sign-in, with a token of its own
        return doc


def sign_in(browser: Browser, who: SessionCredentials, secret: str | None = None) -> None:
    browser.open("/login")
    browser.fill({"#accessKey": who.access_key, "#secretKey": secret or who.secret_key})
    browser.submit("#sign-in")


def test_every_page_asks_for_an_account_first(mesh: Mesh, browser: Browser) -> None:
    browser.open("/topics")
    assert browser.driver.current_url.startswith(mesh.dashboard.url + "/login")
    browser.shot("login")
    status, doc = Script(mesh).call("GET", "/api/overview")
    assert status == 401 and "sign in first" in doc["error"]


def test_a_wrong_secret_is_refused(mesh: Mesh, browser: Browser) -> None:
    sign_in(browser, ADMIN, secret="not-the-secret")
    assert browser.has("#error") and "signature check failed" in browser.text("#error"), browser.driver.page_source
    assert browser.driver.current_url.startswith(mesh.dashboard.url + "/login")
    browser.shot("login-refused")
    browser.open("/")
    assert browser.driver.current_url.startswith(mesh.dashboard.url + "/login")  # still not signed in


def test_an_account_without_the_admin_flag_cannot_delete_a_topic(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "AclDashKept", queues=1)
    sign_in(browser, OPERATOR)
    assert browser.text("#account") == OPERATOR.access_key  # no "(admin)"
    browser.open("/topic?topic=AclDashKept")
    assert browser.text("#topic-messages") == "0"
    assert not browser.has("#delete-topic-form") and not browser.has("#update-topic-form")
    browser.open("/topics")
    assert not browser.has("#create-topic")
    browser.shot("topics-operator")
    # The form it was not shown, posted anyway with its own session's token: refused, the topic kept.
    script = Script(mesh)
    assert script.login(OPERATOR)["rights"]["admin"] is False
    status, doc = script.call("POST", "/api/topics/delete", {"topic": "AclDashKept"})
    assert status == 403 and "no admin flag" in doc["error"], doc
    assert "AclDashKept" in mesh.topic_list()
    # Signed out, the same session reads nothing more.
    assert script.call("GET", "/api/overview")[0] == 200
    assert script.call("POST", "/api/logout", {}) == (200, {"ok": True})
    assert script.call("GET", "/api/overview")[0] == 401


def test_an_admin_account_deletes_a_topic_from_the_browser(mesh: Mesh, browser: Browser) -> None:
    make_topic(mesh.admin, "AclDashGone", queues=1)
    sign_in(browser, ADMIN)
    assert browser.text("#account") == f"{ADMIN.access_key} (admin)"
    # The collector samples as the operator who signed in: the overview fills in.
    browser.until(lambda: browser.text("#broker-count") == "1", what="the broker counted")
    browser.shot("overview-admin")
    browser.open("/topic?topic=AclDashGone")
    browser.submit("#delete-topic")
    assert "topic AclDashGone deleted" in browser.text("#flash")
    assert "AclDashGone" not in mesh.topic_list()
    browser.submit("header form button")  # sign out
    browser.open("/")
    assert browser.driver.current_url.startswith(mesh.dashboard.url + "/login")
