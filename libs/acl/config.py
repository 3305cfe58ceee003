"""The ACL config keys the services share, as dataclass mixins of their configs (RocketMQ's names)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rocketmesh.runtime.config import ConfigError, env_names

#: The variables that give a process its account (the config loader's names for accessKey / secretKey): the
#: services and the CLI read them, ``rocketmesh up`` hands its account on in them. Unlike an argument, a
#: process's environment is readable by its own user only.
ACCESS_KEY_ENV = env_names("access_key")[-1]
SECRET_KEY_ENV = env_names("secret_key")[-1]

#: RocketMQ's file name, looked for in the service's config directory when aclFile is not given.
DEFAULT_ACL_FILE = "plain_acl.yml"


@dataclass
class AclServerConfig:
    """What a server that checks requests (broker, namesrv) is told about ACL."""

    #: Check every request against the accounts of ``acl_file`` (RocketMQ's aclEnable).
    acl_enable: bool = False
    #: The plain_acl.yml to read; empty: ``plain_acl.yml`` in the service's config directory (the
    #: broker's ``<storePathRootDir>/config``, the name server's kvConfigPath directory). A relative
    #: path is taken from that directory too.
    acl_file: str = ""
    #: How often the file's modification time is looked at, ms: an edit takes effect within this.
    acl_reload_interval_ms: int = 1000


@dataclass
class ClientCredentialsConfig:
    """The account a service signs its own outgoing requests with (the broker's REGISTER_BROKER, the
    scheduler's, txn-checker's and ha's requests to brokers). Both empty: requests go unsigned."""

    access_key: str = ""
    secret_key: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        # Checked here, where every service's config is made, so a half-given account stops the start
        # with the config error rather than surfacing later as a traceback or as unsigned requests.
        if bool(self.access_key) != bool(self.secret_key):
            given, missing = ("accessKey", "secretKey") if self.access_key else ("secretKey", "accessKey")
            raise ConfigError(f"accessKey and secretKey go together: {given} is set but {missing} is not "
                              "(give both to sign this service's requests, or neither)")


def account_env(access_key: str, secret_key: str) -> dict[str, str]:
    """The environment that gives a service its account: how ``rocketmesh up`` (and the tests) hand it
    over, rather than as arguments, which ``ps`` shows anyone."""
    return {ACCESS_KEY_ENV: access_key, SECRET_KEY_ENV: secret_key}


def resolve_acl_file(acl_file: str, config_dir: str) -> str:
    """The path of the ACL file: ``acl_file`` (relative ones under ``config_dir``), or the default name there."""
    path = os.path.expanduser(acl_file or DEFAULT_ACL_FILE)
    return path if os.path.isabs(path) else os.path.join(config_dir, path)
