"""The one way we start a Python module of ours as a child process."""

from __future__ import annotations

import sys


def python_module_argv(module: str, *args: str) -> list[str]:
    """``python -P -m module args``: the command line that runs one of our modules as a process.

    ``-P`` keeps the working directory off the import path, so a folder that happens to be named
    like a package (``./rocketmesh``, a clone's parent) can never stand in for the installed one.
    """
    return [sys.executable, "-P", "-m", module, *args]
