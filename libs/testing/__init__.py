"""rocketmesh.testing: a pytest plugin that gives an application's tests a real mesh on free ports.

``pip install 'rocketmesh[testing]'`` registers the plugin (:mod:`rocketmesh.testing.plugin`, the
``pytest11`` entry point ``rocketmesh``): session fixtures ``rocketmesh_mesh`` (a started
:class:`LocalMesh`), ``rocketmesh_namesrv`` (its name server address), ``rocketmesh_scheduler`` and
``rocketmesh_txn_checker``. Outside pytest, :class:`LocalMesh` is the same mesh as a context manager.

The names load on first use, so that pytest loading the plugin in every session stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LocalMesh": "rocketmesh.testing.mesh",
    "ServiceProcess": "rocketmesh.testing.process",
    "ServiceStartError": "rocketmesh.runtime.launcher",
}

__all__ = ["LocalMesh", "ServiceProcess", "ServiceStartError"]

if TYPE_CHECKING:
    from rocketmesh.runtime.launcher import ServiceStartError
    from rocketmesh.testing.mesh import LocalMesh
    from rocketmesh.testing.process import ServiceProcess


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rocketmesh.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
