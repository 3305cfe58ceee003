"""The Starlette application: each page rendered on the server and as JSON under ``/api``.

A page is a :class:`View`: a plain function of a :class:`Ctx` that returns the page's data (a dict of
JSON-able values). ``GET /topics`` renders it with the view's template; ``GET /api/topics`` returns the
same dict as JSON. A change is an :class:`Action`: ``POST /topics/create`` answers a form with a redirect
and a message on the next page, ``POST /api/topics/create`` with JSON. Both run on a worker thread, as
the SDK's calls block.

Every request has a session (:mod:`.sessions`); every POST must carry its CSRF token; with ACL on,
every page but the sign-in asks for a signed-in session, and an action marked ``admin`` for an account
with the admin flag (the brokers check the same again).
"""

from __future__ import annotations

import datetime
import json
import os
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rocketmesh import __version__
from rocketmesh.client import Admin, MQBrokerError, MQClientError, MQError
from rocketmesh.remoting import ResponseCode

from .accounts import NOBODY, Account, Accounts
from .charts import line_chart
from .collector import Collector
from .config import DashboardConfig
from .rights import account_rights
from .sessions import COOKIE, CSRF_FIELD, CSRF_HEADER, Session, Sessions

HERE = os.path.dirname(os.path.abspath(__file__))


class SignInFirst(Exception):
    """The request needs a signed-in session (ACL on): a page redirects to the sign-in, the API answers 401."""


