"""What the SDK, the CLI and the services all run on: ``config`` (RocketMQ-named settings from file,
environment and flags), ``log`` (event loggers over the standard logging module), ``service_thread``
(bounded background loops), ``jsonfile`` (atomic JSON files), ``python_process`` (starting our modules as
processes), ``help`` (the command lines' help layout). What only the services share is in
:mod:`rocketmesh.server`."""
