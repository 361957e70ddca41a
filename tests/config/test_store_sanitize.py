"""Kafka's Sanitizer in Python, and entity paths in Kafka's ZooKeeper layout."""

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kquota import ClientQuotaEntity
from kquota.stores import desanitize, entity_path, parse_entity_path, sanitize


def test_desanitize_reads_escapes_as_javas_url_decoder_does():
    """URLDecoder's details, read in the JDK 17 source: each run of %XX escapes is decoded as one
    byte sequence (a run cut mid-character is U+FFFD, not joined with the next run), the two
    characters go through Integer.parseInt(s, 16) (a sign may lead: %+F is 0x0F, %-0 is 0, and a
    negative value is refused), a lone '%' near the end is refused, other characters stay."""
    assert desanitize("%C3+%A9") == "\ufffd \ufffd"  # two runs, neither a whole character
    assert desanitize("%C3%A9+%E2%82%AC") == "é €"
    assert desanitize("%+F") == "\x0f" and desanitize("%-0") == "\x00"
    assert desanitize("é€😀") == "é€😀" and desanitize("a\udcffb") == "a?b"
    for bad in ("%-1", "%%41", "a%2", "%2-", "% 1", "%é1"):
        with pytest.raises(ValueError):
            desanitize(bad)


@given(st.text(max_size=40))
@settings(max_examples=400, deadline=None)
def test_sanitize_then_desanitize_is_the_identity(name):
    """Kafka's Sanitizer round trip for any name without a lone surrogate (Java writes one as
    '?', see test_sanitize_known_cases); the node name holds only node-safe characters."""
    assume(not any(0xD800 <= ord(c) <= 0xDFFF for c in name))
    node = sanitize(name)
    assert re.fullmatch(r"[a-zA-Z0-9._\-%]*", node)
    assert desanitize(node) == name


@pytest.mark.parametrize(
    "raw, node",
    [
        ("user1", "user1"),
        ("alice.smith-x_y", "alice.smith-x_y"),
        # Kafka's SanitizerTest principal: every special character percent-encoded.
        ("CN=Some characters !@#$%&*()_-+=';:,/~",
         "CN%3DSome%20characters%20%21%40%23%24%25%26%2A%28%29_-%2B%3D%27%3B%3A%2C%2F%7E"),
        ("a b", "a%20b"),          # URLEncoder's '+' for a space becomes %20
        ("a*b", "a%2Ab"),          # '*' is kept by URLEncoder, Kafka re-encodes it
        ("<default>", "%3Cdefault%3E"),
        ("User:CN=bob,O=x", "User%3ACN%3Dbob%2CO%3Dx"),
        ("é€", "%C3%A9%E2%82%AC"),  # UTF-8 bytes, upper-case hex
        ("a\udcffb", "a%3Fb"),     # a lone surrogate is '?', as Java's encoder writes it
    ],
)
def test_sanitize_known_cases(raw, node):
    assert sanitize(raw) == node
    if "\udcff" not in raw:
        assert desanitize(node) == raw


def test_sanitized_names_are_node_safe():
    # Kafka's SanitizerTest: only letters, digits, '.', '_', '-' and '%' remain.
    import re

    for cp in list(range(0, 0x250)) + [0x2603, 0x1F600]:
        s = sanitize("x" + chr(cp))
        assert re.fullmatch(r"[a-zA-Z0-9._\-%]+", s), (cp, s)
        assert desanitize(s) == "x" + chr(cp)


def test_desanitize_is_javas_url_decoder():
    assert desanitize("a+b") == "a b"  # URLDecoder reads '+' as a space
    assert desanitize("%e2%82%ac") == "€"  # lower-case hex accepted
    assert desanitize("%FF") == "\ufffd"  # malformed UTF-8 becomes U+FFFD
    for bad in ("%", "%4", "a%G1"):
        with pytest.raises(ValueError):
            desanitize(bad)


@pytest.mark.parametrize(
    "entity, path",
    [
        ({"user": "user1"}, "users/user1"),
        ({"user": None}, "users/<default>"),
        ({"user": "user2", "client-id": "clientA"}, "users/user2/clients/clientA"),
        ({"user": None, "client-id": None}, "users/<default>/clients/<default>"),
        ({"client-id": None}, "clients/<default>"),
        ({"client-id": "clientA"}, "clients/clientA"),
        ({"user": "<default>"}, "users/%3Cdefault%3E"),
        ({"user": "a/b", "client-id": "c d"}, "users/a%2Fb/clients/c%20d"),
    ],
)
def test_entity_paths_round_trip(entity, path):
    e = ClientQuotaEntity(entity)
    assert entity_path(e) == path
    assert parse_entity_path(path) == e


@pytest.mark.parametrize("path", ["users", "users/", "topics/t1", "users/a/clients", "users/a/topics/b",
                                  "clients/a/users/b", "users/%4", "clients/"])
def test_bad_entity_paths(path):
    with pytest.raises(ValueError):
        parse_entity_path(path)
