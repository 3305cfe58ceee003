"""The ha service: replicates one slave broker's commitlog from its master (RocketMQ's HAService loop)."""
