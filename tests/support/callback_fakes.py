"""The KIP-257 callbacks the callback-contract tests drive (tests/embedding/test_callback_*.py):
one that counts every call, one that signals resets, one that reads cluster metadata; and
``drive``, which records through named calls or through handles. ``CountsLimitCalls`` counts
the limit calls of a shipped plugin (tests/plugins/)."""

from kquota import ClientQuotaCallback, ClientQuotaType as Q

MAX_THROTTLE = 2**31 - 1
BIG = 10_000_000  # bytes: far over any limit used here in one record


class CountsLimitCalls:
    """Mixed in before a callback class (``class C(CountsLimitCalls, SomeCallback)``): counts its
    ``quota_limit`` calls, to show which the kernel's caching saves."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.limit_calls = 0

    def quota_limit(self, quota_type, metric_tags):
        self.limit_calls += 1
        return super().quota_limit(quota_type, metric_tags)


class Counting(ClientQuotaCallback):
    """Users "a" and "b" share group "g"; everyone else is per user. Counts every call."""

    def __init__(self, limit=1000.0):
        self.limit = limit
        self.tag_calls = []
        self.limit_calls = []
        self.updates = []
        self.removes = []
        self.configs = None
        self.closed = 0

    def configure(self, configs):
        self.configs = dict(configs)

    def quota_metric_tags(self, quota_type, principal, client_id):
        self.tag_calls.append((quota_type, principal.name, client_id))
        if principal.name in ("a", "b"):
            return {"group": "g"}
        return {"user": principal.name, "client-id": ""}

    def quota_limit(self, quota_type, metric_tags):
        self.limit_calls.append((quota_type, dict(metric_tags)))
        return self.limit

    def update_quota(self, quota_type, entity, new_value):
        self.updates.append((quota_type, entity, new_value))

    def remove_quota(self, quota_type, entity):
        self.removes.append((quota_type, entity))

    def close(self):
        self.closed += 1


class Resetting(Counting):
    def __init__(self):
        super().__init__()
        self.polls = 0
        self.reset = set()

    def quota_reset_required(self, quota_type):
        self.polls += 1
        if quota_type in self.reset:
            self.reset.discard(quota_type)
            return True
        return False


class Metadata(Counting):
    def __init__(self, answer):
        super().__init__()
        self.answer = answer
        self.seen = []

    def update_cluster_metadata(self, cluster):
        self.seen.append(cluster)
        return self.answer


HANDLES: dict = {}


def drive(qm, n=1000, users=("a", "b", "c"), client="cl", mode="named"):
    """n PRODUCE records per user, through named calls or through one handle per user."""
    if mode == "named":
        for i in range(n):
            for u in users:
                qm.record_and_get_throttle_time_ms(Q.PRODUCE, u, client, 1, now_ms=i)
    else:
        # one handle per connection, kept across calls (a new handle resolves afresh)
        handles = HANDLES.setdefault(id(qm), {})
        for u in users:
            handles.setdefault((u, client), qm.client(u, client))
        for i in range(n):
            for u in users:
                handles[(u, client)].record_and_get_throttle_time_ms(Q.PRODUCE, 1, i)

