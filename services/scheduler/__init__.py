"""Delay-level scheduler for SCHEDULE_TOPIC_XXXX (built by the scheduler issue)."""
