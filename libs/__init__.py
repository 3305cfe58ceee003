"""rocketmesh: RocketMQ 4.x semantics as a mesh of ZeroMQ services."""

__version__ = "0.1.0"
