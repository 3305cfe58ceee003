"""What the broker keeps beside the store and persists as JSON (RocketMQ's topic, subscription and
offset managers): topic configs, subscription groups, consumer offsets."""
