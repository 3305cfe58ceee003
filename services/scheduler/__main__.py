"""``python -m rocketmesh.scheduler``: run one scheduler replica.

    python -m rocketmesh.scheduler [-c scheduler.conf] [-n "host:port;host:port"]
        [--listen-port P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags. Prints ``scheduler <instance> listening on <host:port>`` once it runs,
and shuts down cleanly (committing its progress) on SIGTERM or SIGINT.
"""

import sys

from rocketmesh.server.extra import require_server_extra

if __name__ == "__main__":
    require_server_extra("scheduler")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.scheduler.config import SchedulerConfig
    from rocketmesh.scheduler.service import ScheduleService
    from rocketmesh.server.service_main import run_system_service

    sys.exit(run_system_service("scheduler", "Deliver delayed and timer messages when they are due.",
                                SchedulerConfig, ScheduleService))
