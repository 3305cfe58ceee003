"""An HTTP service on rocketmesh.aio: an endpoint that sends, and a consumer task, both on the server's loop.

    NAMESRV_ADDR=127.0.0.1:9876 uvicorn fastapi_orders:app
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from pydantic import BaseModel

from rocketmesh import Message
from rocketmesh.aio import AsyncProducer, AsyncPullConsumer

TOPIC = "Orders"
#: What the consumer saw: the orders' ids, in the order they came.
audited: list[str] = []


class Order(BaseModel):
    id: str
    amount: int


async def audit(consumer: AsyncPullConsumer) -> None:
    async for msg in consumer:  # ends when the consumer stops
        order = Order.model_validate_json(msg.body)
        await asyncio.sleep(0)  # an await of the application's: a database write, a call to another service
        audited.append(order.id)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    producer = AsyncProducer("orders-api")  # the name servers come from NAMESRV_ADDR
    consumer = AsyncPullConsumer("orders-audit")
    consumer.subscribe(TOPIC)
    async with producer, consumer:  # started before the first request, stopped after the last
        app.state.producer = producer
        auditor = asyncio.create_task(audit(consumer))
        yield
    await auditor  # the consumer's stop() ended its loop, and committed what it took


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def place_order(order: Order) -> dict[str, str]:
    result = await app.state.producer.send(Message(TOPIC, order.model_dump_json().encode(), keys=order.id))
    return {"msg_id": result.msg_id, "status": result.send_status.value}


@app.get("/orders/audited")
async def audited_orders() -> list[str]:
    return audited
