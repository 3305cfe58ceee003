"""The asyncio guide's FastAPI example (docs/examples/fastapi_orders.py) served by a real uvicorn process
against a real mesh, driven by a real HTTP client: orders posted are sent, consumed by the app's consumer
and committed when the server stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from clientkit import make_topic, quietly
from procs import free_port, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def http(method: str, url: str, body: object = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def test_the_fastapi_example_sends_consumes_and_commits_under_uvicorn(namesrv, broker, admin, tmp_path):
    make_topic(admin, "Orders", 4)
    port = free_port()
    log = tmp_path / "uvicorn.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "fastapi_orders:app", "--host", "127.0.0.1", "--port", str(port)],
            cwd=EXAMPLES, env={**os.environ, "NAMESRV_ADDR": namesrv.addr}, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        def serving() -> bool:
            assert server.poll() is None, log.read_text()
            try:
                return http("GET", f"{base}/orders/audited")[0] == 200
            except OSError:
                return False

        wait_for(serving, 30, "the example serving")
        answers = [http("POST", f"{base}/orders", {"id": f"order-{i}", "amount": i}) for i in range(20)]
        assert [status for status, _ in answers] == [200] * 20
        assert all(body["status"] == "SEND_OK" and len(body["msg_id"]) == 32 for _, body in answers)
        wait_for(lambda: len(http("GET", f"{base}/orders/audited")[1]) >= 20, 30,
                 "the 20 orders audited by the app's consumer")
        assert sorted(http("GET", f"{base}/orders/audited")[1]) == sorted(f"order-{i}" for i in range(20))
    finally:
        server.send_signal(signal.SIGINT)
        code = server.wait(20)
    text = log.read_text()
    assert code == 0, text
    assert "Application shutdown complete" in text and "Traceback" not in text
    # The lifespan's stop() committed what the consumer took: the group has no lag.
    stats = wait_for(quietly(lambda: admin.consume_stats("orders-audit", "Orders")), 10, what="consume stats")
    assert stats.total_diff() == 0
