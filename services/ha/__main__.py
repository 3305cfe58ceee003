"""``python -m rocketmesh.ha``: replicate one slave from its master.

    python -m rocketmesh.ha [-c ha.conf] [-n "host:port;host:port"] [--listen-port P]
        [--set brokerName=broker-a] [--set masterAddress=H:P --set slaveAddress=H:P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags. Prints ``ha <instance> listening on <host:port>`` (its status port) once
it runs, and stops on SIGTERM or SIGINT.
"""

import sys

from rocketmesh.ha.config import HaConfig
from rocketmesh.ha.service import HaService
from rocketmesh.runtime.service_main import run_system_service

if __name__ == "__main__":
    sys.exit(run_system_service("ha", "Replicate a slave broker's commitlog from its master.", HaConfig, HaService))
