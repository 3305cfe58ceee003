"""Free loopback ports for the services a test starts, from this pytest-xdist worker's own block.

A port one process picked but whose service has not bound it yet looks free to every other process. The
launcher's :class:`~rocketmesh.runtime.launcher.PortPicker` never hands a port out twice within a process;
across the workers of one ``pytest -n N`` run, each picks from its own slice of the range, so two workers
never race for one port either.
"""

from __future__ import annotations

import os

from rocketmesh.runtime.launcher import PortPicker, service_port_range

__all__ = ["free_port", "worker_share"]


def worker_share(ports: range) -> range:
    """This pytest-xdist worker's block of ``ports`` (all of them outside xdist, or with one worker)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1):
        return ports
    size = len(ports) // int(count)
    index = int(worker[2:]) % int(count)
    return ports[index * size:(index + 1) * size]


#: A free port for a service a test starts (the launcher's picker, on this worker's block).
free_port = PortPicker(worker_share(service_port_range()))
