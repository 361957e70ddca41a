"""Kafka's wire protocol as kquota reads and writes it, apart from any quota or socket:
``codec`` (the schema-driven codec) and ``schemas`` (loads ``schemas.json``: Kafka's message
schemas as data), ``frames`` (size prefix, request and response headers) and ``apis`` (API keys,
the versions kquota parses, error codes). What only the proxy does with it (the ApiVersions
clamp, broker addresses, the ``ThrottleTimeMs`` field) is :mod:`kquota.proxy`'s."""
