"""The broker's request processors (RocketMQ's broker.processor): sends, pulls and their long polling,
send-backs, end of delay (delivery), admin and consumer-management requests."""
