"""A stand-in service for the supervisor's tests: ``python -m crashy_service SECONDS [--never-ready]``
prints its ready line (unless never ready), runs SECONDS, then exits 1 (a crash)."""

import sys
import time

if __name__ == "__main__":
    if "--never-ready" not in sys.argv:
        print("crashy listening on 127.0.0.1:1", flush=True)
    time.sleep(float(sys.argv[1]))
    sys.exit(1)
