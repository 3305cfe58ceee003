"""The commitlog broker service and its store engine."""
