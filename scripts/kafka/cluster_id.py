"""A KRaft cluster id for ``kafka-storage format -t``, made as Kafka's ``Uuid.randomUuid`` makes
one: a random UUID in URL-safe base64 without padding, drawn again while it starts with ``-``
(about one in 64 would, and ``kafka-storage`` then reads it as an option: "argument
--cluster-id/-t: expected one argument")."""

from __future__ import annotations

import base64
import uuid
from typing import Callable


def cluster_id(random: Callable[[], uuid.UUID] = uuid.uuid4) -> str:
    """A cluster id that does not start with ``-``."""
    while True:
        text = base64.urlsafe_b64encode(random().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


if __name__ == "__main__":
    print(cluster_id())
