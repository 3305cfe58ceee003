"""The dashboard's pages: what each shows (a :class:`~rocketmesh.dashboard.web.View`) and changes (an
:class:`~rocketmesh.dashboard.web.Action`)."""

from __future__ import annotations

from collections.abc import Callable

from ..web import Action, Ctx, Download, View
from . import cluster, dlq, groups, messages, overview, producers, topics, transactions

VIEWS: list[View] = [*overview.VIEWS, *cluster.VIEWS, *topics.VIEWS, *groups.VIEWS, *producers.VIEWS,
                     *messages.VIEWS, *dlq.VIEWS, *transactions.VIEWS]
ACTIONS: list[Action] = [*topics.ACTIONS, *groups.ACTIONS, *messages.ACTIONS, *dlq.ACTIONS]
DOWNLOADS: dict[str, Callable[[Ctx], Download]] = {**dlq.DOWNLOADS}
