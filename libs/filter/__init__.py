"""Message filtering by subscription expression: tags (``"TagA || TagB"``) or SQL92 selectors
over message properties, with RocketMQ 4.x's semantics."""

from __future__ import annotations

from rocketmesh.filter.errors import FilterSyntaxError
from rocketmesh.filter.expression_type import ExpressionType
from rocketmesh.filter.sql92 import SqlFilter, compile_sql
from rocketmesh.filter.subscription import SUB_ALL, SubscriptionData, build_subscription

__all__ = [
    "SUB_ALL",
    "ExpressionType",
    "FilterSyntaxError",
    "SqlFilter",
    "SubscriptionData",
    "build_subscription",
    "compile_sql",
]
