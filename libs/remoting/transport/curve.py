"""CurveZMQ on every remoting socket: encryption, server authentication, optionally client authentication.

Configured for the whole process, the way RocketMQ configures TLS (system settings, not per call): the
environment names key files, and every RemotingServer and RemotingClient the process makes picks them up
through ``SocketOptions`` (its ``curve`` field). Nothing is configured: plain ZMTP, and not a byte of work
per message or per socket beyond one ``is None``.

The whole mesh shares one server key pair (a mesh is one trust domain, as one TLS certificate would be):

``ROCKETMESH_CURVE_SECRET_KEY_FILE``
    The mesh's ``server.key_secret`` (zmq.auth certificate format). Every service: its ROUTER is a
    CURVE server with it, and its own client sockets (a broker registering with the name servers, the
    scheduler talking to brokers) know the server's public key from the same file.
``ROCKETMESH_CURVE_SERVER_KEY_FILE``
    The mesh's ``server.key`` (the public half; a certificate, or a text file holding the 40-character
    Z85 key). Every client: applications, the CLI, tests.
``ROCKETMESH_CURVE_CLIENT_KEY_FILE`` (optional)
    This client's own key pair (``client.key_secret``). Without one a client makes a key pair per process
    (a service uses the server key pair), which is all encryption and server authentication need.
``ROCKETMESH_CURVE_AUTHORIZED_CLIENTS`` (optional, servers)
    A directory of client public keys (``*.key``): a server then accepts only those clients (ZAP, with
    zmq.auth's ThreadAuthenticator). ``rocketmesh keys`` fills ``authorized_clients/`` with the client
    key and the server key (services are one another's clients).

RocketMQ's key names (``curveSecretKeyFile`` ...) work in the environment as well (runtime.config).
``rocketmesh keys DIR`` makes the files; ``rocketmesh up --curve-keys DIR`` hands them to every service.

A client without the right server key cannot connect: the CURVE handshake fails, ZeroMQ keeps retrying,
and each request fails at its deadline with RemotingConnectError, whose message then says CURVE is on and
which key to check. A server configured for CURVE without a secret key refuses to start.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from rocketmesh.runtime.config import ConfigError, load_config

SECRET_KEY_ENV = "ROCKETMESH_CURVE_SECRET_KEY_FILE"
SERVER_KEY_ENV = "ROCKETMESH_CURVE_SERVER_KEY_FILE"
CLIENT_KEY_ENV = "ROCKETMESH_CURVE_CLIENT_KEY_FILE"
AUTHORIZED_CLIENTS_ENV = "ROCKETMESH_CURVE_AUTHORIZED_CLIENTS"

#: The file names ``rocketmesh keys`` writes (zmq.auth.create_certificates adds ``.key`` / ``.key_secret``).
SERVER_CERT = "server"
CLIENT_CERT = "client"
AUTHORIZED_DIR = "authorized_clients"

_Z85_KEY_LEN = 40


@dataclass(frozen=True)
class CurveConfig:
    """Where the key files are; empty: not set. Loaded from the environment by :func:`curve_from_env`."""

    #: The server key pair (``server.key_secret``): services.
    curve_secret_key_file: str = ""
    #: The server's public key (``server.key``): clients. Implied by ``curve_secret_key_file``.
    curve_server_key_file: str = ""
    #: This client's key pair; without it, one made for the process (or the server pair, in a service).
    curve_client_key_file: str = ""
    #: Directory of the client public keys a server accepts; empty: any client that knows the server key.
    curve_authorized_clients: str = ""


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """The Z85 keys a process's sockets use. ``server_secret`` is needed to serve, ``server_public`` to connect.

    ``source`` says where the keys came from, for error messages.
    """

    server_public: bytes
    server_secret: bytes | None = None
    client_public: bytes | None = None
    client_secret: bytes | None = None
    authorized_clients: str | None = None
    source: str = ""

    @classmethod
    def for_client(cls, server_key_file: str | os.PathLike[str]) -> CurveKeys:
        """A client's keys from the mesh's public server key file (the SDK's explicit road)."""
        public, _ = read_key_file(server_key_file, SERVER_KEY_ENV)
        return cls(public, source=str(server_key_file))

    def apply_server(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE server (before it binds)."""
        if self.server_secret is None:
            raise ConfigError(
                f"CURVE is on ({self.source}) but this process has no server secret key to serve with: "
                f"set {SECRET_KEY_ENV} to the mesh's server.key_secret")
        if self.authorized_clients:
            _authenticator(sock.context, self.authorized_clients)
        sock.curve_secretkey = self.server_secret
        sock.curve_publickey = self.server_public
        sock.curve_server = True

    def apply_client(self, sock: zmq.Socket) -> None:
        """Make ``sock`` a CURVE client of the mesh's servers (before it connects)."""
        public, secret = self.client_public, self.client_secret
        if public is None or secret is None:
            public, secret = _process_keypair()
        sock.curve_serverkey = self.server_public
        sock.curve_publickey = public
        sock.curve_secretkey = secret

    def connect_hint(self) -> str:
        """Said with every "no connection" error while CURVE is on: the likeliest cause."""
        return (f" (CURVE is on with the server key from {self.source}: a server with another key pair, one "
                f"without CURVE, or one that admits listed clients only and not this one never completes the "
                f"handshake)")


def read_key_file(path: str | os.PathLike[str], what: str) -> tuple[bytes, bytes | None]:
    """``(public, secret or None)`` from a zmq.auth certificate or a text file holding a Z85 public key;
    ConfigError naming ``what`` (the setting) when it cannot be read."""
    try:
        return zmq.auth.load_certificate(path)
    except ValueError:
        text = Path(path).read_bytes().strip()
        if len(text) == _Z85_KEY_LEN:
            return text, None
        raise ConfigError(f"{what}: {path} holds neither a zmq certificate nor a Z85 public key") from None
    except OSError as exc:
        raise ConfigError(f"{what}: cannot read {path}: {exc}") from exc


def load_curve(config: CurveConfig) -> CurveKeys | None:
    """The keys ``config`` names, or None when no key file is set (plain ZMTP)."""
    if not (config.curve_secret_key_file or config.curve_server_key_file):
        if config.curve_client_key_file or config.curve_authorized_clients:
            raise ConfigError(f"{CLIENT_KEY_ENV} / {AUTHORIZED_CLIENTS_ENV} need the server key: set "
                              f"{SECRET_KEY_ENV} (services) or {SERVER_KEY_ENV} (clients)")
        return None
    server_public = server_secret = None
    source = ""
    if config.curve_secret_key_file:
        server_public, server_secret = read_key_file(config.curve_secret_key_file, SECRET_KEY_ENV)
        if server_secret is None:
            raise ConfigError(f"{SECRET_KEY_ENV}: {config.curve_secret_key_file} has no secret key "
                              f"(the server.key_secret file, not server.key)")
        source = f"{SECRET_KEY_ENV}={config.curve_secret_key_file}"
    if config.curve_server_key_file:
        public, _ = read_key_file(config.curve_server_key_file, SERVER_KEY_ENV)
        if server_public is not None and public != server_public:
            raise ConfigError(f"{SERVER_KEY_ENV} ({config.curve_server_key_file}) is not the public half of "
                              f"{SECRET_KEY_ENV} ({config.curve_secret_key_file})")
        server_public = public
        source = source or f"{SERVER_KEY_ENV}={config.curve_server_key_file}"
    client_public = client_secret = None
    if config.curve_client_key_file:
        client_public, client_secret = read_key_file(config.curve_client_key_file, CLIENT_KEY_ENV)
        if client_secret is None:
            raise ConfigError(f"{CLIENT_KEY_ENV}: {config.curve_client_key_file} has no secret key")
    elif server_secret is not None:
        # A service is its peers' client with the mesh's own key, which authorized_clients/ holds.
        client_public, client_secret = server_public, server_secret
    if config.curve_authorized_clients and not os.path.isdir(config.curve_authorized_clients):
        raise ConfigError(f"{AUTHORIZED_CLIENTS_ENV}: {config.curve_authorized_clients} is not a directory")
    assert server_public is not None
    return CurveKeys(server_public, server_secret, client_public, client_secret,
                     config.curve_authorized_clients or None, source)


def curve_from_env() -> CurveKeys | None:
    """The process's CURVE keys from its environment (SocketOptions' default), or None."""
    return load_curve(load_config(CurveConfig))


_lock = threading.Lock()
_keypair: tuple[bytes, bytes] | None = None
_authenticators: dict[int, object] = {}


def _process_keypair() -> tuple[bytes, bytes]:
    """One client key pair per process, made on first use."""
    global _keypair
    with _lock:
        if _keypair is None:
            _keypair = zmq.curve_keypair()
        return _keypair


def _authenticator(ctx: zmq.Context, location: str) -> None:
    """Start (once per context) the ZAP handler that admits the client keys in ``location``."""
    from zmq.auth.thread import ThreadAuthenticator

    with _lock:
        if id(ctx) in _authenticators:
            return
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve(domain="*", location=location)
        _authenticators[id(ctx)] = auth
