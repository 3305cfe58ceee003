"""The plain ACL pieces without processes: the file model, address patterns, signing and the check."""

from __future__ import annotations

import time

import orjson
import pytest

from rocketmesh.acl import (
    AclConfigError,
    AclDenied,
    AclSigner,
    Permission,
    PlainAccessConfig,
    PlainAccessValidator,
    RemoteAddressPattern,
    SessionCredentials,
    required_access,
)
from rocketmesh.acl.model import allows
from rocketmesh.acl.signer import rocketmq_signature
from rocketmesh.remoting import RequestCode, request


@pytest.mark.parametrize("pattern, yes, no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("192.168.0.*", ["192.168.0.7"], ["192.168.1.7"]),
    ("10.*", ["10.9.8.7"], ["11.0.0.1"]),
    ("10.10.103.{1,2}", ["10.10.103.1", "10.10.103.2"], ["10.10.103.3"]),
    ("1.1.1.1-5", ["1.1.1.1", "1.1.1.5"], ["1.1.1.6"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["::1"], ["127.0.0.1"]),
])
def test_remote_address_forms(pattern: str, yes: list[str], no: list[str]) -> None:
    p = RemoteAddressPattern.parse(pattern)
    assert all(p.matches(a) for a in yes) and not any(p.matches(a) for a in no)


@pytest.mark.parametrize("bad", ["1.2.3", "1.2.3.300", "a.b.c.d", "1.2.3.{}"])
def test_bad_address_patterns_are_refused(bad: str) -> None:
    with pytest.raises(AclConfigError):
        RemoteAddressPattern.parse(bad)


def test_permissions_as_rocketmq_checks_them() -> None:
    assert Permission.parse("SUB|PUB") == Permission.PUB | Permission.SUB
    assert allows(Permission.ANY, Permission.SUB) and not allows(Permission.ANY, Permission.DENY)
    assert not allows(Permission.SUB, Permission.PUB)
    with pytest.raises(AclConfigError, match="WRITE"):
        Permission.parse("WRITE")


def test_file_errors_name_what_is_wrong() -> None:
    with pytest.raises(AclConfigError, match="appears twice"):
        PlainAccessConfig.from_yaml("accounts: [{accessKey: abcdef, secretKey: 123456},"
                                    " {accessKey: abcdef, secretKey: 654321}]")
    with pytest.raises(AclConfigError, match="at least 6"):
        PlainAccessConfig.from_yaml("accounts: [{accessKey: ab, secretKey: 123456}]")


def test_heartbeat_and_retry_topics_map_to_group_sub() -> None:
    body = orjson.dumps({"consumerDataSet": [{"groupName": "g1", "subscriptionDataSet": [
        {"topic": "T"}, {"topic": "%RETRY%g1"}]}]})
    need = required_access(request(RequestCode.HEART_BEAT, body=body))
    assert need.groups == {"g1": Permission.SUB} and need.topics == {"T": Permission.SUB}
    assert required_access(request(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"})).admin


@pytest.mark.parametrize("code, ext", [
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"}),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "T"}),
    (RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"}),
])
def test_read_only_admin_queries_need_a_signed_account_only(code, ext) -> None:
    # As RocketMQ: not among Permission.ADMIN_CODE, and no topic or group resource parsed from them.
    need = required_access(request(code, ext))
    assert not need.admin and need.topics == {} and need.groups == {}


def test_signing_round_trip_and_what_it_refuses(tmp_path) -> None:
    path = tmp_path / "acl.yml"
    path.write_text("accounts: [{accessKey: abcdef, secretKey: 123456, defaultTopicPerm: PUB}]")
    v = PlainAccessValidator(str(path), "test")
    cmd = request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"body")
    AclSigner(SessionCredentials("abcdef", "123456"))(cmd)
    v.check(cmd, "127.0.0.1")
    cmd.body = b"other"
    with pytest.raises(AclDenied, match="signature"):
        v.check(cmd, "127.0.0.1")
    old = request(RequestCode.SEND_MESSAGE, {"topic": "T"})
    AclSigner(SessionCredentials("abcdef", "123456"), lambda: time.time() - 61)(old)
    with pytest.raises(AclDenied, match="replay window"):
        v.check(old, "127.0.0.1")


def test_half_an_account_stops_a_service_start_naming_both_keys(capsys: pytest.CaptureFixture[str]) -> None:
    from rocketmesh.broker.config import load_broker_config
    from rocketmesh.ha.config import HaConfig
    from rocketmesh.ha.service import HaService
    from rocketmesh.runtime.config import ConfigError
    from rocketmesh.server.service_main import run_system_service

    # The ha service's own entry, as `python -m rocketmesh.ha` runs it: a config error, exit 2, no traceback.
    status = run_system_service("ha", "Replicate.", HaConfig, HaService,
                                ["-n", "127.0.0.1:1", "--set", "accessKey=rocketmq2"])
    err = capsys.readouterr().err
    assert status == 2 and "ha config error" in err and "Traceback" not in err
    assert "accessKey" in err and "secretKey" in err
    # The broker's loader (its own, beside the services' common one) says the same.
    with pytest.raises(ConfigError, match="accessKey is set but secretKey is not"):
        load_broker_config(None, {"accessKey": "rocketmq2"}, environ={})
    with pytest.raises(ConfigError, match="secretKey is set but accessKey is not"):
        load_broker_config(None, {"secretKey": "12345678"}, environ={})


def test_rocketmq_signature_matches_a_real_cpp_client() -> None:
    # The first frame PyPI rocketmq 0.4.4's C++ client sent (no credentials set: the empty key signs).
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "Yd/9qB1xZZU4kQ8PGXNdT6clnCc=", "topic": "SmokeTopic"}
    assert rocketmq_signature("", ext, b"") == ext["Signature"]
    assert rocketmq_signature("secret", ext, b"") != ext["Signature"]
    assert rocketmq_signature("", ext, b"body") != ext["Signature"]
