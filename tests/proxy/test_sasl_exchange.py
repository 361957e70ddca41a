"""``kquota.proxy.sasl.Authentication``: which answered rounds complete an exchange, round by
round as Kafka's ``SaslServerAuthenticator`` runs PLAIN, SCRAM and OAUTHBEARER, including the
answers of a broker that says ErrorCode 0 to everything (how a proxy that trusts ErrorCode 0
alone was fooled)."""

from __future__ import annotations

import pytest
from kquota.proxy.sasl import ANONYMOUS, AUTHENTICATED, NOTHING, REFUSED, Authentication
from kafka_sasl import jwt, oauthbearer_token

SASL_AUTHENTICATION_FAILED = 58


def exchange(auth: Authentication, mechanism: str, *rounds: tuple[bytes, int, bytes]) -> list[int]:
    """A handshake answered 0, then each (client token, error code, server bytes) in order, every
    round read before any is answered (pipelined, as the proxy may see them)."""
    ex = auth.handshake(mechanism)
    auth.handshake_answered(ex, 0)
    read = [auth.round(token) for token, _, _ in rounds]
    return [auth.answered(r, code, answer) for r, (_, code, answer) in zip(read, rounds)]


def test_plain_is_its_one_round_answered_zero():
    auth = Authentication(sasl_listener=True)
    assert auth.principal == ANONYMOUS and not auth.authenticated
    assert exchange(auth, "PLAIN", (b"\x00alice\x00pw", 0, b"")) == [AUTHENTICATED]
    assert (auth.principal, auth.authenticated) == ("alice", True)


def test_plain_failure_and_a_second_token_change_nothing():
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "PLAIN", (b"\x00admin\x00guess", SASL_AUTHENTICATION_FAILED, b"")) == [NOTHING]
    assert auth.principal == ANONYMOUS
    # A broker that says yes to every round: the second token of one PLAIN exchange is no round.
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "PLAIN", (b"\x00alice\x00pw", 0, b""), (b"\x00admin\x00x", 0, b"")) == [AUTHENTICATED,
                                                                                                 NOTHING]
    assert auth.principal == "alice"
    # Answered in the other order (they never are): the admin token is still round 1.
    auth = Authentication(sasl_listener=True)
    ex = auth.handshake("PLAIN")
    alice, admin = auth.round(b"\x00alice\x00pw"), auth.round(b"\x00admin\x00x")
    assert auth.answered(admin, 0, b"") == NOTHING
    assert auth.answered(alice, 0, b"") == NOTHING  # the exchange failed closed
    assert auth.principal == ANONYMOUS and ex.over


def test_scram_only_the_final_round_with_v_completes():
    first = b"n,,n=admin,r=x"
    server_first = b"r=xyz,s=c2FsdA==,i=4096"
    final = b"c=biws,r=xyz,p=cHJvb2Y="
    for rounds in [
        [(first, 0, server_first)],  # the client-first message alone
        [(first, 0, server_first), (final, SASL_AUTHENTICATION_FAILED, b"")],  # Kafka: bad proof
        [(first, 0, server_first), (final, 0, b"e=invalid-proof")],  # RFC 5802 server-final error
        [(first, 0, server_first), (b"c=biws,r=xyz", 0, b"v=c2ln")],  # no proof sent
        [(first, 0, b"v=c2ln")],  # a "server-final" to the first message
        [(first, SASL_AUTHENTICATION_FAILED, b""), (final, 0, b"v=c2ln")],  # unknown user, then yes
        [(first, 0, server_first), (final, 0, b"v=c2ln")][::-1],  # final read first: out of order
    ]:
        auth = Authentication(sasl_listener=True)
        assert AUTHENTICATED not in exchange(auth, "SCRAM-SHA-512", *rounds), rounds
        assert auth.principal == ANONYMOUS and not auth.authenticated
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "SCRAM-SHA-256", (first, 0, server_first), (final, 0, b"v=c2ln")) == [NOTHING,
                                                                                              AUTHENTICATED]
    assert auth.principal == "admin" and not auth.token_authenticated


