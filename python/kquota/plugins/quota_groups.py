"""Quota groups (KIP-257 scenario 1): named groups of users and/or client-ids sharing one quota.

``callback_configs``::

    {
        "groups": {
            "analytics": {
                "users": ["alice", "bob"],          # principal names; "svc-*" matches a prefix
                "client_ids": ["etl-*"],            # client-ids, same rules
                "quotas": {"producer_byte_rate": 1_000_000, "consumer_byte_rate": 2_000_000},
            },
        },
        "default": "kafka",                         # or "unlimited": how non-members are treated
    }

Every request of a member is recorded under the tags ``{"quota-group": <name>}``, so all members
share one sensor per quota type, limited by the group's quota (0 blocks). Membership is decided
once per (principal, client-id): an exact user name, else the longest matching user prefix, else
an exact client-id, else the longest client-id prefix. A name or pattern may appear in one group
only. For a quota type the group sets no quota for, and for principals in no group, the
``default`` applies: ``"kafka"`` (the default) follows Kafka's built-in precedence over the
quotas set with ``QuotaManager.alter_client_quotas`` (the plugin tracks ``update_quota`` /
``remove_quota``); ``"unlimited"`` leaves them unthrottled (tags ``{"user": ..., "client-id": ""}``).

Group quotas are fixed per configuration; change them at run time with
``qm.set_callback(QuotaGroupsCallback(), new_configs)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from kquota.quota_type import ClientQuotaType
from kquota.callback import ClientQuotaCallback
from kquota.entity import ClientQuotaEntity, KafkaPrincipal
from kquota.exceptions import QuotaConfigError
from kquota.plugins import _config
from kquota.plugins._configured import ConfiguredQuotas, sanitize

__all__ = ["GROUP_TAG", "QuotaGroup", "QuotaGroupsCallback"]

#: The tag key under which members of a group are recorded.
GROUP_TAG = "quota-group"

_DEFAULTS = ("kafka", "unlimited")


@dataclass(frozen=True)
class QuotaGroup:
    """One configured group: its members and its quota per type."""

    name: str
    users: tuple[str, ...]
    client_ids: tuple[str, ...]
    quotas: Mapping[ClientQuotaType, float]


class _Matcher:
    """Exact names first, then the longest matching ``prefix*`` pattern."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.exact: dict[str, str] = {}
        self.prefixes: list[tuple[str, str]] = []  # (prefix, group), longest first
        self._seen: dict[str, str] = {}

    def add(self, pattern: str, group: str) -> None:
        other = self._seen.get(pattern)
        if other is not None:
            raise QuotaConfigError(
                f"quota groups: {self.kind} {pattern!r} is listed in both group {other!r} and group {group!r}"
            )
        self._seen[pattern] = group
        if pattern.endswith("*"):
            self.prefixes.append((pattern[:-1], group))
            self.prefixes.sort(key=lambda p: -len(p[0]))
        else:
            self.exact[pattern] = group

    def match(self, name: str) -> Optional[str]:
        group = self.exact.get(name)
        if group is not None:
            return group
        for prefix, group in self.prefixes:
            if name.startswith(prefix):
                return group
        return None


class QuotaGroupsCallback(ClientQuotaCallback):
    """Shares one quota per type among the members of each configured group (see the module doc)."""

    def __init__(self) -> None:
        self.groups: dict[str, QuotaGroup] = {}
        self.default = "kafka"
        self.configured = ConfiguredQuotas()
        self._users = _Matcher("user")
        self._clients = _Matcher("client-id")

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Validates and loads the groups; raises ``QuotaConfigError`` naming the bad entry."""
        configs = _config.mapping(configs, "quota groups configs")
        _config.known_keys(configs, ("groups", "default"), "quota groups configs")
        default = configs.get("default", "kafka")
        if default not in _DEFAULTS:
            raise QuotaConfigError(f"quota groups: 'default' must be 'kafka' or 'unlimited', got {default!r}")
        raw_groups = _config.mapping(configs.get("groups", {}), "quota groups: 'groups'")
        users, clients = _Matcher("user"), _Matcher("client-id")
        groups = {}
        for name, spec in raw_groups.items():
            where = f"quota groups: group {name!r}"
            if not name:
                raise QuotaConfigError("quota groups: a group name must not be empty")
            spec = _config.mapping(spec, where)
            _config.known_keys(spec, ("users", "client_ids", "quotas"), where)
            members = _config.names(spec.get("users", []), f"{where}, 'users'")
            client_ids = _config.names(spec.get("client_ids", []), f"{where}, 'client_ids'")
            if not members and not client_ids:
                raise QuotaConfigError(f"{where}: needs at least one entry in 'users' or 'client_ids'")
            if "quotas" not in spec:
                raise QuotaConfigError(f"{where}: 'quotas' is required (e.g. {{'producer_byte_rate': 1048576}})")
            quotas = _config.quotas(spec["quotas"], f"{where}, 'quotas'")
            for user in members:
                users.add(user, name)
            for client in client_ids:
                clients.add(client, name)
            groups[name] = QuotaGroup(name, tuple(members), tuple(client_ids), quotas)
        self.groups, self.default, self._users, self._clients = groups, default, users, clients

    def group_of(self, principal_name: str, client_id: str) -> Optional[QuotaGroup]:
        """The group a (principal, client-id) belongs to, if any."""
        name = self._users.match(principal_name)
        if name is None:
            name = self._clients.match(client_id)
        return None if name is None else self.groups[name]

    def quota_metric_tags(
        self, quota_type: ClientQuotaType, principal: KafkaPrincipal, client_id: str
    ) -> dict[str, str]:
        group = self.group_of(principal.name, client_id)
        if group is not None and quota_type in group.quotas:
            return {GROUP_TAG: group.name}
        if self.default == "unlimited":
            return {"user": sanitize(principal.name), "client-id": ""}
        return self.configured.metric_tags(quota_type, principal.name, client_id)

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> Optional[float]:
        name = metric_tags.get(GROUP_TAG)
        if name is not None:
            group = self.groups.get(name)
            return None if group is None else group.quotas.get(quota_type)
        if self.default == "unlimited":
            return None
        return self.configured.limit(quota_type, metric_tags)

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        self.configured.update(quota_type, entity, new_value)

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        self.configured.remove(quota_type, entity)
