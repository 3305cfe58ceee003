"""The command line and environment a Python module of ours runs with as a child process (started, waited for
and stopped by rocketmesh.runtime.launcher; ``rocketmesh <service>`` execs it), and the variables by which a
service and the processes around it (``rocketmesh up``, ``rocketmesh health``) find each other."""

from __future__ import annotations

import sys


def python_module_argv(module: str, *args: str) -> list[str]:
    """``python -P -m module args``: the command line that runs one of our modules as a process.

    ``-P`` keeps the working directory off the import path, so a folder that happens to be named
    like a package (``./rocketmesh``, a clone's parent) can never stand in for the installed one.
    """
    return [sys.executable, "-P", "-m", module, *args]


#: The pid of the process that started a service and stops it (``rocketmesh up`` sets it in each service's
#: environment): the service stops by itself when its parent is no longer that process. Unset (a container,
#: a process manager of one's own): it never does.
SUPERVISOR_PID_ENV = "ROCKETMESH_SUPERVISOR_PID"

#: Where a service writes the address it serves once it is ready (unset: nowhere). The image sets it, so
#: that ``rocketmesh health SERVICE`` in a container finds a replica that took a free port (port 0).
ADDRESS_FILE_ENV = "ROCKETMESH_ADDRESS_FILE"
