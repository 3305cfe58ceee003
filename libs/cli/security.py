"""Transport security on the command line: ``rocketmesh keys DIR`` makes the CurveZMQ keys, and what
``rocketmesh up`` passes its services (``--curve-keys DIR``) and warns about (listening beyond loopback
without ACL). The key files and the variables that name them are remoting.curve's."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import sys
import tempfile
from typing import Optional, Sequence

import zmq.auth

from rocketmesh.cli.help import HelpFormatter
from rocketmesh.remoting.curve import (
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
from rocketmesh.runtime.config import ConfigError, env_names, read_properties

KEYS_DESCRIPTION = """\
Make the CurveZMQ key pairs of a mesh in DIR (zmq.auth certificate files):

  server.key_secret   the mesh's server key pair: every service serves with it (keep it secret)
  server.key          its public half: what every client needs
  client.key_secret   a client key pair, for servers that admit only listed clients
  client.key          its public half
  authorized_clients/ the public keys such servers admit (client.key and server.key: services are
                      one another's clients)

Existing keys are never overwritten without --force (clients holding the old server.key could no
longer connect).
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
    naming what is there unless ``force``. Returns :func:`key_paths`."""
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
            shutil.rmtree(paths["authorized"])
        for role in ("server_secret", "server_public", "client_secret", "client_public", "authorized"):
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
    p.add_argument("--force", action="store_true", help="replace keys already in DIR")
    p.set_defaults(func=cmd_keys)


def up_curve_env(key_dir: Optional[str]) -> dict[str, str]:
    """The environment ``rocketmesh up --curve-keys DIR`` gives every service (empty without DIR); ConfigError
    when DIR holds no usable server key pair, before anything starts."""
    if not key_dir:
        return {}
    paths = key_paths(os.path.abspath(key_dir))
    env = {SECRET_KEY_ENV: paths["server_secret"]}
    load_curve(CurveConfig(curve_secret_key_file=env[SECRET_KEY_ENV]))  # fails here, naming the file
    return env


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _acl_enabled(sets: Sequence[str], broker_config: Optional[str]) -> bool:
    """Whether the brokers ``up`` starts get aclEnable=true: from --set, the config file or the environment
    (the keys and order of runtime.config)."""
    value = ""
    if broker_config:
        try:
            props = read_properties(broker_config)
        except (OSError, ConfigError):
            props = {}
        value = props.get("aclEnable", props.get("acl_enable", value))
    for var in env_names("acl_enable"):
        value = os.environ.get(var, value)
    for item in sets:
        key, _, v = item.partition("=")
        if key.strip() in ("aclEnable", "acl_enable"):
            value = v
    return value.strip().lower() in ("true", "1", "yes", "on")


def exposure_warning(host: str, ports: dict[str, int], sets: Sequence[str], broker_config: Optional[str],
                     curve: bool) -> Optional[str]:
    """What ``up`` warns about when it listens beyond loopback without ACL (None: nothing to say)."""
    if _is_loopback(host) or _acl_enabled(sets, broker_config):
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
