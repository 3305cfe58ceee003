"""The dashboard's ASGI application, made from its config."""

from __future__ import annotations

import os

from starlette.applications import Starlette

from .config import DashboardConfig
from .pages import ACTIONS, DOWNLOADS, VIEWS
from .web import App, Dashboard


def create_app(config: DashboardConfig) -> tuple[Starlette, Dashboard]:
    """The application and the state it serves (start ``dashboard.collector`` to sample the mesh)."""
    namesrv = config.namesrv_addr or os.environ.get("NAMESRV_ADDR", "")
    if not namesrv:
        raise ValueError("no name server: give -n host:port (namesrvAddr) or set NAMESRV_ADDR")
    dash = Dashboard(config, namesrv)
    return App(dash, VIEWS, ACTIONS, DOWNLOADS).starlette, dash
