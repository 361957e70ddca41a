"""What kquota's Kafka clients and its proxy share: Kafka's side of the wire, apart from quotas.

Modules: ``protocol`` (Kafka's wire protocol: the schema-driven codec and the schemas
transcribed from Kafka, frames, API keys and error codes), ``java_properties``
(``java.util.Properties``' syntax, for Kafka's broker and client files), ``client_security``
(Kafka client properties: ``security.protocol``, ``ssl.*`` read by the native reader the proxy's
data plane uses, ``sasl.*``), ``client_quotas`` (the client-quota admin APIs' wire form, KIP-546)
and ``admin_client`` (a blocking connection for those APIs).

Used by the proxy (:mod:`kquota.proxy`), ``kquota configs --bootstrap-server`` and the
``kafka://`` store; importing this package loads none of them.
"""
