"""Attacks on a fleet's usage records (``kquota.proxy.fleet_usage``,
``kquota.proxy.fleet_members``, ``kquota.proxy.fleet``): forged, tampered, replayed and
future-dated records, a flood of members, more sensors than a u16 counts, chosen entity-key
collisions, and a fleet started without its key."""

from __future__ import annotations

import struct
import subprocess
import time
import sys
import zlib

import pytest

from kquota.proxy.fleet import SILENT_INTERVALS
from kquota.proxy.fleet_members import MAX_MEMBERS, PRUNE_INTERVALS, REASONS, FleetMembers
from kquota.proxy.fleet_usage import (
    KEY_MIN_BYTES, MAX_ENTRIES, CorruptUsage, Usage, UsageKey, decode, encode, read_key_file,
)
from waiting import step_until

pytestmark = pytest.mark.process

SECRET = b"the-fleet-secret-" + b"0123456789abcdef" * 2
KEY = UsageKey(SECRET)
WRONG = UsageKey(b"not-the-fleet-secret-" + b"0123456789abcdef" * 2)
NOW = 1_800_000_000.0  # the reader's clock in these tests (s)
INTERVAL = 1.0


def record(member: bytes, rates: dict, at: float = NOW, key: UsageKey = KEY, full: bool = True, seq: int = 0) -> bytes:
    [value] = encode(Usage(full, 1000, int(at * 1000), seq, rates), member, key)
    return value


def v1_record(rates: dict) -> bytes:
    """A record in the format before signing (version 1: CRC-32 keys, no signature)."""
    out = struct.pack("<BBHIH", 1, 1, 1000, 0, len(rates))
    for h, packed in rates.items():
        out += struct.pack("<IH", h, packed)
    return out


def test_entity_keys_are_derived_with_the_key_so_no_collision_can_be_chosen():
    # Under CRC-32 two client ids that collide are found offline (CRC is linear): these two do,
    # whatever prefix the entity's name has, so one tenant's client id could take another's share.
    a, b = ("Produce", "", "plumless"), ("Produce", "", "buckeroo")
    assert zlib.crc32("\0".join(a).encode()) == zlib.crc32("\0".join(b).encode())
    assert KEY.entity(*a) != KEY.entity(*b)
    # 64 bits, not CRC-32, and another key gives other keys: without the secret none is predictable.
    assert KEY.entity(*a) != WRONG.entity(*a)
    keys = {KEY.entity("Produce", "", f"client-{i}") for i in range(100_000)}
    assert len(keys) == 100_000
    assert max(keys) >= 2**60  # the whole 64-bit range is used


def test_a_key_shorter_than_32_bytes_is_refused(tmp_path):
    with pytest.raises(ValueError, match="at least 32"):
        UsageKey(b"x" * (KEY_MIN_BYTES - 1))
    short = tmp_path / "short.key"
    short.write_text("x" * (KEY_MIN_BYTES - 1) + "\n")
    with pytest.raises(ValueError, match=f"{short} holds a key of 31 bytes"):
        read_key_file(str(short))
    with pytest.raises(ValueError, match="cannot read"):
        read_key_file(str(tmp_path / "missing.key"))
    ok = tmp_path / "ok.key"
    ok.write_text(SECRET.decode() + "\n")  # a trailing newline is not part of the key
    assert read_key_file(str(ok)).entity("Produce", "", "c") == KEY.entity("Produce", "", "c")


def test_forged_tampered_and_misattributed_records_are_refused_and_counted():
    fleet = FleetMembers(KEY, INTERVAL)
    victim = KEY.entity("Produce", "", "victim")
    assert fleet.receive(b"real", record(b"real", {victim: 100.0}), NOW) is None
    before = dict(fleet.members)
    forged = {
        "unsigned": v1_record({zlib.crc32(b"Produce\0\0victim"): 0x8000 | 10_000}),
        "signature": record(b"forger", {victim: -1e6}, key=WRONG),
        "malformed": b"\x02\x01",
    }
    for reason, value in forged.items():
        assert fleet.receive(b"forger", value, NOW) == reason
    # A real member's signed record, tampered (its rate made saturated) or claimed by another id.
    good = record(b"real", {victim: 100.0}, at=NOW + 0.1)
    tampered = bytearray(good)
    tampered[22 + 9] |= 0x80  # the first entry's saturated bit
    assert fleet.receive(b"real", bytes(tampered), NOW) == "signature"
    assert fleet.receive(b"other", good, NOW) == "signature"
    assert fleet.receive(b"bad id", good, NOW) == "malformed"
    assert fleet.receive(None, good, NOW) == "malformed"
    assert fleet.members == before
    assert fleet.rejected == {**dict.fromkeys(REASONS, 0), "unsigned": 1, "signature": 3, "malformed": 3}
    with pytest.raises(CorruptUsage) as e:
        decode(b"\x07" + good[1:], b"real", KEY)
    assert e.value.reason == "version"


