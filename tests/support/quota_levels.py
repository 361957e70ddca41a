"""The eight entity levels a client quota can be set at, highest precedence first, and the check
that a quota type other than bytes resolves over them as the byte quotas do (the controller-mutation
and request-time rules, tests/kernel/test_mutation_quota_rules.py and test_request_quota_rules.py)."""

U, C = "alice", "c1"

LEVELS = [
    {"user": U, "client-id": C},
    {"user": U, "client-id": None},
    {"user": U},
    {"user": None, "client-id": C},
    {"user": None, "client-id": None},
    {"user": None},
    {"client-id": C},
    {"client-id": None},
]
# Which of LEVELS a case configures: each alone, then mixes.
LEVEL_CHOICES = [[i] for i in range(8)] + [[0, 5], [2, 7], [3, 6, 1], [4, 2], list(range(8))]
PROBES = [(u, c) for u in (U, "bob", "c d", "<default>") for c in (C, "c2", "")]


def assert_resolves_like(qm, quota_type, byte_type) -> None:
    """Every probed (user, client-id) gets the same tags and limit for ``quota_type`` as for
    ``byte_type``."""
    for user, client in PROBES:
        assert qm.quota_metric_tags(quota_type, user, client) == \
            qm.quota_metric_tags(byte_type, user, client), (user, client)
        assert qm.quota_limit(quota_type, user, client) == qm.quota_limit(byte_type, user, client), (user, client)
