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

#: Kafka's cluster-action APIs (``ApiKeys`` with ``clusterAction = true``): exempt from request
#: quotas. SASL requests are exempt too: Kafka handles them in the authenticator, not KafkaApis.
REQUEST_QUOTA_EXEMPT = frozenset(
    {4, 5, 6, 7, 27, 52, 53, 54, 55, 56, 57, 58, 62, 63, 67, 83, 84, 85, 86, 87,
     SASL_HANDSHAKE, SASL_AUTHENTICATE}
)

#: Kafka error codes the proxy produces or reads.
NONE = 0
UNKNOWN_SERVER_ERROR = -1
UNSUPPORTED_VERSION = 35
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
THROTTLING_QUOTA_EXCEEDED = 89
INVALID_CONFIG = 40
