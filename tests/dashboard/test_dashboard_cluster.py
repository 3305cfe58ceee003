"""The cluster page of a master with its slave: roles, where each commitlog ends and how far the slave is
behind, as ``rocketmesh admin cluster-list`` prints them."""

from __future__ import annotations

from pathlib import Path

from browserkit import Browser, chromium
from procs import DashboardProcess, run_cli, wait_for
from rocketmesh import Message, Producer


def cluster_list(namesrv: str) -> dict[str, list[str]]:
    """``rocketmesh admin cluster-list``'s rows by broker address."""
    done = run_cli("admin", "cluster-list", "-n", namesrv)
    assert done.returncode == 0, done.stderr
    return {cells[3]: cells for cells in (line.split() for line in done.stdout.splitlines()[1:]) if len(cells) > 3}


def test_the_cluster_page_shows_the_slave_and_how_far_behind_it_is(namesrv, start_broker, start_ha,
                                                                  tmp_path: Path) -> None:
    master = start_broker(namesrv.addr, name="broker-a")
    slave = start_broker(namesrv.addr, name="broker-a", brokerId=1, brokerRole="SLAVE", slaveSyncIntervalMills=500)
    start_ha(namesrv.addr, brokerName="broker-a")
    dashboard = DashboardProcess(tmp_path / "dashboard", namesrv.addr, collectIntervalMs=500).start(30)
    try:
        with Producer("dash-ha-p", namesrv.addr) as p:
            for i in range(20):
                p.send(Message("DashHa", f"replicated {i}".encode()))
        # Once the slave has it all, both pages agree: same end, no lag.
        printed = wait_for(lambda: (rows := cluster_list(namesrv.addr)).get(slave.addr, [""])[-1] == "0" and rows,
                           30, what="the slave caught up")
        assert isinstance(printed, dict)
        end = printed[master.addr][-2]
        with chromium() as driver:
            browser = Browser(driver, dashboard.url, tmp_path / "screenshots")
            browser.open("/cluster")

            def rows() -> dict[str, list[str]]:
                return {r[1]: r for r in browser.table("#group-broker-a table")}
            browser.until(lambda: rows().get(slave.addr, [""] * 5)[4] == end, what=f"the slave's end {end}")
            shown = rows()
            assert shown[master.addr][:3] == ["0", master.addr, "ASYNC_MASTER"]
            assert shown[slave.addr][:3] == ["1", slave.addr, "SLAVE"]
            assert shown[master.addr][4] == shown[slave.addr][4] == end
            assert shown[master.addr][5] == shown[slave.addr][5] == "0"  # replication lag, bytes
            browser.shot("cluster-ha")
    finally:
        dashboard.stop()
