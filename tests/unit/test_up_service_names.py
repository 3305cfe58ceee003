"""The name each service ``rocketmesh up`` starts traces under (its log of tracing_configured says so
for the mesh without a slave: tests/mesh/test_cli.py)."""

from __future__ import annotations

from rocketmesh.cli.main import SERVICES
from rocketmesh.cli.supervisor import otel_service_name


def test_each_service_up_starts_traces_as_rocketmesh_dash_its_name() -> None:
    assert {kind: otel_service_name(module) for kind, module in SERVICES.items()} == {
        "namesrv": "rocketmesh-namesrv", "broker": "rocketmesh-broker", "scheduler": "rocketmesh-scheduler",
        "txn-checker": "rocketmesh-txn-checker", "ha": "rocketmesh-ha", "dashboard": "rocketmesh-dashboard"}
