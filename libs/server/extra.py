"""Whether the ``server`` extra is installed: a service started without it says so in one line and exits.

``pip install rocketmesh`` is the SDK and the CLI; the services' own dependencies (the OpenTelemetry SDK and
its exporters, the Prometheus client, PyYAML for the ACL file, zlib-ng for the store's checksums, structlog for
the JSON-lines log) come with ``pip install 'rocketmesh[server]'``. This module uses the standard library
only, so that it can run first.
"""

from __future__ import annotations

import importlib.util
import sys

#: What to run to get the services' dependencies.
INSTALL_HINT = "pip install 'rocketmesh[server]'"

#: One importable module of each distribution the ``server`` extra brings.
SERVER_MODULES = (
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp.proto.http",
    "opentelemetry.exporter.otlp.proto.grpc",
    "opentelemetry.exporter.prometheus",
    "prometheus_client",
    "yaml",
    "zlib_ng",
    "structlog",
)

#: One importable module of each distribution the ``dashboard`` extra adds to the server's.
DASHBOARD_MODULES = ("starlette", "jinja2", "uvicorn")

#: The modules each extra brings.
EXTRA_MODULES = {"server": SERVER_MODULES, "dashboard": SERVER_MODULES + DASHBOARD_MODULES}

#: The exit status of a service started without the extra (as for a config it cannot use).
EXIT_MISSING = 2


def missing_server_modules(extra: str = "server") -> list[str]:
    """The modules of ``extra`` (:data:`EXTRA_MODULES`) that cannot be imported here."""
    missing = []
    for name in EXTRA_MODULES[extra]:
        try:
            found = importlib.util.find_spec(name) is not None
        except ImportError:  # a parent package is missing too
            found = False
        if not found:
            missing.append(name)
    return missing


def missing_extra_line(what: str, extra: str, missing: list[str]) -> str:
    """The one line that says ``what`` needs ``extra``'s ``missing`` modules, and what to install."""
    hint = INSTALL_HINT if extra == "server" else f"pip install 'rocketmesh[{extra}]'"
    return f"{what} needs the {extra} extra's dependencies (missing: {', '.join(missing)}): {hint}"


def require_server_extra(what: str, extra: str = "server") -> None:
    """Exit with one line on stderr naming the extra to install when ``what`` (``broker``, ``rocketmesh up``
    ...) cannot run here for want of that extra's dependencies (the server's, or the ``dashboard``'s);
    return otherwise."""
    missing = missing_server_modules(extra)
    if missing:
        print(missing_extra_line(what, extra, missing), file=sys.stderr, flush=True)
        raise SystemExit(EXIT_MISSING)
