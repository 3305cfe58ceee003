"""The message and route model the services and the SDK share, and its codecs: ``message`` (Message,
MessageExt, MessageQueue, property names), ``codec`` (RocketMQ's record, batch and message-id layouts),
``route`` (TopicConfig, QueueData, BrokerData, TopicRouteData, PermName), ``topics`` (system topic names
and checks), ``delay_levels`` (messageDelayLevel)."""
