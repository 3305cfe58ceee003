"""The pytest plugin of rocketmesh (entry point ``pytest11``: ``rocketmesh``): a real mesh for a test session.

Fixtures, all session-scoped and prefixed ``rocketmesh_`` so that they never clash with an application's own:

- ``rocketmesh_mesh``: a started :class:`~rocketmesh.testing.mesh.LocalMesh` (name server and broker), stopped
  and removed at the end of the session. Its helpers: ``namesrv_addr``, ``create_topic``,
  ``wait_for_zero_lag``, ``admin``.
- ``rocketmesh_namesrv``: that mesh's name server address (``"127.0.0.1:PORT"``).
- ``rocketmesh_scheduler``: the scheduler started on that mesh (delay levels and timer messages delivered).
- ``rocketmesh_txn_checker``: the txn-checker started on that mesh (undecided transactions checked back).
- ``rocketmesh_mesh_options``: the keyword arguments the mesh is made with (none); an application's
  conftest.py overrides it to configure the mesh (``{"broker_config": {...}}``).

The mesh starts when a test first asks for one of these fixtures. Under pytest-xdist each worker is a
session of its own, so each worker starts its own mesh.

This module is loaded in every pytest session of a Python that has rocketmesh installed: it imports
pytest only, and the mesh's code when a fixture first runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from rocketmesh.testing.mesh import LocalMesh
    from rocketmesh.testing.process import ServiceProcess


@pytest.fixture(scope="session")
def rocketmesh_mesh_options() -> dict[str, Any]:
    """Keyword arguments of the session's LocalMesh (none); override this fixture to configure it."""
    return {}


@pytest.fixture(scope="session")
def rocketmesh_mesh(rocketmesh_mesh_options: dict[str, Any]) -> Iterator[LocalMesh]:
    """A name server and a broker on free loopback ports for the whole session (see LocalMesh)."""
    from rocketmesh.testing.mesh import LocalMesh

    with LocalMesh(**rocketmesh_mesh_options) as mesh:
        yield mesh


@pytest.fixture(scope="session")
def rocketmesh_namesrv(rocketmesh_mesh: LocalMesh) -> str:
    """The session mesh's name server address, ``"127.0.0.1:PORT"``."""
    return rocketmesh_mesh.namesrv_addr


@pytest.fixture(scope="session")
def rocketmesh_scheduler(rocketmesh_mesh: LocalMesh) -> ServiceProcess:
    """The scheduler on the session mesh, started on first request: delayed and timer messages go out."""
    return rocketmesh_mesh.start_scheduler()


@pytest.fixture(scope="session")
def rocketmesh_txn_checker(rocketmesh_mesh: LocalMesh) -> ServiceProcess:
    """The txn-checker on the session mesh, started on first request: undecided half messages are checked."""
    return rocketmesh_mesh.start_txn_checker()
