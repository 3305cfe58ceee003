"""The public API is the documented one: what the README and the docs use and what users subclass is exported from
``rocketmesh`` (and ``rocketmesh.client``); the machinery stays importable from its own module only."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import rocketmesh
import rocketmesh.client

ROOT = Path(__file__).resolve().parents[2]
#: What a user reads: the README and the documentation site's pages.
DOCS = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def test_every_exported_name_imports() -> None:
    for name in rocketmesh.__all__:
        assert getattr(rocketmesh, name) is not None
    for name in rocketmesh.client.__all__:
        assert getattr(rocketmesh.client, name) is not None


def test_what_the_docs_import_from_rocketmesh_is_exported() -> None:
    imported = {n.strip() for group in re.findall(r"from rocketmesh import ([^\n]+)", DOCS) for n in group.split(",")}
    assert imported and imported <= set(rocketmesh.__all__)


def test_what_users_subclass_or_configure_is_exported() -> None:
    for name in ("TransactionListener", "MessageQueueSelector", "PushConsumerOptions", "PullConsumerOptions"):
        assert name in rocketmesh.__all__


def test_internals_are_not_exported_but_stay_importable_from_their_modules() -> None:
    internals = {"ClientInstance": "rocketmesh.client.instance", "MQFaultStrategy": "rocketmesh.client.fault",
                 "LatencyFaultTolerance": "rocketmesh.client.fault", "TopicPublishInfo": "rocketmesh.client.route",
                 "create_unique_id": "rocketmesh.client.unique_id"}
    for name, module in internals.items():
        assert name not in rocketmesh.client.__all__ and name not in rocketmesh.__all__
        assert getattr(importlib.import_module(module), name) is not None
