"""LocalMesh: a real name server and broker (and, on request, the scheduler and the txn-checker) as processes
on free loopback ports in a temporary folder, for an application's tests.

    with LocalMesh() as mesh:
        mesh.create_topic("Orders", queues=4)
        with Producer("orders-producer", mesh.namesrv_addr) as producer:
            producer.send(Message("Orders", b"..."))
        ...
        mesh.wait_for_zero_lag("orders-consumer", "Orders")

The services run as ``rocketmesh up`` runs them (rocketmesh.runtime.launcher, ``python -m
rocketmesh.<service>``), with small store files. The name server and the broker start at once (the
broker's first registration waits for the name server), and the mesh counts as started when the name
server answers a request and lists the broker in its cluster table. Every wait is bounded; a service that
does not come up raises :class:`~rocketmesh.runtime.launcher.ServiceStartError` with the last lines of
its output, after what was started is stopped and the folder removed. ``stop()`` sends SIGTERM to each
service, newest first, then SIGKILL past ``stop_timeout_s``, and removes the folder.

Should the test process die without stopping the mesh, each service notices that its parent is gone and
stops by itself within a second.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from rocketmesh.client import Admin, MQClientError, MQError, TopicRouteData
from rocketmesh.model.route import Perm
from rocketmesh.remoting import ResponseCode
from rocketmesh.runtime.launcher import ServiceStartError
from rocketmesh.runtime.python_process import python_module_argv
from rocketmesh.testing.commands import (
    FAST_CHECKER,
    FAST_SCHEDULER,
    broker_args,
    namesrv_args,
    system_service_args,
)
from rocketmesh.testing.ports import free_port
from rocketmesh.testing.probes import answers, broker_registered, owns_queues
from rocketmesh.testing.process import ServiceProcess

__all__ = ["LocalMesh", "ServiceStartError"]


@dataclass
class LocalMesh:
    """A name server and a broker (``scheduler``, ``txn_checker``: those too) for tests; ``start()`` /
    ``stop()``, or ``with LocalMesh() as mesh``.

    The ``*_config`` mappings are service settings under RocketMQ's key names (``--set KEY=VALUE``):
    ``broker_config={"autoCreateTopicEnable": "false"}``, say. The scheduler and the txn-checker run with
    timings of a second or less (:data:`~rocketmesh.testing.commands.FAST_SCHEDULER`,
    :data:`~rocketmesh.testing.commands.FAST_CHECKER`): a delayed message goes out on time from the start,
    and a half message left undecided is checked a second after its birth.
    """

    #: Start the scheduler too (delay levels and timer messages); see also :meth:`start_scheduler`.
    scheduler: bool = False
    #: Start the txn-checker too (check-back of undecided transactions); see also :meth:`start_txn_checker`.
    txn_checker: bool = False
    broker_name: str = "broker-a"
    cluster: str = "DefaultCluster"
    namesrv_config: Mapping[str, object] = field(default_factory=dict)
    broker_config: Mapping[str, object] = field(default_factory=dict)
    scheduler_config: Mapping[str, object] = field(default_factory=lambda: dict(FAST_SCHEDULER))
    txn_checker_config: Mapping[str, object] = field(default_factory=lambda: dict(FAST_CHECKER))
    #: Added to the services' environment (``OTEL_*`` settings, say).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Where the temporary folder is made (None: the system's temporary directory).
    parent_dir: str | None = None
    #: Leave the folder (stores and logs) in place at ``stop()``, to look at after a failure.
    keep_dir: bool = False
    #: Bound on ``start()`` and on each service started later.
    start_timeout_s: float = 30.0
    #: How long each service may take to stop after SIGTERM before it gets SIGKILL.
    stop_timeout_s: float = 10.0

    _dir: Path | None = field(default=None, init=False, repr=False)
    _namesrv_addr: str = field(default="", init=False, repr=False)
    _broker_addr: str = field(default="", init=False, repr=False)
    _services: dict[str, ServiceProcess] = field(default_factory=dict, init=False, repr=False)
    _admin: Admin | None = field(default=None, init=False, repr=False)

    # -- life cycle ------------------------------------------------------------------------------------------

    def start(self) -> LocalMesh:
        """Start the name server and the broker (and what was asked for besides) and wait until the broker is
        registered; returns self. ServiceStartError (with the output) when a service does not come up."""
        if self._dir is not None:
            raise RuntimeError("this LocalMesh is started already")
        self._dir = Path(tempfile.mkdtemp(prefix="rocketmesh-", dir=self.parent_dir))
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout_s
        try:
            port = free_port()
            self._namesrv_addr = f"127.0.0.1:{port}"
            namesrv = self._launch("namesrv", "rocketmesh.namesrv",
                                   namesrv_args(port, str(self._dir / "namesrv" / "kvConfig.json"),
                                                self.namesrv_config))
            # Launched before the name server answers: the two start side by side, and the broker's first
            # registration waits (bounded) for the name server's port to open.
            broker = self._launch(self.broker_name, "rocketmesh.broker",
                                  broker_args(self._namesrv_addr, 0, str(self._dir / self.broker_name / "store"),
                                              self.broker_name, self.cluster, self.broker_config))
            namesrv.wait_ready(_left(deadline), lambda _address: answers(self._namesrv_addr))
            self._broker_addr = broker.wait_ready(
                _left(deadline),
                lambda address: broker_registered(self._namesrv_addr, self.broker_name, address))
            if self.scheduler:
                self._start_system_service("scheduler", "rocketmesh.scheduler", self.scheduler_config, deadline)
            if self.txn_checker:
                self._start_system_service("txn-checker", "rocketmesh.txn_checker", self.txn_checker_config,
                                           deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every service, newest first (SIGTERM, then SIGKILL past ``stop_timeout_s``), and remove the
        folder unless ``keep_dir``. Safe to call twice; the mesh may be started again after."""
        atexit.unregister(self.stop)
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        for service in reversed(list(self._services.values())):
            service.stop(self.stop_timeout_s)
        self._services.clear()
        if self._dir is not None and not self.keep_dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir, self._namesrv_addr, self._broker_addr = None, "", ""

    def __enter__(self) -> LocalMesh:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start_scheduler(self) -> ServiceProcess:
        """The scheduler replica of this mesh, started now unless it runs already; waits until it has taken
        the broker's delay-level queues."""
        return self._start_system_service("scheduler", "rocketmesh.scheduler", self.scheduler_config,
                                          time.monotonic() + self.start_timeout_s)

    def start_txn_checker(self) -> ServiceProcess:
        """The txn-checker replica of this mesh, started now unless it runs already; waits until it has taken
        the broker's half-message queues."""
        return self._start_system_service("txn-checker", "rocketmesh.txn_checker", self.txn_checker_config,
                                          time.monotonic() + self.start_timeout_s)

    # -- what a test uses --------------------------------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        """The name server's ``host:port``, for a Producer's, consumer's or Admin's ``namesrv``."""
        self._require_started()
        return self._namesrv_addr

    @property
    def broker_addr(self) -> str:
        """The broker's ``host:port``."""
        self._require_started()
        return self._broker_addr

    @property
    def dir(self) -> Path:
        """The temporary folder: each service's output (``<name>/<name>.stdout``, ``.stderr``) and store."""
        self._require_started()
        assert self._dir is not None
        return self._dir

    @property
    def services(self) -> dict[str, ServiceProcess]:
        """The processes started, by name (namesrv, the broker's name, scheduler, txn-checker)."""
        return dict(self._services)

    @property
    def admin(self) -> Admin:
        """An Admin of this mesh (closed by ``stop()``)."""
        if self._admin is None:
            self._admin = Admin(self.namesrv_addr)
        return self._admin

    def create_topic(self, topic: str, queues: int = 4, *, order: bool = False,
                     perm: int = int(Perm.READ | Perm.WRITE), timeout_s: float = 10.0) -> TopicRouteData:
        """Create ``topic`` on the broker with ``queues`` read and write queues (or bring it to that many) and
        wait until the name server routes it so; returns the route. TimeoutError when it does not in time."""
        self.admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues, perm=perm, order=order)
        deadline = time.monotonic() + timeout_s
        route: TopicRouteData | None = None
        while True:
            try:
                route = self.admin.topic_route(topic)
                if any(q.read_queue_nums == queues and q.write_queue_nums == queues for q in route.queue_datas):
                    return route
            except MQError as exc:
                if getattr(exc, "response_code", None) != ResponseCode.TOPIC_NOT_EXIST:
                    raise
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the name server did not route {topic} with {queues} queues within "
                                   f"{timeout_s:g} s (last route: {route})")
            time.sleep(0.05)

    def wait_for_zero_lag(self, group: str, topic: str | None = None, timeout_s: float = 30.0) -> None:
        """Wait until consumer group ``group`` has consumed everything stored (in ``topic``, else in every topic
        it consumes): the broker's offsets minus the group's committed ones sum to 0. AssertionError naming
        the lag left per queue when it does not within ``timeout_s``.

        A consumer commits its offsets every few seconds (PushConsumer's
        ``persist_consumer_offset_interval_ms``, 5 s by default), so the lag reaches 0 that long after the
        messages were consumed."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                stats = self.admin.consume_stats(group, topic)
                left = {mq: w.diff for mq, w in stats.offset_table.items() if w.diff}
                if not left:
                    return
                state = f"still lags {sum(left.values())} message(s): " + ", ".join(
                    f"{mq.topic}/{mq.broker_name}/{mq.queue_id}: {diff}" for mq, diff in left.items())
            except MQClientError as exc:
                if exc.response_code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
                state = "has no progress on the broker (never consumed, or not started)"
            if time.monotonic() >= deadline:
                where = f" in {topic}" if topic else ""
                raise AssertionError(f"consumer group {group}{where} {state} after {timeout_s:g} s")
            time.sleep(0.1)

    # -- inside ----------------------------------------------------------------------------------------------

    def _require_started(self) -> None:
        if self._dir is None or not self._namesrv_addr:
            raise RuntimeError("the LocalMesh is not started: start() it, or use it as a context manager")

    def _launch(self, name: str, module: str, args: list[str]) -> ServiceProcess:
        assert self._dir is not None
        service = ServiceProcess(name, python_module_argv(module, *args), self._dir / name, self.env)
        self._services[name] = service
        return service.launch()

    def _start_system_service(self, name: str, module: str, config: Mapping[str, object],
                              deadline: float) -> ServiceProcess:
        running = self._services.get(name)
        if running is not None and running.alive:
            return running
        self._require_started()
        # Started after the broker is registered, so its first rebalance finds the broker's queues.
        service = self._launch(name, module, system_service_args(self._namesrv_addr, 0, name, config))
        service.wait_ready(_left(deadline), owns_queues)
        return service


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
