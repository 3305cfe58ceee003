"""Administration: Admin (topics, groups, offsets, queries) and the dead letters it resends."""
