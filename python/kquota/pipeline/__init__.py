"""kquota's traffic pipeline on PySpark: usage analytics, what-if replay of quota
configurations through the same Rust kernel the brokers run, quota recommendation and an HTML
report. One module per command (``generate``, ``usage``, ``simulate``, ``recommend``,
``report``), plus ``schema`` (reading and validating request logs), ``replay`` (the batch API),
``session`` (the Spark session) and ``commands`` (the ``kquota pipeline`` CLI).

Needs the ``pipeline`` extra (``pip install 'kquota[pipeline]'``: pyspark, pandas, numpy,
pyarrow); importing this package alone needs none of them.
"""

from typing import Any

__all__ = ["replay"]


def __getattr__(name: str) -> Any:
    if name == "replay":
        from kquota.pipeline.replay import replay

        return replay
    raise AttributeError(f"module 'kquota.pipeline' has no attribute {name!r}")
