"""API keys the proxy knows by number, and the versions it parses (ApiVersions is clamped to these)."""

from __future__ import annotations

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

#: api key -> (min, max) version the proxy parses; a client is never offered more.
#: SaslHandshake is capped at v1 so that tokens travel in SaslAuthenticate (KIP-152), where the
#: proxy can read the username; v0's raw tokens would bypass the Kafka framing.
PARSED_VERSIONS = {
    PRODUCE: (3, 11),
    FETCH: (4, 17),
    METADATA: (0, 12),
    FIND_COORDINATOR: (0, 6),
    SASL_HANDSHAKE: (1, 1),
    API_VERSIONS: (0, 4),
    CREATE_TOPICS: (0, 7),
    DELETE_TOPICS: (0, 6),
    SASL_AUTHENTICATE: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_CLUSTER: (0, 1),
    # Read for the proxy's own topics (kquota.proxy.own_topics).
    LIST_OFFSETS: (0, 10),
    DELETE_RECORDS: (0, 2),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}

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
