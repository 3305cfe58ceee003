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
from rocketmesh.aio import AsyncProducer, AsyncPushConsumer
from rocketmesh.client.consumer import ConsumeConcurrentlyStatus
from rocketmesh.model.message import MessageExt

TOPIC = "Orders"
#: What the consumer saw: the orders' ids, in the order they came.
audited: list[str] = []


class Order(BaseModel):
    id: str
    amount: int


async def audit(msgs: list[MessageExt]) -> ConsumeConcurrentlyStatus:
    for msg in msgs:
        order = Order.model_validate_json(msg.body)
        await asyncio.sleep(0)  # an await of the application's: a database write, a call to another service
        audited.append(order.id)
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    producer = AsyncProducer("orders-api")  # the name servers come from NAMESRV_ADDR
    consumer = AsyncPushConsumer("orders-audit")
    consumer.subscribe(TOPIC)
    consumer.register_listener(audit)
    async with producer, consumer:  # started before the first request, stopped (offsets committed) after the last
        app.state.producer = producer
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/orders")
async def place_order(order: Order) -> dict[str, str]:
    result = await app.state.producer.send(Message(TOPIC, order.model_dump_json().encode(), keys=order.id))
    return {"msg_id": result.msg_id, "status": result.send_status.value}


@app.get("/orders/audited")
async def audited_orders() -> list[str]:
    return audited
