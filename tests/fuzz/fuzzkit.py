"""What the fuzz targets share: hypothesis settings sized for CI, and an input counter for RELIABILITY.md.

Settings are built per target (``fuzz_settings(n)``) rather than loaded as a global profile, so that
running tests/fuzz beside other hypothesis tests changes nothing for them.

CI runs are derandomized and keep no example database: the same inputs every run, so a red CI run is
reproduced by running the same command, and a green one cannot turn red by luck on an unrelated change.
New inputs are explored by the long variant (``ROCKETMESH_LONG_FAULTS=1``): random, more examples,
with the default local database so a failure found there replays until it is fixed; each failure it
finds is kept as an ``@example`` in the target.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings

from reliability import LONG_ENV

#: The long variant explores this many times the CI examples.
LONG_FACTOR = 20
LONG = os.environ.get(LONG_ENV) == "1"

settings.register_profile(
    "rocketmesh-fuzz-ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "rocketmesh-fuzz-long",
    derandomize=False,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def fuzz_settings(max_examples: int) -> settings:
    """Settings for a target that runs ``max_examples`` in CI (``LONG_FACTOR`` times as many in the long variant).

    ``deadline=None``: a target's time is bounded by its example count, and a round trip to a live
    process varies with the machine's load, which is no failure of the input.
    """
    profile = settings.get_profile("rocketmesh-fuzz-long" if LONG else "rocketmesh-fuzz-ci")
    return settings(profile, max_examples=max_examples * (LONG_FACTOR if LONG else 1))


class Tally:
    """Counts the examples a target actually ran (explicit ``@example``s included), for ``reliability.fuzz``."""

    def __init__(self) -> None:
        self.inputs = 0

    def counted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, counting each call; put it under ``@given``, so hypothesis sees ``fn``'s signature."""
        import functools

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.inputs += 1
            return fn(*args, **kwargs)
        return wrapper
