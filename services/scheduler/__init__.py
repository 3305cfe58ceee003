"""The scheduler service: delivers delayed (SCHEDULE_TOPIC_XXXX) and timer messages when they are due.

RocketMQ does this inside the broker (ScheduleMessageService). Here it is a
service of its own and a client of the brokers: every replica is a member of
the system consumer group ``CID_RMQ_SYS_SCHEDULE``, so the level queues and
timer queues of all master brokers are shared among replicas by rebalance, and
progress lives on the brokers as that group's offsets.
"""
