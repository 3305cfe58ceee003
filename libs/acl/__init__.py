"""RocketMQ's plain ACL: accounts in a YAML file, requests signed by the client, checked by the servers.

- :mod:`~rocketmesh.acl.model`: the plain_acl.yml model (accounts, permissions, white-listed addresses);
- :mod:`~rocketmesh.acl.signer`: the client side (RocketMQ's AclClientRPCHook): AccessKey, Timestamp and
  an HMAC-SHA256 Signature put into each request's ext fields;
- :mod:`~rocketmesh.acl.validator`: the server side (RocketMQ's PlainAccessValidator): which request
  needs which permission, the check, the file reloaded when it changes;
- :mod:`~rocketmesh.acl.config`: the config keys services share (aclEnable, aclFile, accessKey, secretKey).
"""

from rocketmesh.acl.config import AclServerConfig, ClientCredentialsConfig, resolve_acl_file
from rocketmesh.acl.model import AclConfigError, Permission, PlainAccessConfig, PlainAccount, RemoteAddressPattern
from rocketmesh.acl.signer import REPLAY_WINDOW_MS, AclSigner, SessionCredentials, signer_for
from rocketmesh.acl.validator import ADMIN_CODES, AclDenied, PlainAccessValidator, RequiredAccess, required_access

__all__ = [
    "ADMIN_CODES",
    "AclConfigError",
    "AclDenied",
    "AclServerConfig",
    "AclSigner",
    "ClientCredentialsConfig",
    "Permission",
    "PlainAccessConfig",
    "PlainAccessValidator",
    "PlainAccount",
    "REPLAY_WINDOW_MS",
    "RemoteAddressPattern",
    "RequiredAccess",
    "SessionCredentials",
    "required_access",
    "resolve_acl_file",
    "signer_for",
]