def test_a_record_from_the_future_evicts_no_member():
    fleet = FleetMembers(KEY, INTERVAL)
    for m in (b"a", b"b", b"c"):
        assert fleet.receive(m, record(m, {1: 10.0}), NOW) is None
    # Signed (a member whose clock is an hour ahead, or a replay of one): refused, counted.
    assert fleet.receive(b"d", record(b"d", {1: 10.0}, at=NOW + 3600), NOW) == "future"
    assert fleet.receive(b"a", record(b"a", {1: 10.0}, at=NOW + 3600), NOW) == "future"
    assert set(fleet.live(3 * INTERVAL)) == {"a", "b", "c"}
    # Within the skew: accepted, timed no later than the reader's clock.
    assert fleet.receive(b"d", record(b"d", {1: 10.0}, at=NOW + 0.9 * INTERVAL), NOW) is None
    assert fleet.members["d"][0] == NOW
    assert set(fleet.live(3 * INTERVAL)) == {"a", "b", "c", "d"}
    assert fleet.rejected["future"] == 2


def test_a_replayed_record_is_refused():
    fleet = FleetMembers(KEY, INTERVAL)
    old = record(b"a", {1: -50.0}, at=NOW - 5)
    assert fleet.receive(b"a", old, NOW - 5) is None
    assert fleet.receive(b"a", record(b"a", {1: 10.0}, at=NOW, seq=1), NOW) is None
    assert fleet.receive(b"a", old, NOW) == "replayed"
    assert fleet.members["a"] == (NOW, {1: pytest.approx(10.0, rel=0.001)})


def test_a_silent_member_is_left_out_then_pruned():
    fleet = FleetMembers(KEY, INTERVAL)
    fleet.receive(b"gone", record(b"gone", {1: 10.0}), NOW)
    for i in range(PRUNE_INTERVALS + 2):
        at = NOW + i * INTERVAL
        assert fleet.receive(b"stays", record(b"stays", {1: 10.0}, at=at, seq=i), at) is None
        fleet.prune()
        if i > SILENT_INTERVALS:
            assert "gone" not in fleet.live(SILENT_INTERVALS * INTERVAL)
    assert set(fleet.members) == {"stays"} and fleet.pruned == 1


def test_the_member_bound_holds_and_evicts_no_live_member():
    fleet = FleetMembers(KEY, INTERVAL)
    for i in range(MAX_MEMBERS):
        m = f"m{i}".encode()
        assert fleet.receive(m, record(m, {1: 10.0}), NOW) is None
    for i in range(50):  # a flood of new (signed) members
        m = f"new{i}".encode()
        assert fleet.receive(m, record(m, {1: -1e9}), NOW) == "members-over-limit"
    assert len(fleet.members) == MAX_MEMBERS and all(m.startswith("m") for m in fleet.members)
    assert fleet.rejected["members-over-limit"] == 50
    # Once members fall silent long enough, they are forgotten and a newcomer gets their place.
    later = NOW + (PRUNE_INTERVALS + 1) * INTERVAL
    assert fleet.receive(b"m0", record(b"m0", {1: 10.0}, at=later, seq=1), later) is None
    assert fleet.receive(b"late", record(b"late", {1: 10.0}, at=later), later) is None
    assert set(fleet.members) == {"m0", "late"}


