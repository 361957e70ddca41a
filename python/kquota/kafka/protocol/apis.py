"""API keys the proxy knows by number, and the versions it parses (ApiVersions is clamped to these)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from kquota import _kquota

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
ALTER_CONFIGS = 33
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
INCREMENTAL_ALTER_CONFIGS = 44
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_CLUSTER = 60
DESCRIBE_TOPIC_PARTITIONS = 75

#: api key -> (min, max) version the proxy parses; a client is never offered more. The table is
#: the data plane's (``kquota_proxy::tables::PARSED_VERSIONS``, which refuses any other version),
#: read here so that the ApiVersions clamp and the admin client offer what it accepts; a
#: read-only view, since changing it here would change nothing the data plane checks.
PARSED_VERSIONS: Mapping[int, tuple[int, int]] = MappingProxyType(_kquota.parsed_versions())

#: APIs the proxy answers itself (offered even when the broker lacks them).
ANSWERED_BY_PROXY = (DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS)

#: APIs exempt from the request quota through the proxy: none. Kafka exempts its cluster-action
#: APIs (``ApiKeys`` with ``clusterAction = true``: LeaderAndIsr, Fetch from a replica, ...)
#: because only brokers and controllers send them, with the cluster's principal; brokers never
#: replicate through the proxy, so whoever sends one here is a client and is charged as one.
#: SASL before authentication is not recorded at all (the handlers'; Kafka's authenticator
#: answers it, not ``KafkaApis``).
REQUEST_QUOTA_EXEMPT: frozenset[int] = frozenset()

#: Kafka error codes the proxy produces or reads.
NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_VERSION = 35
CLUSTER_AUTHORIZATION_FAILED = 31
ILLEGAL_SASL_STATE = 34
INVALID_REQUEST = 42
THROTTLING_QUOTA_EXCEEDED = 89
INVALID_CONFIG = 40
