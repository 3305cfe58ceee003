"""What every service process runs on: ``config`` (RocketMQ-named settings from file, environment and
flags), ``log`` (structlog through the logging module), ``service_main`` (a service's ``__main__``),
``service_thread`` (bounded background loops), ``jsonfile`` (atomic JSON files), ``python_process``
(starting our modules as processes)."""
