"""Storage-aware produce quotas, in the spirit of Strimzi's ``StaticQuotaCallback``.

While free disk space on any watched path is below a threshold, every produce sensor is limited
to a floor, so producers slow down before the broker runs out of disk; other quota types, and
produce while there is space, follow Kafka's built-in precedence over the quotas set with
``QuotaManager.alter_client_quotas``. ``callback_configs``::

    {
        "paths": ["/var/lib/kafka/data-0"],   # required: the log directories to watch
        "min_free_bytes": 10 * 2**30,         # low when free bytes drop below this, and/or
        "min_free_ratio": 0.05,               # when free / total drops below this (0..1)
        "produce_floor": 1_048_576,           # produce bytes/s per sensor while low (0 blocks)
        "check_interval_s": 10,               # background check period; 0: no thread
        "excluded_users": ["replicator"],     # never throttled (any quota type)
        "disk_usage": shutil.disk_usage,      # (path) -> (total, used, free); inject for tests
    }

How changes reach the kernel: a daemon thread (``kquota-storage-check``) checks every
``check_interval_s``; when the low/ok state flips it raises a flag that ``quota_reset_required``
returns once for PRODUCE (the class overrides it, so the kernel polls it on each request: a flag
read, the disk is never touched on the request path), and cached produce limits are read again.
That poll is one Python call per request (about 4x a cached request, see
``benches/results/callback.md``); :class:`PushingStorageAwareCallback` avoids it by calling
``QuotaManager.signal_quota_reset`` (passed as ``"signal_reset"``) on a flip instead.
``check_now()`` runs a check synchronously (with ``check_interval_s`` 0 it is the only way).
``close()`` stops and joins the thread. A path that cannot be read during a check keeps its last
state (logged on ``kquota.plugins.storage_aware``); at ``configure()`` it is a config error.

While low, a produce sensor's limit is ``min(its configured limit, produce_floor)``: the floor
applies per sensor (per user, client-id or both, as the built-in tags group requests), not to the
broker's total.
"""

from __future__ import annotations

import logging
import math
import shutil
import threading
from typing import Any, Callable, Mapping, Optional

from kquota.quota_type import ClientQuotaType
from kquota.callback import ClientQuotaCallback
from kquota.entity import ClientQuotaEntity, KafkaPrincipal
from kquota.exceptions import QuotaConfigError
from kquota.plugins import _config
from kquota.plugins._configured import ConfiguredQuotas, sanitize

__all__ = ["EXCLUDED_TAG", "PushingStorageAwareCallback", "StorageAwareCallback"]

logger = logging.getLogger("kquota.plugins.storage_aware")

#: The tag key under which excluded users are recorded (unlimited).
EXCLUDED_TAG = "excluded-user"

DiskUsage = Callable[[str], Any]