def test_scram_delegation_token_is_its_token_id_marked():
    auth = Authentication(sasl_listener=True)
    exchange(auth, "SCRAM-SHA-256", (b"n,,n=tok-1,r=x,tokenauth=true", 0, b"r=xy,s=cw==,i=4096"),
             (b"c=biws,r=xy,p=cA==", 0, b"v=cw=="))
    assert (auth.principal, auth.token_authenticated) == ("tok-1", True)


@pytest.mark.parametrize("key", [None, b"some-key"])
def test_oauthbearer_error_challenge_is_not_success(key):
    token = oauthbearer_token(jwt({"sub": "admin"}, key))
    auth = Authentication(sasl_listener=True)
    # Kafka: an invalid token is answered ErrorCode 0 with the error JSON, then the client's
    # \x01 is answered with the failure (a broker saying 0 to it changes nothing either).
    assert exchange(auth, "OAUTHBEARER", (token, 0, b'{"status":"invalid_token"}'), (b"\x01", 0, b"")) == [
        NOTHING, NOTHING]
    assert auth.principal == ANONYMOUS
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "OAUTHBEARER", (token, 0, b"")) == [AUTHENTICATED]
    assert auth.principal == "admin"


def test_reauthentication_may_only_confirm_the_principal():
    auth = Authentication(sasl_listener=True)
    exchange(auth, "PLAIN", (b"\x00alice\x00pw", 0, b""))
    assert exchange(auth, "PLAIN", (b"\x00alice\x00pw", 0, b"")) == [AUTHENTICATED]
    assert exchange(auth, "PLAIN", (b"\x00bob\x00pw", 0, b"")) == [REFUSED]
    assert auth.principal == "alice"
    # A SaslAuthenticate after authentication, outside any new exchange: nothing.
    assert auth.answered(auth.round(b"\x00admin\x00x"), 0, b"") == NOTHING
    assert auth.principal == "alice"


def test_no_exchange_without_a_handshake_or_after_a_refused_one():
    auth = Authentication(sasl_listener=True)
    assert auth.round(b"\x00admin\x00x") is None
    assert auth.answered(None, 0, b"") == NOTHING
    ex = auth.handshake("PLAIN")
    auth.handshake_answered(ex, 33)  # UNSUPPORTED_SASL_MECHANISM
    assert auth.answered(auth.round(b"\x00admin\x00x"), 0, b"") == NOTHING
    assert auth.principal == ANONYMOUS


def test_gssapi_is_never_read():
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "GSSAPI", (b"\x60\x82", 0, b"")) == [NOTHING]
    assert auth.principal == ANONYMOUS


def test_gssapi_completes_as_anonymous_only_on_an_empty_answer_after_the_security_layer():
    """The Kerberos ticket is never read: a completed GSSAPI exchange (RFC 4752: the context,
    the server's security-layer offer, the client's choice answered with empty bytes) lifts the
    pre-authentication bounds with the principal ANONYMOUS; an empty answer earlier, or any
    error, completes nothing."""
    auth = Authentication(sasl_listener=True)
    assert exchange(auth, "GSSAPI", (b"\x60\x82", 0, b""), (b"", 0, b"")) == [NOTHING, NOTHING]
    assert not auth.authenticated
    auth = Authentication(sasl_listener=True)
    rounds = ((b"\x60\x82", 0, b"\x6f\x81"), (b"", 0, b"\x05\x04"), (b"\x05\x04layer", 58, b""))
    assert exchange(auth, "GSSAPI", *rounds) == [NOTHING, NOTHING, NOTHING]
    assert not auth.authenticated
    auth = Authentication(sasl_listener=True)
    rounds = ((b"\x60\x82", 0, b"\x6f\x81"), (b"", 0, b"\x05\x04"), (b"\x05\x04layer", 0, b""))
    assert exchange(auth, "GSSAPI", *rounds) == [NOTHING, NOTHING, AUTHENTICATED]
    assert auth.authenticated and auth.principal == ANONYMOUS


def test_without_a_sasl_listener_the_principal_is_fixed_from_the_start():
    auth = Authentication(sasl_listener=False, principal="CN=alice")
    assert auth.authenticated and auth.principal == "CN=alice"
    assert exchange(auth, "PLAIN", (b"\x00admin\x00pw", 0, b"")) == [NOTHING]
    assert auth.principal == "CN=alice"
