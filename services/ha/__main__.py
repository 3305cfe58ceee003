"""``python -m rocketmesh.ha``: replicate one slave from its master.

    python -m rocketmesh.ha [-c ha.conf] [-n "host:port;host:port"] [--listen-port P]
        [--set brokerName=broker-a] [--set masterAddress=H:P --set slaveAddress=H:P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags. Prints ``ha <instance> listening on <host:port>`` (its status port) once
it runs, and stops on SIGTERM or SIGINT.
"""

import sys

from rocketmesh.server.extra import require_server_extra

if __name__ == "__main__":
    require_server_extra("ha")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.ha.config import HaConfig
    from rocketmesh.ha.service import HaService
    from rocketmesh.server.service_main import run_system_service

    sys.exit(run_system_service("ha", "Replicate a slave broker's commitlog from its master.", HaConfig, HaService))
