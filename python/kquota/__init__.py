"""kquota: Apache Kafka's client quotas (KIP-13, KIP-55) as an in-process kernel.

>>> import kquota
>>> qm = kquota.QuotaManager()
>>> qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1024})])
>>> qm.record_and_get_throttle_time_ms(kquota.ClientQuotaType.PRODUCE, "alice", "c1", 100, now_ms=0)
0
"""

from kquota._kquota import ClientHandle, ClientQuotaType, __version__
from kquota.entity import ClientQuotaEntity, KafkaPrincipal
from kquota.exceptions import KQuotaError, QuotaConfigError, QuotaValueError, ThrottlingQuotaExceededError
from kquota.manager import CONFIG_KEYS, QuotaManager
from kquota.metrics import Metric

__all__ = [
    "CONFIG_KEYS",
    "ClientHandle",
    "ClientQuotaEntity",
    "ClientQuotaType",
    "KQuotaError",
    "KafkaPrincipal",
    "Metric",
    "QuotaConfigError",
    "QuotaManager",
    "QuotaValueError",
    "ThrottlingQuotaExceededError",
    "__version__",
]
