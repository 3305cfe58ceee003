"""What the dispatcher builds from the commitlog: consume queues (20-byte entries per topic and queue) and
the IndexFile (keys and unique ids to commitlog offsets)."""
