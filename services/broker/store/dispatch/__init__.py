"""Dispatch (RocketMQ's ReputMessageService and CommitLogDispatchers): each record the commitlog holds
becomes its consume-queue entry and index keys, in commitlog order, in the broker's process."""
