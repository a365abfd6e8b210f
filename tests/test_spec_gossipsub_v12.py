"""gossipsub v1.2, rule by rule (libp2p/specs pubsub/gossipsub/gossipsub-v1.2.md):
IDONTWANT. docs/gossipsub-v1.1.md maps each rule to its test and to the
method of node/engine/gossipsub_v12.py."""

from __future__ import annotations

from engine_harness import (
    S,
    add_peers,
    control_rpc,
    forwarded,
    lone,
    msg,
    peer_names,
    publish_rpc,
)
from node.engine.api import MESHSUB_ID, MESHSUB_V11_ID, MESHSUB_V12_ID
from node.wire.rpc import IDontWant, IWant

T = "t"
V12 = "gossipsub-v1.2"
SMALL = {"D": 4, "D_low": 3, "D_high": 6, "D_out": 1, "IDontWantMessageThreshold": 100}
BIG = bytes(100)
SMALL_DATA = bytes(99)


def joined(params=None, peers=6):
    r = lone(V12, {**SMALL, **(params or {})})
    add_peers(r, peer_names("p", peers), [T])
    r.join(0, T)
    return r


def idontwant_rpcs(out):
    return {p: rpc for p, rpc in out.sends if rpc.control and rpc.control.idontwant}


def test_idontwant_goes_at_once_to_mesh_peers_except_the_sender():
    r = joined()
    sender = sorted(r.mesh[T])[0]
    m = msg(b"o", 1, data=BIG)
    out = r.handle_rpc(0, sender, publish_rpc(m))
    sent = idontwant_rpcs(out)
    assert set(sent) == r.mesh[T] - {sender}
    for rpc in sent.values():
        assert rpc.control.idontwant == (IDontWant((m.id,)),) and rpc.publish == ()
    first = [p for p, _ in out.sends][: len(sent)]
    assert set(first) == set(sent)  # its own RPCs, ahead of the forwarded message


def test_idontwant_only_for_messages_of_IDontWantMessageThreshold_bytes_or_more():
    r = joined()
    assert idontwant_rpcs(r.handle_rpc(0, b"p00", publish_rpc(msg(b"o", 1, data=SMALL_DATA)))) == {}


def test_idontwant_only_to_peers_that_speak_v12():
    r = lone(V12, SMALL)
    add_peers(r, [b"a"], [T], protocol=MESHSUB_V12_ID)
    add_peers(r, [b"b"], [T], protocol=MESHSUB_V11_ID)
    add_peers(r, [b"c"], [T], protocol=MESHSUB_ID)
    add_peers(r, [b"s"], [T])
    r.join(0, T)
    out = r.handle_rpc(0, b"s", publish_rpc(msg(b"o", 1, data=BIG)))
    assert set(idontwant_rpcs(out)) == {b"a"}


def test_no_idontwant_for_duplicates():
    r = joined()
    m = msg(b"o", 1, data=BIG)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    assert idontwant_rpcs(r.handle_rpc(0, b"p01", publish_rpc(m))) == {}


def test_no_idontwant_on_publish():
    r = joined()
    assert idontwant_rpcs(r.publish(0, T, BIG)) == {}


def test_messages_are_not_relayed_to_peers_that_sent_idontwant():
    r = joined()
    mesh = sorted(r.mesh[T])
    m = msg(b"o", 1, data=BIG)
    r.handle_rpc(0, mesh[1], control_rpc(idontwant=(IDontWant((m.id,)),)))
    out = r.handle_rpc(0, mesh[0], publish_rpc(m))
    assert set(forwarded(out)) == set(mesh[2:])


def test_iwant_is_not_answered_after_idontwant():
    r = joined()
    m = msg(b"o", 1, data=BIG)
    r.handle_rpc(0, b"p00", publish_rpc(m))
    r.handle_rpc(0, b"p05", control_rpc(idontwant=(IDontWant((m.id,)),)))
    assert forwarded(r.handle_rpc(0, b"p05", control_rpc(iwant=(IWant((m.id,)),)))) == {}


def test_at_most_max_idontwant_messages_per_heartbeat_per_peer():
    r = joined({"max_idontwant_messages": 2})
    for i in range(3):
        r.handle_rpc(0, b"p00", control_rpc(idontwant=(IDontWant((bytes([i]),)),)))
    assert set(r.dont_send[b"p00"]) == {b"\x00", b"\x01"}
    r.heartbeat(1 * S)
    r.handle_rpc(1 * S, b"p00", control_rpc(idontwant=(IDontWant((b"\x02",)),)))
    assert b"\x02" in r.dont_send[b"p00"]


def test_at_most_MaxIDontWantLength_ids_per_idontwant():
    r = joined({"MaxIDontWantLength": 3})
    r.handle_rpc(0, b"p00", control_rpc(idontwant=(IDontWant(tuple(bytes([i]) for i in range(5))),)))
    assert len(r.dont_send[b"p00"]) == 3


def test_idontwant_entries_are_pruned_after_IDontWantMessageTTL_heartbeats():
    r = joined({"IDontWantMessageTTL": 2})
    r.handle_rpc(0, b"p00", control_rpc(idontwant=(IDontWant((b"m",)),)))
    r.heartbeat(1 * S)
    assert b"m" in r.dont_send[b"p00"]
    r.heartbeat(2 * S)
    assert b"p00" not in r.dont_send
