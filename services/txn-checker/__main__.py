"""``python -m rocketmesh.txn_checker``: run one txn-checker replica.

    python -m rocketmesh.txn_checker [-c txn-checker.conf] [-n "host:port;host:port"]
        [--listen-port P] [--set key=value ...]

Config comes from the file, then ROCKETMESH_* environment variables, then the
flags (``--set transactionCheckInterval=5000``). Prints ``txn-checker
<instance> listening on <host:port>`` once it runs, and shuts down cleanly
(committing its progress) on SIGTERM or SIGINT.
"""

import sys

from rocketmesh.server.extra import require_server_extra

if __name__ == "__main__":
    require_server_extra("txn-checker")  # one line naming the extra, before anything imports what it brings
    from rocketmesh.server.service_main import run_system_service
    from rocketmesh.txn_checker.config import TxnCheckerConfig
    from rocketmesh.txn_checker.service import TxnCheckerService

    sys.exit(run_system_service("txn-checker", "Check transactional half messages nobody decided.",
                                TxnCheckerConfig, TxnCheckerService))
