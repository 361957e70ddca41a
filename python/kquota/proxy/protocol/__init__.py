"""Kafka's wire protocol as the proxy reads and writes it, apart from any quota or socket:
``codec`` (the schema-driven codec) and ``schemas`` (loads ``schemas.json``: Kafka's message
schemas as data), ``frames`` (size prefix, request and response headers), ``apis`` (API keys,
the versions the proxy parses, error codes), ``versions`` (the ApiVersions clamp),
``addresses`` (broker addresses rewritten to the proxy's) and ``throttle_field`` (the proxy's
throttle written into a response's ``ThrottleTimeMs`` field)."""
