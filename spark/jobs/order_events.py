"""The input of ``merchant_totals``: order events, JSON bodies, sent in batches.

    python -m rocketmesh.spark.jobs.order_events -n 127.0.0.1:9876 -t Orders --count 100000

Each event is ``{"order_id": "o-17", "merchant": "m-3", "amount": 42.5, "event_time": 1764000000000}``
with the order id as its key and the merchant as its tag. Events are a function of
``--seed``, so a run can be checked against :func:`order_events`.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import orjson

from rocketmesh.client import NAMESRV_ADDR_ENV, Producer
from rocketmesh.model.message import Message

BATCH = 100


@dataclass(frozen=True, slots=True)
class OrderEvent:
    """One order: who sold, how much, when (epoch ms)."""

    order_id: str
    merchant: str
    amount: float
    event_time: int


def order_events(count: int, *, merchants: int = 20, start_ms: int = 0, spacing_ms: int = 10,
                 seed: int = 1) -> Iterator[OrderEvent]:
    """``count`` events, ``spacing_ms`` apart from ``start_ms``; amounts 1.00..500.00, merchants m-0.."""
    rng = random.Random(seed)
    for i in range(count):
        yield OrderEvent(f"o-{i}", f"m-{rng.randrange(merchants)}", rng.randrange(100, 50_001) / 100.0,
                         start_ms + i * spacing_ms)


def send_events(producer: Producer, topic: str, events: Iterator[OrderEvent], rate: float = 0.0) -> int:
    """Send ``events`` in batches of :data:`BATCH` (at most ``rate`` events a second when > 0); returns the count."""
    sent = 0
    began = time.monotonic()
    batch: list[Message] = []
    for event in events:
        batch.append(Message(topic, orjson.dumps(asdict(event)), keys=event.order_id, tags=event.merchant))
        if len(batch) >= BATCH:
            producer.send_batch(batch)
            sent += len(batch)
            batch = []
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
    if batch:
        producer.send_batch(batch)
        sent += len(batch)
    return sent


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rocketmesh.spark.jobs.order_events",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--namesrv", default=os.environ.get(NAMESRV_ADDR_ENV, "127.0.0.1:9876"))
    parser.add_argument("-t", "--topic", default="Orders")
    parser.add_argument("-c", "--count", type=int, default=10_000)
    parser.add_argument("--merchants", type=int, default=20)
    parser.add_argument("--rate", type=float, default=0.0, help="events a second (0: as fast as possible)")
    parser.add_argument("--start-ms", type=int, default=None, help="event time of the first event (default now)")
    parser.add_argument("--spacing-ms", type=int, default=10, help="event time between two events")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    with Producer("order-events", args.namesrv) as producer:
        n = send_events(producer, args.topic, order_events(args.count, merchants=args.merchants, start_ms=start,
                                                             spacing_ms=args.spacing_ms, seed=args.seed), args.rate)
    print(f"sent {n} order events to {args.topic}", flush=True)


if __name__ == "__main__":
    main()
