"""The broker's store engine: CommitLog, ConsumeQueue, IndexFile, flush, recovery, expiry."""
