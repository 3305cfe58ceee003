"""The public API for programs that keep their own offsets (stream processors such as the Spark source).

    from rocketmesh.client.stream import GroupRegistration, StreamClient, make_subscription

- :class:`StreamClient`: reads exact offset ranges of queues (:class:`RangeChunk`: the broker's records back
  to back) and reads or commits a consumer group's offsets, never registering the group;
- :class:`GroupRegistration`: a consumer group registered with the brokers that pulls nothing itself, so
  that the mesh lists its connections and subscriptions;
- :func:`make_subscription` and :func:`check_group`: a topic's subscription by tags or SQL92, and the check
  of a group name, as the consumers make them.
"""

from rocketmesh.client.consumer.core import make_subscription
from rocketmesh.client.stream.group_registration import GroupRegistration
from rocketmesh.client.stream.range_pull import RangeChunk
from rocketmesh.client.stream.stream_client import StreamClient
from rocketmesh.client.validators import check_group

__all__ = ["GroupRegistration", "RangeChunk", "StreamClient", "check_group", "make_subscription"]
