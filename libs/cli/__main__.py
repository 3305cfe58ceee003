"""``python -m rocketmesh.cli ...``: the same as the ``rocketmesh`` console script."""

import sys

from rocketmesh.cli.main import main

sys.exit(main())
