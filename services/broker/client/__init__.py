"""The broker's view of its clients (RocketMQ's broker.client): producer and consumer tables kept by
heartbeats, and the queue locks of orderly consumers."""
