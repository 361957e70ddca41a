"""Transcribes Kafka's message JSON schemas into ``python/kquota/kafka/protocol/schemas.json`` (data only).

    python scripts/gen_proxy_schemas.py /path/to/kafka/clients/src/main/resources/common/message

Only the messages the proxy parses are transcribed, plus one fact for every other response: the
first version whose first body field is ``ThrottleTimeMs`` (so any response can carry the
proxy's throttle). Run again when moving to a newer Kafka protocol; the output is committed.
"""

from __future__ import annotations

import json
import os
import re
import sys

PARSED = [
    "RequestHeader", "ResponseHeader",
    "ApiVersionsRequest", "ApiVersionsResponse", "MetadataResponse", "FindCoordinatorResponse",
    "DescribeClusterResponse", "MetadataRequest", "ProduceRequest", "ProduceResponse", "FetchRequest", "FetchResponse",
    "CreateTopicsRequest", "CreateTopicsResponse", "DeleteTopicsRequest", "DeleteTopicsResponse",
    "CreatePartitionsRequest", "CreatePartitionsResponse", "DescribeClientQuotasRequest",
    "DescribeClientQuotasResponse", "AlterClientQuotasRequest", "AlterClientQuotasResponse",
    "SaslHandshakeRequest", "SaslAuthenticateRequest", "SaslAuthenticateResponse",
    "ListOffsetsRequest", "ListOffsetsResponse", "DeleteRecordsRequest", "DeleteRecordsResponse",
    "AlterConfigsRequest", "AlterConfigsResponse", "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResponse", "DescribeTopicPartitionsRequest", "DescribeTopicPartitionsResponse",
]
MAX = 32767
#: Stands for a default of null in the data (``None`` there means "no default given").
NULL = "\x00null"


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        text = "\n".join(line for line in f if not line.lstrip().startswith("//"))
    return json.loads(text)


def versions(text: str | None) -> tuple[int, int] | None:
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), MAX
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def field(f: dict, common: dict) -> tuple:
    t = f["type"]
    sub = None
    elem = None
    if t.startswith("[]"):
        inner = t[2:]
        if inner in ("int8", "int16", "int32", "int64", "string", "uuid", "float64", "bool", "bytes"):
            elem = inner
        else:
            elem = "struct"
            sub = tuple(field(x, common) for x in (f.get("fields") or common[inner]))
        t = "array"
    elif t not in ("int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "string",
                   "bytes", "records", "bool", "uuid"):
        sub = tuple(field(x, common) for x in (f.get("fields") or common[t]))
        t = "struct"
    default = f.get("default")
    if isinstance(default, str):
        if default == "null":
            default = NULL
        elif re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", default):
            default = int(default, 0)  # Kafka writes some as hex (FetchRequest MaxBytes)
        elif default in ("true", "false"):
            default = default == "true"
    v = versions(f["versions"])
    n = versions(f.get("nullableVersions"))
    tg = versions(f.get("taggedVersions"))
    return (f["name"], t, elem, v, n, f.get("tag"), tg, default, sub)


def main(message_dir: str, out: str) -> None:
    specs = {}
    throttle_first: dict[int, int] = {}
    flexible_first: dict[int, int] = {}
    for name in sorted(os.listdir(message_dir)):
        if not name.endswith(".json"):
            continue
        doc = load(os.path.join(message_dir, name))
        if doc.get("type") == "response":
            flex = versions(doc["flexibleVersions"])
            if flex is not None:
                flexible_first[doc["apiKey"]] = flex[0]
        if doc.get("type") == "response" and doc.get("fields"):
            first = doc["fields"][0]
            if first["name"] == "ThrottleTimeMs":
                throttle_first[doc["apiKey"]] = versions(first["versions"])[0]
        if name[:-5] not in PARSED:
            continue
        common = {c["name"]: c["fields"] for c in doc.get("commonStructs", [])}
        specs[name[:-5]] = {
            "api_key": doc.get("apiKey"),
            "valid": versions(doc["validVersions"]),
            "flexible": versions(doc["flexibleVersions"]),
            "fields": tuple(field(f, common) for f in doc["fields"]),
        }
    doc = {
        "SCHEMAS": specs,
        # JSON keys are strings; kquota/kafka/protocol/schemas.py turns these back into ints.
        "THROTTLE_FIRST": {str(k): v for k, v in throttle_first.items()},
        "FLEXIBLE_FIRST": {str(k): v for k, v in flexible_first.items()},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"), sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(__file__), "..", "python", "kquota", "kafka", "protocol", "schemas.json"))
