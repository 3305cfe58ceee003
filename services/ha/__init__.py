"""Master to slave commitlog replication (built by the HA issue)."""
