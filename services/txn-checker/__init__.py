"""Transaction check-back service (built by the transactions issue)."""
