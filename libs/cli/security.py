"""Transport security on the command line: ``rocketmesh keys DIR`` makes the CurveZMQ keys, and what
``rocketmesh up`` passes its services (``--curve-keys DIR``) and warns about (listening beyond loopback
without ACL). The key files and the variables that name them are remoting.curve's."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence

import zmq.auth

from rocketmesh.acl.config import ClientCredentialsConfig
from rocketmesh.acl.model import PlainAccessConfig
from rocketmesh.remoting.addr import is_loopback_host
from rocketmesh.remoting.transport.curve import (
    AUTHORIZED_CLIENTS_ENV,
    AUTHORIZED_DIR,
    CLIENT_CERT,
    CLIENT_KEY_ENV,
    SECRET_KEY_ENV,
    SERVER_CERT,
    SERVER_KEY_ENV,
    CurveConfig,
    load_curve,
)
from rocketmesh.runtime.config import ConfigError, camel_case, env_names, read_properties
from rocketmesh.runtime.help import HelpFormatter

KEYS_DESCRIPTION = """\
Make the CurveZMQ key pairs of a mesh in DIR (zmq.auth certificate files):

  server.key_secret   the mesh's server key pair: every service serves with it (keep it secret)
  server.key          its public half: what every client needs
  client.key_secret   a client key pair, for servers that admit only listed clients
  client.key          its public half
  authorized_clients/ the public keys such servers admit (client.key and server.key: services are
                      one another's clients)

Existing keys are never overwritten without --force (clients holding the old server.key could no
longer connect); --force replaces the files above and keeps other public keys in authorized_clients/.
"""


def key_paths(key_dir: str) -> dict[str, str]:
    """The files ``rocketmesh keys`` writes into ``key_dir``, by role."""
    return {"server_secret": os.path.join(key_dir, f"{SERVER_CERT}.key_secret"),
            "server_public": os.path.join(key_dir, f"{SERVER_CERT}.key"),
            "client_secret": os.path.join(key_dir, f"{CLIENT_CERT}.key_secret"),
            "client_public": os.path.join(key_dir, f"{CLIENT_CERT}.key"),
            "authorized": os.path.join(key_dir, AUTHORIZED_DIR)}


def make_keys(key_dir: str, force: bool = False) -> dict[str, str]:
    """Write a server and a client key pair and ``authorized_clients/`` into ``key_dir``; FileExistsError
    naming what is there unless ``force``, which replaces these files and keeps any other key a user put into
    ``authorized_clients/``. Returns :func:`key_paths`."""
    paths = key_paths(key_dir)
    there = [p for p in paths.values() if os.path.exists(p)]
    if there and not force:
        raise FileExistsError(f"{', '.join(there)} already exist(s); --force replaces them")
    os.makedirs(key_dir, exist_ok=True)
    # Made aside and moved in, so that a failure leaves no half-written pair.
    with tempfile.TemporaryDirectory(dir=key_dir, prefix=".keys-") as tmp:
        zmq.auth.create_certificates(tmp, SERVER_CERT)
        zmq.auth.create_certificates(tmp, CLIENT_CERT)
        for name in (f"{SERVER_CERT}.key_secret", f"{CLIENT_CERT}.key_secret"):
            os.chmod(os.path.join(tmp, name), 0o600)
        auth = os.path.join(tmp, AUTHORIZED_DIR)
        os.mkdir(auth)
        for name in (SERVER_CERT, CLIENT_CERT):
            shutil.copy(os.path.join(tmp, f"{name}.key"), auth)
        if os.path.isdir(paths["authorized"]):
            # Only the keys made here are replaced: public keys a user added for other clients stay admitted.
            for name in os.listdir(auth):
                os.replace(os.path.join(auth, name), os.path.join(paths["authorized"], name))
        else:
            os.replace(auth, paths["authorized"])
        for role in ("server_secret", "server_public", "client_secret", "client_public"):
            os.replace(os.path.join(tmp, os.path.basename(paths[role])), paths[role])
    return paths


def cmd_keys(args: argparse.Namespace) -> int:
    """``rocketmesh keys DIR``: make the keys, print what to hand to ``up``, compose and clients."""
    key_dir = os.path.abspath(args.dir)
    try:
        paths = make_keys(key_dir, args.force)
    except FileExistsError as exc:
        print(f"rocketmesh keys: {exc}", file=sys.stderr)
        return 1
    print(f"CurveZMQ keys in {key_dir}:")
    print(f"  {paths['server_secret']}  every service (keep it secret)")
    print(f"  {paths['server_public']}  every client")
    print(f"  {paths['client_secret']}  a client, where servers admit listed clients only")
    print(f"Local mesh:  rocketmesh up --curve-keys {key_dir}")
    print(f"Services (compose, systemd, by hand):  {SECRET_KEY_ENV}={paths['server_secret']}")
    print(f"Clients (SDK, rocketmesh produce/consume/admin):  export {SERVER_KEY_ENV}={paths['server_public']}")
    print(f"Admit listed clients only:  {AUTHORIZED_CLIENTS_ENV}={paths['authorized']} on the services, "
          f"{CLIENT_KEY_ENV}={paths['client_secret']} on the clients")
    return 0


def add_keys_command(sub: argparse._SubParsersAction) -> None:
    """Add ``keys`` to the ``rocketmesh`` command line."""
    p = sub.add_parser("keys", help="make the CurveZMQ keys that encrypt and authenticate the mesh's connections",
                       description=KEYS_DESCRIPTION, formatter_class=HelpFormatter,
                       epilog="examples:\n  rocketmesh keys ./mesh-keys\n  rocketmesh up --curve-keys ./mesh-keys")
    p.add_argument("dir", help="where the key files go (made if missing)")
    p.add_argument("--force", action="store_true",
                   help="replace the keys this command made in DIR (other keys in authorized_clients/ stay)")
    p.set_defaults(func=cmd_keys)


def up_curve_env(key_dir: str | None) -> dict[str, str]:
    """The environment ``rocketmesh up --curve-keys DIR`` gives every service (empty without DIR); ConfigError
    when DIR holds no usable server key pair, before anything starts."""
    if not key_dir:
        return {}
    paths = key_paths(os.path.abspath(key_dir))
    env = {SECRET_KEY_ENV: paths["server_secret"]}
    load_curve(CurveConfig(curve_secret_key_file=env[SECRET_KEY_ENV]))  # fails here, naming the file
    return env


def _up_setting(name: str, sets: Sequence[str], broker_config: str | None) -> str:
    """The broker setting ``name`` (snake_case) as ``up``'s brokers get it: from the config file, the
    environment, then --set (the keys and order of runtime.config); empty when none gives it."""
    keys = (camel_case(name), name)
    value = ""
    if broker_config:
        try:
            props = read_properties(broker_config)
        except (OSError, ConfigError):
            props = {}
        value = props.get(keys[0], props.get(name, value))
    for var in env_names(name):
        value = os.environ.get(var, value)
    for item in sets:
        key, _, v = item.partition("=")
        if key.strip() in keys:
            value = v
    return value.strip()


def acl_enabled(sets: Sequence[str], broker_config: str | None) -> bool:
    """Whether the brokers ``up`` starts get aclEnable=true."""
    return _up_setting("acl_enable", sets, broker_config).lower() in ("true", "1", "yes", "on")


def up_account(sets: Sequence[str], broker_config: str | None) -> ClientCredentialsConfig | None:
    """The account ``rocketmesh up``'s broker registers with and its scheduler, txn-checker and ha sign with.

    accessKey / secretKey where given (--set, broker config, environment: ROCKETMESH_SECRET_KEY keeps the
    secret off the command line). Otherwise, with aclEnable on, the first admin account of aclFile: the
    mesh's own services need one (REGISTER_BROKER and their requests are admin operations), and the file
    already holds it, so ``up --set aclEnable=true --set aclFile=PATH`` is all a user types. None: ACL off
    and no account, requests unsigned. ValueError (ConfigError, AclConfigError naming the file), before
    anything starts, when no account can be had.
    """
    access_key = _up_setting("access_key", sets, broker_config)
    secret_key = _up_setting("secret_key", sets, broker_config)
    if access_key or secret_key:
        return ClientCredentialsConfig(access_key, secret_key)  # ConfigError when given by half
    if not acl_enabled(sets, broker_config):
        return None
    acl_file = _up_setting("acl_file", sets, broker_config)
    if not acl_file:
        raise ConfigError("aclEnable=true needs --set aclFile=PATH (the plain_acl.yml the name server and the "
                          "broker both read, and whose admin account the mesh's own services sign with)")
    path = os.path.abspath(os.path.expanduser(acl_file))
    admin = next((a for a in PlainAccessConfig.load(path).accounts.values() if a.admin), None)
    if admin is None:
        raise ConfigError(f"aclFile {path} has no account with admin: true, which the broker's registration and "
                          "the scheduler, txn-checker and ha need: add one, or give accessKey / secretKey")
    return ClientCredentialsConfig(admin.access_key, admin.secret_key)


def exposure_warning(host: str, ports: dict[str, int], sets: Sequence[str], broker_config: str | None,
                     curve: bool) -> str | None:
    """What ``up`` warns about when it listens beyond loopback without ACL (None: nothing to say)."""
    if is_loopback_host(host) or acl_enabled(sets, broker_config):
        return None
    listed = ", ".join(f"{name} {port}" for name, port in ports.items())
    lines = [f"warning: --host {host} serves {listed} to every host that can reach this one, and ACL is off: "
             "anyone there can send, consume and run admin commands.",
             "  Turn ACL on:  --set aclEnable=true --set aclFile=PATH (a plain_acl.yml of accounts)"]
    if curve:
        lines.append("  CurveZMQ is on: the connections are encrypted, but the server key is public by design.")
    else:
        lines.append("  Encrypt and authenticate the connections:  rocketmesh keys DIR, then --curve-keys DIR "
                     "(the traffic is plain text now)")
    return "\n".join(lines)