class PageError(Exception):
    """A request the page cannot serve: ``status`` and a message saying what to do."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass
class Ctx:
    """One request as a page or action sees it."""

    dash: Dashboard
    session: Session
    params: Mapping[str, str]
    path: Mapping[str, str]
    form: Mapping[str, list[str]] = field(default_factory=dict)

    @property
    def admin(self) -> Admin:
        """The Admin that signs as this session's account."""
        return self.dash.accounts.admin(self.session.account)

    def arg(self, name: str, default: str = "") -> str:
        """A form field (an action's) or else a query parameter, stripped."""
        values = self.form.get(name)
        if values:
            return values[0].strip()
        return str(self.params.get(name, default)).strip()

    def args(self, name: str) -> list[str]:
        """Every value of a repeated form field (checkboxes)."""
        return [v for v in self.form.get(name, []) if v]

    def required(self, name: str, what: str) -> str:
        """A field that must be given; PageError naming it otherwise."""
        value = self.arg(name)
        if not value:
            raise PageError(f"{what} is missing: give {name}=...")
        return value

    def int_arg(self, name: str, default: int, low: int = 0, high: int = 1 << 62) -> int:
        """An integer field within [low, high]; PageError saying so otherwise."""
        raw = self.arg(name)
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise PageError(f"{name} must be a whole number, got {raw!r}") from None
        if not low <= value <= high:
            raise PageError(f"{name} must be between {low} and {high}, got {value}")
        return value

    def time_arg(self, name: str) -> int | None:
        """A time as epoch ms: epoch ms, or ``YYYY-MM-DDTHH:MM[:SS]`` in UTC (the form's datetime field)."""
        raw = self.arg(name)
        if not raw:
            return None
        if raw.lstrip("-").isdigit():
            return int(raw)
        try:
            when = datetime.datetime.fromisoformat(raw)
        except ValueError:
            raise PageError(f"{name} must be epoch milliseconds or YYYY-MM-DDTHH:MM[:SS] (UTC), got {raw!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return int(when.timestamp() * 1000)


@dataclass(frozen=True)
class View:
    """A page: ``GET path`` renders ``template`` with what ``load`` returns, ``GET /api`` + path is it as JSON."""

    path: str
    template: str
    load: Callable[[Ctx], dict[str, Any]]


@dataclass(frozen=True)
class Done:
    """What an action did: a message for the operator, the page to show next, and data for scripts."""

    message: str
    location: str
    data: Any = None


@dataclass(frozen=True)
class Download:
    """A file made as it is sent (an export): its chunks, media type and name."""

    chunks: Iterator[bytes]
    media_type: str
    filename: str


@dataclass(frozen=True)
class Action:
    """A change: ``POST path`` (a form) or ``POST /api`` + path (a script)."""

    path: str
    run: Callable[[Ctx], Done]
    #: Only an account with the admin flag may (with ACL on).
    admin: bool = True


class Dashboard:
    """What every request shares: config, the accounts' Admins, the sessions, the collector."""

    def __init__(self, config: DashboardConfig, namesrv: str) -> None:
        self.config = config
        self.namesrv = namesrv
        self.accounts = Accounts(namesrv, config.request_timeout_ms, config.session_timeout_minutes * 60)
        self.sessions = Sessions(config.session_timeout_minutes * 60)
        self.own_account = Account(config.access_key, config.secret_key) if config.access_key else None
        self.collector = Collector([a for a in namesrv.split(";") if a], self._sampler_admin,
                                   config.collect_interval_ms / 1000, config.history_minutes)

    def _sampler_admin(self) -> Admin | None:
        if not self.config.acl_enable:
            return self.accounts.admin(self.own_account or NOBODY)
        account = self.own_account or self.sessions.latest_account()
        self.accounts.close_idle(self.sessions.accounts() | ({account} if account else set()))
        return self.accounts.admin(account) if account is not None else None

    def close(self) -> None:
        """Stop sampling and close every Admin."""
        self.collector.stop()
        self.accounts.close()


# -- rendering -------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as JSON (dataclasses, enums and sets included)."""
    body = orjson.dumps(data, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json")


def _fmt_time(ms: Any) -> str:
    """Epoch ms as ``YYYY-MM-DD HH:MM:SS`` UTC (empty for 0 or nothing)."""
    try:
        value = int(ms)
    except (TypeError, ValueError):
        return ""
    if value <= 0:
        return ""
    return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _query(params: Mapping[str, Any], **changes: Any) -> str:
    """The query string of ``params`` with ``changes`` (None drops a key)."""
    merged = {k: v for k, v in params.items() if v not in (None, "")}
    for k, v in changes.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    return urllib.parse.urlencode(merged)


def make_templates() -> Jinja2Templates:
    """The pages' templates with the dashboard's filters."""
    templates = Jinja2Templates(directory=os.path.join(HERE, "templates"))
    env = templates.env
    env.filters["time"] = _fmt_time
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    env.filters["qs"] = lambda params, **kw: _query(params, **kw)
    env.filters["quote"] = lambda v: urllib.parse.quote(str(v), safe="")
    env.globals["line_chart"] = line_chart
    env.globals["version"] = __version__
    return templates


# -- the application -------------------------------------------------------------

NAV = (("/", "Overview"), ("/cluster", "Cluster"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
       ("/producers", "Producers"), ("/messages", "Messages"), ("/dlq", "Dead letters"),
       ("/transactions", "Transactions"))


def error_text(exc: MQError) -> tuple[int, str, int | None]:
    """(HTTP status, message, RocketMQ response code) of an SDK failure."""
    code = exc.response_code
    if isinstance(exc, MQBrokerError):
        status = 403 if code == ResponseCode.NO_PERMISSION else 502
        return status, f"the mesh refused it: {exc}", code
    if isinstance(exc, MQClientError) and code == ResponseCode.MESSAGE_ILLEGAL:
        return 400, str(exc), code
    return 502, str(exc), code


class App:
    """Builds the Starlette application around a :class:`Dashboard`."""

    def __init__(self, dash: Dashboard, views: Sequence[View], actions: Sequence[Action],
                 downloads: Mapping[str, Callable[[Ctx], Download]]) -> None:
        self.dash = dash
        self.templates = make_templates()
        routes: list[BaseRoute] = [
            Route("/healthz", self.healthz),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/api/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/api/logout", self.logout, methods=["POST"]),
            Route("/api/session", self.session_info),
            # follow_symlink: an editable install links the files in from the source tree.
            Mount("/static", StaticFiles(directory=os.path.join(HERE, "static"), follow_symlink=True), name="static"),
        ]
        for view in views:
            routes.append(Route(view.path, self._page(view, api=False)))
            routes.append(Route("/api" + (view.path if view.path != "/" else "/overview"), self._page(view, api=True)))
        for action in actions:
            routes.append(Route(action.path, self._action(action, api=False), methods=["POST"]))
            routes.append(Route("/api" + action.path, self._action(action, api=True), methods=["POST"]))
        for path, make in downloads.items():
            routes.append(Route("/api" + path, self._download(make)))
        self.starlette = Starlette(routes=routes)

    # -- sessions ----------------------------------------------------------------

    def _session(self, request: Request, keep: bool = True) -> tuple[Session, bool]:
        """The request's session, and whether it is new and kept (its cookie must be set). ``keep`` False: a
        request that comes without a session gets one for itself alone (a script's read needs no cookie)."""
        s = self.dash.sessions.get(request.cookies.get(COOKIE))
        if s is not None:
            return s, False
        return self.dash.sessions.new(keep=keep), keep

    def _finish(self, request: Request, response: Response, session: Session, new: bool) -> Response:
        if new:
            response.set_cookie(COOKIE, session.sid, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https", path="/")
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    def render(self, request: Request, session: Session, template: str, data: dict[str, Any],
               status: int = 200) -> Response:
        flash, session.flash = session.flash, ""
        context = {"data": data, "session": session, "csrf_field": CSRF_FIELD, "nav": NAV,
                   "path": request.url.path, "params": dict(request.query_params), "flash": flash,
                   "acl": self.dash.config.acl_enable, "page_size": self.dash.config.page_size}
        return self.templates.TemplateResponse(request, template, context, status_code=status)

    def _fail(self, request: Request, session: Session, api: bool, status: int, message: str,
              code: int | None = None, template: str = "error.html") -> Response:
        """A failure as JSON (``error``, ``responseCode``) or as ``template`` (the error page, or the sign-in form
        again) with ``status``."""
        if api:
            return json_response({"error": message, "responseCode": code}, status)
        return self.render(request, session, template, {"status": status, "message": message, "next": "/"}, status)

    # -- pages and actions -------------------------------------------------------

    async def _serve(self, request: Request, api: bool,
                     work: Callable[[Session], Awaitable[Response]]) -> Response:
        """``work`` for the request's session, its failures answered as an error page (or JSON), the session
        cookie set when the session is new."""
        # A page renders its forms' CSRF token and a POST checks it: those keep their session. A script's
        # read of the API needs none kept.
        session, new = self._session(request, keep=not api or request.method == "POST")
        try:
            resp = await work(session)
        except SignInFirst:
            resp = (self._fail(request, session, True, 401, "sign in first: POST /api/login with accessKey and "
                               "secretKey (and the csrfToken of GET /api/session)") if api
                    else RedirectResponse("/login?" + _query({}, next=str(request.url.path)), 303))
        except PageError as exc:
            resp = self._fail(request, session, api, exc.status, exc.message)
        except MQError as exc:
            resp = self._fail(request, session, api, *error_text(exc))
        return self._finish(request, resp, session, new)

    def _signed_in(self, session: Session) -> None:
        """SignInFirst unless the session may see pages (ACL off, or signed in)."""
        if self.dash.config.acl_enable and not session.signed_in:
            raise SignInFirst

    def _ctx(self, request: Request, session: Session, form: Mapping[str, list[str]] | None = None) -> Ctx:
        return Ctx(self.dash, session, dict(request.query_params), dict(request.path_params), form or {})

    def _page(self, view: View, api: bool) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            async def work(session: Session) -> Response:
                self._signed_in(session)
                data = await run_in_threadpool(view.load, self._ctx(request, session))
                return json_response(data) if api else self.render(request, session, view.template, data)
            return await self._serve(request, api, work)
        return handle

    def _download(self, make: Callable[[Ctx], Download]) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            async def work(session: Session) -> Response:
                self._signed_in(session)
                made = await run_in_threadpool(make, self._ctx(request, session))
                return StreamingResponse(made.chunks, media_type=made.media_type,
                                         headers={"Content-Disposition": f'attachment; filename="{made.filename}"'})
            return await self._serve(request, True, work)
        return handle

    async def _form(self, request: Request) -> dict[str, list[str]]:
        """The request's fields: a urlencoded form, or a JSON object (a script's)."""
        body = await request.body()
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                doc = orjson.loads(body) if body else {}
            except orjson.JSONDecodeError as exc:
                raise PageError(f"the body is not JSON: {exc}") from None
            if not isinstance(doc, dict):
                raise PageError("the body must be a JSON object of fields")
            return {str(k): [str(x) for x in v] if isinstance(v, list) else [str(v)] for k, v in doc.items()}
        try:
            return urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=10_000)
        except (UnicodeDecodeError, ValueError) as exc:
            raise PageError(f"the form could not be read: {exc}") from None

    async def _checked_form(self, request: Request, session: Session) -> dict[str, list[str]]:
        """The fields, once the CSRF token checks (PageError 403 otherwise)."""
        form = await self._form(request)
        token = request.headers.get(CSRF_HEADER) or (form.get(CSRF_FIELD) or [""])[0]
        if not session.csrf_ok(token):
            raise PageError("refused: the request carried no valid CSRF token. Reload the page and submit its "
                            f"form again (a script sends the csrfToken of GET /api/session in {CSRF_HEADER})", 403)
        return form

    def _action(self, action: Action, api: bool) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            async def work(session: Session) -> Response:
                form = await self._checked_form(request, session)
                self._signed_in(session)
                if action.admin and not session.rights.admin:
                    raise PageError(f"refused: the account {session.account.access_key} has no admin flag, which "
                                    "this change needs; sign in with an admin account", 403)
                done = await run_in_threadpool(action.run, self._ctx(request, session, form))
                self.dash.collector.refresh()
                if api:
                    return json_response({"ok": True, "message": done.message, "data": done.data})
                session.flash = done.message
                return RedirectResponse(done.location, 303)
            return await self._serve(request, api, work)
        return handle

    # -- sign-in -----------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """Liveness for compose's health check: 200 with the version."""
        return PlainTextResponse(f"ok rocketmesh-dashboard {__version__}\n")

    async def session_info(self, request: Request) -> Response:
        """The session's state and CSRF token, for scripts."""
        session, new = self._session(request)
        return self._finish(request, json_response({
            "csrfToken": session.csrf, "aclEnable": self.dash.config.acl_enable, "signedIn": session.signed_in,
            "accessKey": session.account.access_key, "rights": session.rights.to_json()}), session, new)

    async def login_page(self, request: Request) -> Response:
        session, new = self._session(request)
        if not self.dash.config.acl_enable:
            return self._finish(request, RedirectResponse("/", 303), session, new)
        data = {"next": _safe_next(request.query_params.get("next", "/"))}
        return self._finish(request, self.render(request, session, "login.html", data), session, new)

    async def login(self, request: Request) -> Response:
        api = request.url.path.startswith("/api/")
        session, new = self._session(request)
        try:
            form = await self._checked_form(request, session)
            if not self.dash.config.acl_enable:
                raise PageError("ACL is off: nothing to sign in to", 400)
            ak = (form.get("accessKey") or [""])[0].strip()
            sk = (form.get("secretKey") or [""])[0]
            if not ak or not sk:
                raise PageError("give both the accessKey and the secretKey", 400)
            account = Account(ak, sk)
            rights = await run_in_threadpool(account_rights, self.dash.accounts.admin(account))
        except PageError as exc:
            return self._finish(request, self._fail(request, session, api, exc.status, exc.message,
                                                    template="login.html"), session, new)
        except MQError as exc:
            status, message, code = error_text(exc)
            return self._finish(request, self._fail(request, session, api, status, f"sign-in refused: {message}",
                                                    code, template="login.html"), session, new)
        # A new session id at sign-in: an id planted before it is worth nothing after.
        self.dash.sessions.drop(session.sid)
        fresh = self.dash.sessions.new(account, rights, signed_in=True)
        self.dash.collector.refresh()
        if api:
            resp = json_response({"ok": True, "csrfToken": fresh.csrf, "rights": rights.to_json()})
        else:
            resp = RedirectResponse(_safe_next((form.get("next") or ["/"])[0]), 303)
        return self._finish(request, resp, fresh, True)

    async def logout(self, request: Request) -> Response:
        api = request.url.path.startswith("/api/")

        async def work(session: Session) -> Response:
            await self._checked_form(request, session)
            self.dash.sessions.drop(session.sid)
            resp: Response = (json_response({"ok": True}) if api
                              else RedirectResponse("/login" if self.dash.config.acl_enable else "/", 303))
            resp.delete_cookie(COOKIE, path="/")
            return resp
        return await self._serve(request, api, work)


def _safe_next(target: str) -> str:
    """A path of this site to go to after sign-in (never another site's address)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
