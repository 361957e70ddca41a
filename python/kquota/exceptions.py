"""kquota's exception hierarchy, rooted at :class:`KQuotaError`.

The classes are created by the native module (so kernel errors map to them directly) and
re-exported here.
"""

from kquota._kquota import (
    KQuotaError,
    QuotaConfigError,
    QuotaValueError,
    ThrottlingQuotaExceededError,
    TooManyConnectionsError,
)

__all__ = ["KQuotaError", "QuotaConfigError", "QuotaValueError", "ThrottlingQuotaExceededError", "TooManyConnectionsError"]
