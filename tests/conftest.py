"""Shared fixtures for every test folder: real service processes (see tests/procs.py), a remoting client,
tracing receivers, and the RELIABILITY.md recorder.

A module that needs a default name server and broker, and neither restarts nor reconfigures them, uses the
session's shared mesh instead of processes of its own: the pytest plugin's ``rocketmesh_mesh`` and
``rocketmesh_namesrv`` (rocketmesh.testing, loaded by its entry point), with ``mesh_admin`` and
``mesh_producer`` below."""

from __future__ import annotations

import glob
import os
import signal
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otlp_receiver import OtlpReceiver
from procs import (
    FAST_SCHEDULER,
    LAUNCHED,
    BrokerProcess,
    HaProcess,
    NamesrvProcess,
    SchedulerProcess,
    SystemServiceProcess,
    TxnCheckerProcess,
    launched_output,
)
from reliability import LONG_ENV, REPORT_ENV, ReliabilityRecorder, merge_rows, save_rows, write_report
from rocketmesh import Admin, Producer
from rocketmesh.remoting import RemotingClient
from rocketmesh.testing import LocalMesh
from tracekit import install_app_exporter


@pytest.fixture
def start_namesrv(tmp_path: Path) -> Iterator[Callable[..., NamesrvProcess]]:
    """Factory: ``start_namesrv(scanNotActiveBrokerInterval=200, ...)`` starts a name server; all stop at teardown."""
    started: list[NamesrvProcess] = []

    def start(**config: object) -> NamesrvProcess:
        proc = NamesrvProcess(tmp_path / f"namesrv{len(started)}", name=f"namesrv{len(started)}", **config)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def namesrv(start_namesrv: Callable[..., NamesrvProcess]) -> NamesrvProcess:
    """A name server with default settings."""
    return start_namesrv()


@pytest.fixture
def start_broker(tmp_path: Path,
                 start_namesrv: Callable[..., NamesrvProcess]) -> Iterator[Callable[..., BrokerProcess]]:
    """Factory: ``start_broker(namesrv_addr, name="broker-a", registerNameServerPeriod=500, ...)``
    starts a broker with small store files and waits until the name server lists it; all stop at teardown,
    before the name servers (so their unregistering is answered)."""
    started: list[BrokerProcess] = []

    def start(namesrv: str, name: str = "broker-a", **config: object) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"{name}-{len(started)}", namesrv, name=name, **config)
        started.append(proc)
        proc.start(timeout_s=30)
        proc.wait_registered()
        return proc

    yield start
    for proc in started:
        if proc.alive:
            os.kill(proc.pid, signal.SIGCONT)  # a test may have left it stopped
        proc.stop()


@pytest.fixture
def broker_args(request: pytest.FixtureRequest) -> dict[str, object]:
    """The settings (RocketMQ's key names) the ``broker`` fixture starts its broker with: the test module's
    ``BROKER_ARGS``, none by default. A module whose settings come from other fixtures (a port picked for the
    test, a receiver that must run first) overrides this fixture instead."""
    return dict(getattr(request.module, "BROKER_ARGS", {}))


@pytest.fixture
def broker(namesrv: NamesrvProcess, start_broker: Callable[..., BrokerProcess],
           broker_args: dict[str, object]) -> BrokerProcess:
    """A broker registered with ``namesrv``, started with ``broker_args``."""
    return start_broker(namesrv.addr, **broker_args)


@pytest.fixture
def admin(namesrv: NamesrvProcess, broker: BrokerProcess) -> Iterator[Admin]:
    """An Admin of the mesh of ``namesrv`` and ``broker``."""
    with Admin(namesrv.addr) as a:
        yield a


@pytest.fixture
def producer(namesrv: NamesrvProcess, broker: BrokerProcess) -> Iterator[Producer]:
    """A started Producer (group test-producer) of the mesh of ``namesrv`` and ``broker``."""
    with Producer("test-producer", namesrv.addr) as p:
        yield p


@pytest.fixture
def mesh_admin(rocketmesh_mesh: LocalMesh) -> Admin:
    """The Admin of the session's shared mesh: the pytest plugin's ``rocketmesh_mesh`` (rocketmesh.testing),
    for the modules that need a default name server and broker and neither restart nor reconfigure them.
    Such a module's tests share the mesh with each other and with the other such modules of the session (of
    the xdist worker): each keeps to topics and groups of its own."""
    return rocketmesh_mesh.admin


@pytest.fixture(scope="session")
def mesh_producer(rocketmesh_namesrv: str) -> Iterator[Producer]:
    """A started Producer (group test-producer) of the session's shared mesh (see ``mesh_admin``)."""
    with Producer("test-producer", rocketmesh_namesrv) as p:
        yield p