def test_seventy_thousand_sensors_round_trip_in_parts():
    rates = {KEY.entity("Produce", "", f"client-{i}"): float(100 + i % 1000) * (-1 if i % 3 == 0 else 1)
             for i in range(70_000)}
    values = encode(Usage(True, 1000, int(NOW * 1000), 30, rates), b"big", KEY)
    assert len(values) == -(-70_000 // MAX_ENTRIES) == 9
    assert all(len(v) <= 22 + MAX_ENTRIES * 10 + 32 for v in values)
    fleet = FleetMembers(KEY, INTERVAL)
    fleet.receive(b"big", record(b"big", {1: 5.0}), NOW)
    for v in values[:-1]:  # a full snapshot applies once whole: the old view stays until then
        assert fleet.receive(b"big", v, NOW) is None
        assert fleet.members["big"][1] == {1: pytest.approx(5.0, rel=0.001)}
    assert fleet.receive(b"big", values[-1], NOW) is None
    got = fleet.members["big"][1]
    assert got.keys() == rates.keys()
    assert all(got[h] == pytest.approx(r, rel=0.001) for h, r in rates.items())
    # A change report of as many entities splits too; each part merges on arrival.
    delta = encode(Usage(False, 1000, int(NOW * 1000), 31, {h: 7.0 for h in rates}), b"big", KEY)
    for v in delta:
        assert fleet.receive(b"big", v, NOW) is None
    assert len(fleet.members["big"][1]) == 70_000
    assert all(r == pytest.approx(7.0, rel=0.001) for r in fleet.members["big"][1].values())


def _fleet_cli(tmp_path, config_text):
    args = [sys.executable, "-m", "kquota", "proxy", "--bootstrap-server", "127.0.0.1:9", "--listen", "127.0.0.1:0",
            "--store", "kafka://127.0.0.1:9/quotas", "--quota-scope", "fleet"]
    if config_text is not None:
        config = tmp_path / "proxy.properties"
        config.write_text(config_text)
        args += ["--config", str(config)]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("config_text,needle", [
    (None, "--quota-scope fleet needs kquota.fleet.usage.key.file in --config"),
    ("quota.window.num=2\n", "--quota-scope fleet needs kquota.fleet.usage.key.file in --config"),
    ("kquota.fleet.usage.key.file={missing}\n", "kquota.fleet.usage.key.file: cannot read"),
    ("kquota.fleet.usage.key.file={short}\n", "holds a key of 12 bytes; it must hold at least 32"),
])
def test_fleet_scope_refuses_to_start_without_a_good_key_file(tmp_path, config_text, needle):
    short = tmp_path / "short.key"
    short.write_text("twelve-bytes\n")
    text = None if config_text is None else config_text.format(missing=tmp_path / "nope.key", short=short)
    r = _fleet_cli(tmp_path, text)
    assert r.returncode != 0
    assert needle in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_an_old_unsigned_record_is_refused_not_a_crash():
    fleet = FleetMembers(KEY, INTERVAL)
    for value in (v1_record({1: 5}), v1_record({}), b"\x01", b""):
        assert fleet.receive(b"old", value, NOW) in ("unsigned", "malformed")
    assert fleet.members == {} and fleet.rejected["unsigned"] == 3 and fleet.rejected["malformed"] == 1


def _coordinators(broker, n=2, interval=0.3, window_num=2):
    import uuid

    import kquota
    from kquota.proxy.fleet import FleetCoordinator

    topic = f"quotas-{uuid.uuid4().hex[:8]}"
    qms = [kquota.QuotaManager(window_num=window_num) for _ in range(n)]
    coords = [FleetCoordinator(qm, broker.address, topic, interval_s=interval, key=SECRET) for qm in qms]
    return topic, qms, coords


def test_forged_usage_records_change_no_share_and_are_counted(broker):
    """Two real members over a usage topic on Kafka's broker; a forger whom Kafka's ACLs let write
    to the topic (bob, over SASL) but who holds no key floods it with members that claim to be
    saturated on the victim's quota (unsigned, in the old format with CRC-32 keys, and signed with a
    wrong key), and with a real member's id. Unchecked, each fake member would take an equal share
    and the real ones would collapse."""
    from confluent_kafka import Producer
    from prometheus_client.parser import text_string_to_metric_families

    from kquota.prometheus import exposition

    pytest.importorskip("confluent_kafka")
    topic, qms, coords = _coordinators(broker)
    try:
        for qm in qms:
            qm.alter_client_quotas([({"client-id": "victim"}, {"producer_byte_rate": 1000.0})])
        qms[0].record_no_throttle("PRODUCE", "", "victim", 10.0)
        assert step_until(coords, lambda: all(c.fleet_size == 2 for c in coords), 20, 0.3)
        coords[0].step()
        before = qms[0]._shares("PRODUCE")[1][("", "victim")]
        assert before == pytest.approx(0.5)  # both light: halves

        broker.kafka.allow("User:bob", topic + ".usage", ("DESCRIBE", "WRITE"))
        forger = Producer({**broker.kafka.client_config("SASL_PLAINTEXT", "bob"), "linger.ms": 0})
        victim = KEY.entity("Produce", "", "victim")
        wrong_victim = WRONG.entity("Produce", "", "victim")
        for i in range(5):
            at = time.time()
            forger.produce(topic + ".usage", v1_record({zlib.crc32(b"Produce\0\0victim"): 0x8000 | 10_000}),
                           key=f"fake{i}".encode())
            forger.produce(topic + ".usage", record(f"forged{i}".encode(), {victim: -1e6, wrong_victim: -1e6},
                                                     at=at, key=WRONG), key=f"forged{i}".encode())
        forger.produce(topic + ".usage", record(coords[1].member.encode(), {victim: -1e6}, at=time.time(), key=WRONG),
                       key=coords[1].member.encode())
        # Signed with the fleet's key but an hour ahead (a member with a wrong clock): no eviction.
        skewed = record(b"skewed", {victim: -1e6}, at=time.time() + 3600)
        forger.produce(topic + ".usage", skewed, key=b"skewed")
        assert forger.flush(10) == 0

        assert step_until(coords, lambda: all(c.members.rejected["future"] == 1 for c in coords), 20, 0.3)
        # A window, not a wait: past SILENT_INTERVALS steps a real member whose records a forged one
        # had displaced would have left, and a forged member let in would be counted.
        for _ in range(SILENT_INTERVALS + 1):
            for c in coords:
                c.step()
            time.sleep(0.3)
        assert [c.fleet_size for c in coords] == [2, 2]
        assert qms[0]._shares("PRODUCE")[1][("", "victim")] == pytest.approx(before)
        assert {m for c in coords for m in c.members.members} == {c.member for c in coords}
        for c in coords:
            assert (c.members.rejected["unsigned"], c.members.rejected["signature"]) == (5, 6)
        qms[0].add_metrics_source(coords[0].metrics)  # as start() does; steps driven here
        fams = {f.name: f for f in text_string_to_metric_families(exposition(qms[0]).decode())}
        rejected = {s.labels["reason"]: s.value for s in fams["kafka_server_fleet_fleet_usage_records_rejected"].samples
                    if s.name.endswith("_total")}
        assert rejected == {**dict.fromkeys(REASONS, 0.0), "unsigned": 5.0, "signature": 6.0, "future": 1.0}
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()


def test_seventy_thousand_limited_sensors_reach_the_other_members(broker):
    """More limited sensors than a u16 counts: the coordinator splits its report into parts and
    keeps stepping; the other member reads every entity. (A step over 70,000 sensors takes
    seconds on a loaded machine: a long interval keeps the members live between them, and 61 s of
    quota windows keep every rate above zero while they are recorded.)"""
    pytest.importorskip("confluent_kafka")
    _, qms, coords = _coordinators(broker, interval=10.0, window_num=61)
    try:
        qms[0].alter_client_quotas([({"client-id": None}, {"producer_byte_rate": 1e6})])
        for i in range(70_000):
            qms[0].record_no_throttle("PRODUCE", "", f"client-{i}", 100.0)
        expected = {KEY.entity("Produce", "", f"client-{i}") for i in range(70_000)}

        def whole():
            seen = coords[1].members.members.get(coords[0].member)
            return seen is not None and seen[1].keys() == expected

        coords[0].step()
        assert step_until(coords[1:], whole, 60, 0.3)
        coords[0].step()
        assert [c.fleet_size for c in coords] == [2, 2]
        assert coords[0]._seq >= 1 and not coords[0].fallback
    finally:
        for c in coords:
            c.stop()
        for qm in qms:
            qm.close()


def test_an_absurd_rate_does_not_squeeze_the_other_members_to_nothing():
    from kquota.proxy.fleet_shares import FLOOR, split

    s = split(1000.0, {"liar": 3e9, "honest": 100.0})
    assert s["honest"] >= FLOOR / 2 and s["honest"] * 1000.0 >= 0.9 * 100.0  # most of its 100 B/s
    assert s == split(1000.0, {"liar": 1000.0, "honest": 100.0})  # read as the whole quota
    assert sum(s.values()) == pytest.approx(1.0)


def test_a_members_entities_are_bounded():
    fleet = FleetMembers(KEY, INTERVAL, max_entities=10)
    assert fleet.receive(b"a", record(b"a", {i: 5.0 for i in range(10)}), NOW) is None
    assert fleet.receive(b"a", record(b"a", {100: 5.0}, full=False, seq=1), NOW) == "entities-over-limit"
    assert fleet.receive(b"a", record(b"a", {i: 5.0 for i in range(11)}, seq=2), NOW) == "entities-over-limit"
    assert len(fleet.members["a"][1]) == 10 and fleet.rejected["entities-over-limit"] == 2


def test_any_bytes_are_refused_with_a_reason_never_an_exception():
    import random

    rng = random.Random(35)
    good = record(b"m", {KEY.entity("Produce", "", f"c{i}"): 100.0 * i for i in range(20)})
    fleet = FleetMembers(KEY, INTERVAL)
    for _ in range(3000):
        value = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            op, at = rng.randrange(3), rng.randrange(len(value) + 1)
            if op == 0 and at < len(value):
                value[at] = rng.randrange(256)
            elif op == 1:
                del value[at:at + rng.randint(1, 40)]
            else:
                value[at:at] = rng.randbytes(rng.randint(1, 40))
        member = rng.choice([b"m", b"", b"\xff\xfe", b"x" * 65, bytes(rng.randbytes(8))])
        reason = fleet.receive(member, bytes(value), NOW)
        assert reason in REASONS or (reason is None and bytes(value) == good and member == b"m")
    assert fleet.members.keys() <= {"m"}
