"""``python -m rocketmesh.broker``: run one broker.

    python -m rocketmesh.broker [-c broker.conf] [-n "host:port;host:port"]
        [--listen-port P] [--store-dir DIR] [--broker-name NAME] [--cluster NAME]
        [--set key=value ...]

Config comes from the file, then environment variables (RocketMQ key names or ROCKETMESH_*), then the
flags (``--set`` takes any broker or store key, RocketMQ names). Prints one
line ``broker <name> listening on <host:port>`` when it serves, and shuts
down cleanly on SIGTERM or SIGINT.
"""

import sys

from rocketmesh.server.extra import require_server_extra

if __name__ == "__main__":
    require_server_extra("broker")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.broker.command import main

    sys.exit(main())
