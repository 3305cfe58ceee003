"""Administration: Admin (topics, groups, offsets, queries, dead letters) and the cluster table."""
