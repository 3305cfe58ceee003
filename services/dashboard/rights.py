"""What a signed-in account may do, as the brokers see it (GET_ACL_ACCOUNT)."""

from __future__ import annotations

from rocketmesh.client import Admin

from .sessions import Rights


def account_rights(admin: Admin) -> Rights:
    """The rights of the account ``admin`` signs as. The request is signed, so a wrong secret is refused
    here (MQBrokerError NO_PERMISSION), before the operator sees a page."""
    info = admin.acl_account()
    return Rights(admin=info.admin, default_topic_perm=info.default_topic_perm,
                  default_group_perm=info.default_group_perm, topic_perms=dict(info.topic_perms),
                  group_perms=dict(info.group_perms))