def _replicas(tmp_path: Path, cls: type[SystemServiceProcess], prefix: str
              ) -> tuple[Callable[..., SystemServiceProcess], list[SystemServiceProcess]]:
    started: list[SystemServiceProcess] = []

    def start(namesrv: str, name: str | None = None, **config: object) -> SystemServiceProcess:
        name = name or f"{prefix}{len(started)}"
        proc = cls(tmp_path / name, namesrv, name=name, **config)
        started.append(proc)
        return proc.start(timeout_s=30)
    return start, started


@pytest.fixture
def start_scheduler(tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    """Factory: ``start_scheduler(namesrv_addr, name="scheduler0", rebalanceIntervalMs=2000, ...)`` starts a
    scheduler replica (a member of the system group that delivers delayed and timer messages); all stop at
    teardown. Start it after the brokers, so it finds their queues at once."""
    start, started = _replicas(tmp_path, SchedulerProcess, "scheduler")
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def scheduler(namesrv: NamesrvProcess, broker: BrokerProcess,
              start_scheduler: Callable[..., SchedulerProcess]) -> SchedulerProcess:
    """A scheduler replica (``FAST_SCHEDULER`` timings) serving ``broker``, started after it."""
    return start_scheduler(namesrv.addr, **FAST_SCHEDULER)


@pytest.fixture
def start_txn_checker(tmp_path: Path) -> Iterator[Callable[..., TxnCheckerProcess]]:
    """Factory: ``start_txn_checker(namesrv_addr, name="txn-checker0", transactionCheckInterval=500, ...)``
    starts a txn-checker replica (a member of the system group that checks undecided half messages); all
    stop at teardown. Start it after the brokers, so it finds their half queues at once."""
    start, started = _replicas(tmp_path, TxnCheckerProcess, "txn-checker")
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def start_ha(tmp_path: Path) -> Iterator[Callable[..., HaProcess]]:
    """Factory: ``start_ha(namesrv_addr, brokerName="broker-a", ...)`` starts the ha service of a slave (it
    replicates the slave's commitlog from its master); all stop at teardown."""
    start, started = _replicas(tmp_path, HaProcess, "ha")
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def remoting_client() -> Iterator[RemotingClient]:
    """A RemotingClient, closed at teardown."""
    client = RemotingClient(name="test")
    yield client
    client.close()


@pytest.fixture(scope="session")
def app_span_exporter() -> InMemorySpanExporter:
    """The test process's own OpenTelemetry SDK, as an application configures one: the client's spans."""
    return install_app_exporter()


@pytest.fixture
def spans(app_span_exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """The client's spans finished during the test."""
    app_span_exporter.clear()
    yield app_span_exporter
    app_span_exporter.clear()


@pytest.fixture
def otlp_receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP receiver; the service processes the test starts from here on export their spans to it."""
    rx = OtlpReceiver().start()
    for key, value in rx.env().items():
        monkeypatch.setenv(key, value)
    yield rx
    rx.stop()


_RECORDER = ReliabilityRecorder(long=os.environ.get(LONG_ENV) == "1")


@pytest.fixture(scope="session")
def reliability() -> ReliabilityRecorder:
    """The session's RELIABILITY.md rows (see tests/reliability.py); ``reliability.long`` asks for the long variants."""
    return _RECORDER


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    """An executor for the handlers a test registers on a RemotingServer (4 threads)."""
    executor = ThreadPoolExecutor(4, thread_name_prefix="test-handler")
    yield executor
    executor.shutdown(wait=False, cancel_futures=True)


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's modules once, in the controller: where the environment forbids writing bytecode
    (PYTHONDONTWRITEBYTECODE), each of the hundreds of service and CLI processes the tests start would
    otherwise compile every module it imports again (about 0.2 s a broker). Reading bytecode stays allowed."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    import rocketmesh

    compileall.compile_dir(os.path.dirname(rocketmesh.__file__), quiet=1)


_LAUNCHED_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_LAUNCHED_BEFORE] = len(LAUNCHED)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                            pytest.TestReport]:
    """A test that fails in its setup or body reports the last lines of each service it started, so a failure
    seen once (in CI, say) shows what the services were doing."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        output = launched_output(item.stash.get(_LAUNCHED_BEFORE, len(LAUNCHED)))
        if output:
            report.sections.append(("services the test started", output))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules marked ``heavy`` first: under ``-n 2 --dist loadfile`` a worker takes a whole module at a time,
    so a module of several minutes taken last keeps one worker busy while the other has nothing left; taken
    first, the short modules fill the other worker around it. (The sort is stable: a module's tests stay
    together and in their order.) Run with ``--no-loadscope-reorder``, as .ci/run does: by default xdist
    orders the modules by their number of tests instead."""
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(REPORT_ENV)
    if not target:
        return
    path = Path(target).absolute()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:  # the controller writes the report from every worker's rows
        save_rows(_RECORDER, path.with_name(f"{path.name}.{worker}.json"))
        return
    for share in sorted(path.parent.glob(f"{glob.escape(path.name)}.*.json")):
        merge_rows(_RECORDER, share)
        share.unlink()
    if not _RECORDER.empty:
        write_report(_RECORDER, path)