class StorageAwareCallback(ClientQuotaCallback):
    """Caps produce at a floor while a watched disk is low on space (see the module doc)."""

    def __init__(self) -> None:
        self.paths: tuple[str, ...] = ()
        self.min_free_bytes: Optional[float] = None
        self.min_free_ratio: Optional[float] = None
        self.produce_floor = 0.0
        self.check_interval_s = 10.0
        self.excluded_users: frozenset[str] = frozenset()
        self.disk_usage: DiskUsage = shutil.disk_usage
        self.configured = ConfiguredQuotas()
        #: path -> whether it was below the threshold at its last successful check
        self.low_paths: dict[str, bool] = {}
        self._low = False
        self._produce_reset = False
        self._check_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._signal: Optional[Callable[[ClientQuotaType], None]] = None

    #: Whether flips are pushed through ``signal_reset`` instead of polled.
    _pushes = False

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Validates the configs, checks every path once, and starts the checker thread."""
        where = "storage-aware configs"
        configs = _config.mapping(configs, where)
        _config.known_keys(
            configs,
            ("paths", "min_free_bytes", "min_free_ratio", "produce_floor", "check_interval_s",
             "excluded_users", "disk_usage") + (("signal_reset",) if self._pushes else ()),
            where,
        )
        if self._pushes:
            signal = configs.get("signal_reset")
            if not callable(signal):
                raise QuotaConfigError(
                    "storage-aware: 'signal_reset' must be the manager's signal_quota_reset "
                    f"(a callable taking a quota type), got {type(signal).__name__}"
                )
            self._signal = signal
        if "paths" not in configs:
            raise QuotaConfigError("storage-aware: 'paths' is required (the log directories to watch)")
        paths = _config.names(configs["paths"], "storage-aware: 'paths'")
        if not paths:
            raise QuotaConfigError("storage-aware: 'paths' must name at least one directory")
        if "min_free_bytes" not in configs and "min_free_ratio" not in configs:
            raise QuotaConfigError("storage-aware: set 'min_free_bytes' and/or 'min_free_ratio'")
        if "min_free_bytes" in configs:
            self.min_free_bytes = _config.number(configs["min_free_bytes"], "storage-aware: 'min_free_bytes'")
        if "min_free_ratio" in configs:
            self.min_free_ratio = _config.number(configs["min_free_ratio"], "storage-aware: 'min_free_ratio'", maximum=1.0)
        if "produce_floor" not in configs:
            raise QuotaConfigError("storage-aware: 'produce_floor' (bytes/s while disk is low) is required")
        self.produce_floor = _config.number(configs["produce_floor"], "storage-aware: 'produce_floor'")
        self.check_interval_s = _config.number(configs.get("check_interval_s", 10.0), "storage-aware: 'check_interval_s'")
        self.excluded_users = frozenset(_config.names(configs.get("excluded_users", []), "storage-aware: 'excluded_users'"))
        disk_usage = configs.get("disk_usage", shutil.disk_usage)
        if not callable(disk_usage):
            raise QuotaConfigError(f"storage-aware: 'disk_usage' must be callable, got {type(disk_usage).__name__}")
        self.disk_usage = disk_usage
        self.paths = tuple(paths)
        for path in self.paths:
            try:
                self.low_paths[path] = self._is_low(path)
            except Exception as e:
                raise QuotaConfigError(f"storage-aware: cannot read disk usage of {path!r}: {e}") from None
        self._low = any(self.low_paths.values())
        if self.check_interval_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kquota-storage-check", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ disk checks

    def _is_low(self, path: str) -> bool:
        usage = self.disk_usage(path)
        total, free = float(usage[0]), float(usage[2])
        if math.isnan(total) or math.isnan(free) or total < 0 or free < 0:
            raise ValueError(f"disk_usage returned {usage!r}")
        low = self.min_free_bytes is not None and free < self.min_free_bytes
        if self.min_free_ratio is not None and total > 0:
            low = low or free / total < self.min_free_ratio
        return low

    @property
    def low_disk(self) -> bool:
        """Whether produce is currently held to the floor."""
        return self._low

    def check_now(self) -> bool:
        """Checks every path now; returns True if the low/ok state flipped (a reset is then
        signalled to the kernel through ``quota_reset_required``)."""
        with self._check_lock:
            for path in self.paths:
                try:
                    self.low_paths[path] = self._is_low(path)
                except Exception as e:
                    logger.warning("storage-aware: cannot read disk usage of %r (keeping its last state): %s", path, e)
            low = any(self.low_paths.values())
            if low == self._low:
                return False
            self._low = low
            if self._signal is None:
                self._produce_reset = True
        if self._signal is not None:
            self._signal(ClientQuotaType.PRODUCE)
        logger.warning(
            "storage-aware: free disk %s; produce %s",
            "below the threshold" if low else "back above the threshold",
            f"limited to {self.produce_floor:g} B/s per sensor" if low else "back to its configured quotas",
        )
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.check_interval_s):
            try:
                self.check_now()
            except Exception:  # keep watching whatever a check hits
                logger.exception("storage-aware: disk check failed")

    def close(self) -> None:
        """Stops and joins the checker thread."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # ------------------------------------------------------------------ callback

    def quota_reset_required(self, quota_type: ClientQuotaType) -> bool:
        if self._produce_reset and quota_type == ClientQuotaType.PRODUCE:
            self._produce_reset = False
            return True
        return False

    def quota_metric_tags(
        self, quota_type: ClientQuotaType, principal: KafkaPrincipal, client_id: str
    ) -> dict[str, str]:
        if principal.name in self.excluded_users:
            return {EXCLUDED_TAG: sanitize(principal.name)}
        return self.configured.metric_tags(quota_type, principal.name, client_id)

    def quota_limit(self, quota_type: ClientQuotaType, metric_tags: Mapping[str, str]) -> Optional[float]:
        if EXCLUDED_TAG in metric_tags:
            return None
        limit = self.configured.limit(quota_type, metric_tags)
        if quota_type == ClientQuotaType.PRODUCE and self._low:
            return self.produce_floor if limit is None else min(limit, self.produce_floor)
        return limit

    def update_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        self.configured.update(quota_type, entity, new_value)

    def remove_quota(self, quota_type: ClientQuotaType, entity: ClientQuotaEntity) -> None:
        self.configured.remove(quota_type, entity)


class PushingStorageAwareCallback(StorageAwareCallback):
    """:class:`StorageAwareCallback` that pushes a flip to the manager instead of being polled.

    It does not override ``quota_reset_required``, so cached requests cost what they cost without
    a callback; the manager must exist first, so install it with ``set_callback``::

        qm = kquota.QuotaManager()
        qm.set_callback(PushingStorageAwareCallback(), {..., "signal_reset": qm.signal_quota_reset})
    """

    _pushes = True
    quota_reset_required = ClientQuotaCallback.quota_reset_required
