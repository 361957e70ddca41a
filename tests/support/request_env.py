"""What the request-time quota tests share (tests/kernel/test_request_quota*.py)."""

from quota_levels import C, U  # noqa: F401 (C: the tests import it from here)

MS = 1_000_000  # nanoseconds per millisecond


def _user_quota(qm, percent, user=U):
    qm.alter_client_quotas([({"user": user}, {"request_percentage": percent})])
