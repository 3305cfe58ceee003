"""The dispatcher (RocketMQ's ReputMessageService): it reads the commitlog behind the writer and builds
consume queues and the index from it, in the broker's process or in a worker process."""
