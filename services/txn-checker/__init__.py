"""The txn-checker service: finds half messages nobody decided and has their brokers ask a live producer."""
