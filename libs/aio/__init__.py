"""rocketmesh for asyncio: the SDK's clients with ``async`` methods, on the same core.

    from rocketmesh import Message
    from rocketmesh.aio import AsyncProducer

    async with AsyncProducer("orders-producer", "127.0.0.1:9876") as producer:
        result = await producer.send(Message("Orders", b"..."))

Each async client wraps its threaded twin: routes, retries, rebalance, offsets and the wire are the
threaded SDK's, shared with it. What changes is where the application's code runs and how it waits:
requests complete on the remoting I/O thread and wake the event loop; listeners written as
``async def`` run on the application's loop. Nothing here blocks the loop on the network.
"""

from rocketmesh.aio.admin import AsyncAdmin
from rocketmesh.aio.producer import AsyncProducer
from rocketmesh.aio.pull_consumer import AsyncPullConsumer
from rocketmesh.aio.push_consumer import AsyncListener, AsyncPushConsumer
from rocketmesh.aio.transaction import AsyncTransactionListener, AsyncTransactionProducer

__all__ = [
    "AsyncAdmin",
    "AsyncListener",
    "AsyncProducer",
    "AsyncPullConsumer",
    "AsyncPushConsumer",
    "AsyncTransactionListener",
    "AsyncTransactionProducer",
]
