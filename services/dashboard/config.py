"""DashboardConfig: the web console's settings (RocketMQ-style camelCase keys)."""

from __future__ import annotations

from dataclasses import dataclass

from rocketmesh.acl.config import ClientCredentialsConfig
from rocketmesh.runtime.config import ConfigError, camel_case

#: rocketmq-dashboard's port.
DEFAULT_PORT = 8082


@dataclass
class DashboardConfig(ClientCredentialsConfig):
    """Settings of the dashboard (times in ms). Loaded with ``rocketmesh.runtime.config.load_config``: a
    properties file, then ``ROCKETMESH_*`` environment variables, then command-line flags.

    ``accessKey`` / ``secretKey`` (optional) sign the background sampler's requests when ACL is on;
    without them it samples as the operator who signed in last.
    """

    #: "host:port;host:port"; empty means the NAMESRV_ADDR environment variable.
    namesrv_addr: str = ""
    #: Loopback by default: serving other hosts without ACL is warned about at start.
    listen_address: str = "127.0.0.1"
    #: The HTTP port; 0 picks a free one (the ready line says which).
    listen_port: int = DEFAULT_PORT
    #: The brokers check ACL: every operator signs in with an accessKey and secretKey, and the
    #: dashboard signs that operator's requests as that account.
    acl_enable: bool = False
    #: How often message rates, lags and the counts on the overview are sampled.
    collect_interval_ms: int = 5000
    #: How far back the charts reach.
    history_minutes: int = 30
    #: A session unused this long is signed out.
    session_timeout_minutes: int = 480
    #: Rows on one page of a list (topics, groups, messages, dead letters).
    page_size: int = 50
    #: Timeout of one request to a name server or broker.
    request_timeout_ms: int = 3000

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("collect_interval_ms", "history_minutes", "session_timeout_minutes", "page_size",
                     "request_timeout_ms"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{camel_case(name)}: must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort: {self.listen_port} is not a TCP port (0 picks a free one)")
