"""kquota: Apache Kafka's client quotas (KIP-13, KIP-55, KIP-124, KIP-599) as an in-process kernel.

>>> import kquota
>>> qm = kquota.QuotaManager()
>>> qm.alter_client_quotas([({"user": "alice"}, {"producer_byte_rate": 1024})])
>>> qm.record_and_get_throttle_time_ms(kquota.ClientQuotaType.PRODUCE, "alice", "c1", 100, now_ms=0)
0
"""

from kquota._kquota import ClientHandle, __version__
from kquota.quota_type import ClientQuotaType
from kquota.callback import ClientQuotaCallback, ClusterMetadata, PartitionInfo
from kquota.entity import ClientQuotaEntity, ConfigEntity, ConfigEntityType, KafkaPrincipal
from kquota.exceptions import KQuotaError, QuotaConfigError, QuotaValueError, ThrottlingQuotaExceededError
from kquota.manager import CONFIG_KEYS, QuotaManager
from kquota.response import ResponseThrottle, response_throttle
from kquota.metrics import Metric

__all__ = [
    "CONFIG_KEYS",
    "ClientHandle",
    "ClientQuotaCallback",
    "ClientQuotaEntity",
    "ClientQuotaType",
    "ClusterMetadata",
    "ConfigEntity",
    "ConfigEntityType",
    "KQuotaError",
    "KafkaPrincipal",
    "PartitionInfo",
    "Metric",
    "QuotaConfigError",
    "QuotaManager",
    "QuotaValueError",
    "ResponseThrottle",
    "ThrottlingQuotaExceededError",
    "__version__",
    "response_throttle",
]
