"""What the controller-mutation quota tests share (tests/kernel/test_mutation_quota*.py)."""

from quota_levels import C, U

KEY = "controller_mutation_rate"


def _quota(qm, rate, entity=None):
    qm.alter_client_quotas([(entity or {"user": U}, {KEY: rate})])


def _tokens(qm, t, user=U, client=C):
    return qm.controller_mutation_tokens(user, client, now_ms=t)


def _strict(impl, qm, mutations, t, user=U, client=C):
    """The strict outcome: 0, or ("raised", throttle_time_ms)."""
    try:
        return qm.record_controller_mutations(user, client, mutations, now_ms=t, strict=True)
    except impl.ThrottlingError as e:
        return ("raised", e.throttle_time_ms)
