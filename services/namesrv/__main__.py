"""``python -m rocketmesh.namesrv [-c file] [-p PORT] [--listen-address ADDR] ...``

Prints ``namesrv listening on HOST:PORT`` on stdout once it accepts requests,
then runs until SIGTERM or SIGINT, on which it stops gracefully.
"""

import sys

from rocketmesh.server.extra import require_server_extra

if __name__ == "__main__":
    require_server_extra("namesrv")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.namesrv.command import main

    sys.exit(main())
