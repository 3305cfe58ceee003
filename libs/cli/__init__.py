"""The ``rocketmesh`` console script: ``main`` (commands and ``up``), ``admin`` (mqadmin's commands,
produce, consume), ``help`` (how --help prints), ``supervisor`` (the processes ``up`` runs)."""

from rocketmesh.cli.main import main

__all__ = ["main"]
