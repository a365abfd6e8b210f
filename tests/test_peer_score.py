"""gossipsub v1.1's score function (node/engine/peer_score.py) against values
we did not compute ourselves: each test replays the input sequence of a test
in go-libp2p-pubsub's score_test.go (commit 41b11d5c, named in each test)
and expects the value that test expects. Only the facts (parameters, inputs,
expected scores) carry over; go's fake clock becomes our `now`.
"""

from __future__ import annotations

import pytest

from node.engine.api import NS
from node.engine.authenticity import REJECT_INVALID_SIGNATURE, REJECT_VALIDATION_FAILED
from node.engine.peer_score import (
    DELIVERY_RECORD_TTL,
    REJECT_BLACKLISTED_PEER,
    REJECT_BLACKLISTED_SOURCE,
    REJECT_VALIDATION_IGNORED,
    REJECT_VALIDATION_QUEUE_FULL,
    REJECT_VALIDATION_THROTTLED,
    PeerScore,
)
from node.engine.score_params import PeerScoreParams, ScoreThresholds, TopicScoreParams

MS = NS // 1000
T = "mytopic"
A, B, C, D = b"A", b"B", b"C", b"D"


def scored(topic: TopicScoreParams | None = None, **params) -> PeerScore:
    return PeerScore(PeerScoreParams(Topics={T: topic} if topic else {}, **params))


def mid(i: int) -> bytes:
    return i.to_bytes(8, "big")


def deliver(ps: PeerScore, now: int, peer: bytes, i: int) -> None:
    ps.validate_message(now, mid(i))
    ps.deliver_message(now, peer, T, mid(i))


def test_p1_time_in_mesh():
    """go TestScoreTimeInMesh: 200 quanta of 1 ms at weight 1, topic 0.5."""
    tp = TopicScoreParams(TopicWeight=0.5, TimeInMeshWeight=1, TimeInMeshQuantum=0.001, TimeInMeshCap=3600)
    ps = scored(tp)
    ps.add_peer(A)
    assert ps.score(A) == 0
    ps.graft(0, A, T)
    ps.refresh(200 * MS)
    assert ps.score(A) == 0.5 * 1 * 200


def test_p1_time_in_mesh_cap():
    """go TestScoreTimeInMeshCap: 40 quanta capped at 10."""
    tp = TopicScoreParams(TopicWeight=0.5, TimeInMeshWeight=1, TimeInMeshQuantum=0.001, TimeInMeshCap=10)
    ps = scored(tp)
    ps.add_peer(A)
    ps.graft(0, A, T)
    ps.refresh(40 * MS)
    assert ps.score(A) == 0.5 * 1 * 10


P2 = dict(TopicWeight=1, FirstMessageDeliveriesWeight=1, FirstMessageDeliveriesDecay=1.0, TimeInMeshQuantum=1.0)


def test_p2_first_message_deliveries():
    """go TestScoreFirstMessageDeliveries: 100 first deliveries, cap 2000."""
    ps = scored(TopicScoreParams(**P2, FirstMessageDeliveriesCap=2000))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(100):
        deliver(ps, 0, A, i)
    ps.refresh(0)
    assert ps.score(A) == 100.0


def test_p2_first_message_deliveries_cap():
    """go TestScoreFirstMessageDeliveriesCap: 100 deliveries, cap 50."""
    ps = scored(TopicScoreParams(**P2, FirstMessageDeliveriesCap=50))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(100):
        deliver(ps, 0, A, i)
    ps.refresh(0)
    assert ps.score(A) == 50.0


def test_p2_first_message_deliveries_decay():
    """go TestScoreFirstMessageDeliveriesDecay: decay 0.9 per refresh."""
    ps = scored(TopicScoreParams(**{**P2, "FirstMessageDeliveriesDecay": 0.9}, FirstMessageDeliveriesCap=2000))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(100):
        deliver(ps, 0, A, i)
    ps.refresh(0)
    expected = 1 * 1 * 0.9 * 100.0
    assert ps.score(A) == expected
    for _ in range(10):
        ps.refresh(0)
        expected *= 0.9
    assert ps.score(A) == expected


P3 = dict(TopicWeight=1, MeshMessageDeliveriesWeight=-1, MeshMessageDeliveryWindow=0.010,
          MeshMessageDeliveriesThreshold=20, MeshMessageDeliveriesCap=100, TimeInMeshQuantum=1.0)


def test_p3_mesh_message_deliveries_counts_first_and_near_first_only():
    """go TestScoreMeshMessageDeliveries: A delivers first, B within the
    10 ms window, C 30 ms after; once active (1 s), only C is penalised,
    by the whole threshold squared."""
    ps = scored(TopicScoreParams(**P3, MeshMessageDeliveriesActivation=1.0, MeshMessageDeliveriesDecay=1.0))
    for p in (A, B, C):
        ps.add_peer(p)
        ps.graft(0, p, T)
    ps.refresh(0)
    assert all(ps.score(p) >= 0 for p in (A, B, C))
    now = 1 * NS
    for i in range(100):
        deliver(ps, now, A, i)
        ps.duplicate_message(now, B, T, mid(i))
    for i in range(100):
        ps.duplicate_message(now + 30 * MS, C, T, mid(i))
    ps.refresh(now + 30 * MS)
    assert ps.score(A) >= 0
    assert ps.score(B) >= 0
    assert ps.score(C) == 1 * -1 * (20 * 20)


def test_p3_mesh_message_deliveries_decay():
    """go TestScoreMeshMessageDeliveriesDecay: 40 deliveries decaying by 0.9
    for 21 refreshes fall below the threshold of 20."""
    ps = scored(TopicScoreParams(**P3, MeshMessageDeliveriesActivation=0, MeshMessageDeliveriesDecay=0.9))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(40):
        deliver(ps, 0, A, i)
    ps.refresh(1 * MS)
    assert ps.score(A) >= 0
    decayed = 40.0 * 0.9
    for _ in range(20):
        ps.refresh(1 * MS)
        decayed *= 0.9
    deficit = 20 - decayed
    assert ps.score(A) == 1 * -1 * (deficit * deficit)


def test_p3b_mesh_failure_penalty_taken_at_prune():
    """go TestScoreMeshFailurePenalty: B delivers nothing; pruned, it
    carries the deficit squared as P3b."""
    tp = TopicScoreParams(TopicWeight=1, MeshFailurePenaltyWeight=-1, MeshFailurePenaltyDecay=1.0,
                          MeshMessageDeliveriesActivation=0, MeshMessageDeliveryWindow=0.010,
                          MeshMessageDeliveriesThreshold=20, MeshMessageDeliveriesCap=100,
                          MeshMessageDeliveriesDecay=1.0, TimeInMeshQuantum=1.0)
    ps = scored(tp)
    for p in (A, B):
        ps.add_peer(p)
        ps.graft(0, p, T)
    for i in range(100):
        deliver(ps, 0, A, i)
    ps.refresh(1 * MS)
    assert (ps.score(A), ps.score(B)) == (0, 0)
    ps.prune(B, T)
    ps.refresh(1 * MS)
    assert ps.score(A) == 0
    assert ps.score(B) == 1 * -1 * (20 * 20)


P4 = dict(TopicWeight=1, TimeInMeshQuantum=1.0, InvalidMessageDeliveriesWeight=-1)


def test_p4_invalid_message_deliveries():
    """go TestScoreInvalidMessageDeliveries: 100 invalid signatures."""
    ps = scored(TopicScoreParams(**P4, InvalidMessageDeliveriesDecay=1.0))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(100):
        ps.reject_message(0, A, T, mid(i), REJECT_INVALID_SIGNATURE)
    ps.refresh(0)
    assert ps.score(A) == 1 * -1 * float(100 * 100)


def test_p4_invalid_message_deliveries_decay():
    """go TestScoreInvalidMessageDeliveriesDecay: decay 0.9, the penalty is
    squared so it falls by 0.81 per refresh."""
    ps = scored(TopicScoreParams(**P4, InvalidMessageDeliveriesDecay=0.9))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(100):
        ps.reject_message(0, A, T, mid(i), REJECT_INVALID_SIGNATURE)
    ps.refresh(0)
    expected = 1 * -1 * (0.9 * 100) ** 2
    assert ps.score(A) == expected
    for _ in range(10):
        ps.refresh(0)
        expected *= 0.9 ** 2
    assert ps.score(A) == expected


def test_p4_rejections_by_reason_and_forwarders_of_invalid_messages():
    """go TestScoreRejectMessageDeliveries: blacklist, queue-full, throttled
    and ignored rejections cost nothing; a failed validation costs the sender
    and every peer that forwarded the message, before or after the verdict."""
    ps = scored(TopicScoreParams(**P4, InvalidMessageDeliveriesDecay=1.0))
    ps.add_peer(A)
    ps.add_peer(B)
    m = mid(0)
    for reason in (REJECT_BLACKLISTED_PEER, REJECT_BLACKLISTED_SOURCE, REJECT_VALIDATION_QUEUE_FULL):
        ps.reject_message(0, A, T, m, reason)
    assert ps.score(A) == 0.0
    now = 0
    for reason in (REJECT_VALIDATION_THROTTLED, REJECT_VALIDATION_IGNORED):
        ps.validate_message(now, m)
        ps.reject_message(now, A, T, m, reason)
        ps.duplicate_message(now, B, T, m)
        assert (ps.score(A), ps.score(B)) == (0.0, 0.0)
        now += DELIVERY_RECORD_TTL + MS  # the record expires
    ps.validate_message(now, m)
    ps.reject_message(now, A, T, m, REJECT_VALIDATION_FAILED)
    ps.duplicate_message(now, B, T, m)
    assert (ps.score(A), ps.score(B)) == (-1.0, -1.0)
    now += DELIVERY_RECORD_TTL + MS
    ps.validate_message(now, m)
    ps.duplicate_message(now, B, T, m)
    ps.reject_message(now, A, T, m, REJECT_VALIDATION_FAILED)
    assert (ps.score(A), ps.score(B)) == (-4.0, -4.0)


def test_p5_application_specific_score():
    """go TestScoreApplicationScore: P5 from -100 to 99 at weight 0.5."""
    ps = PeerScore(PeerScoreParams(AppSpecificWeight=0.5))
    ps.add_peer(A)
    ps.graft(0, A, T)
    for i in range(-100, 100):
        ps.set_app_specific_score(A, float(i))
        ps.refresh(0)
        assert ps.score(A) == i * 0.5


def test_p5_from_parameters():
    ps = PeerScore(PeerScoreParams(AppSpecificWeight=2.0, AppSpecificScore={A: -3.0}))
    ps.add_peer(A)
    ps.add_peer(B)
    assert (ps.score(A), ps.score(B)) == (-6.0, 0.0)


def ip_peers(**params) -> PeerScore:
    ps = PeerScore(PeerScoreParams(IPColocationFactorThreshold=1, IPColocationFactorWeight=-1, **params))
    for p in (A, B, C, D):
        ps.add_peer(p)
        ps.graft(0, p, T)
    ps.set_ips(A, ("1.2.3.4",))
    ps.set_ips(B, ("2.3.4.5",))
    ps.set_ips(C, ("2.3.4.5", "3.4.5.6"))
    ps.set_ips(D, ("2.3.4.5",))
    ps.refresh(0)
    return ps


def test_p6_ip_colocation():
    """go TestScoreIPColocation: three peers share 2.3.4.5, threshold 1."""
    ps = ip_peers()
    assert ps.score(A) == 0
    assert [ps.score(p) for p in (B, C, D)] == [-1 * float((3 - 1) ** 2)] * 3


def test_p6_ip_colocation_whitelist():
    """go TestScoreIPColocationWhitelist: 2.3.0.0/16 is exempt."""
    ps = ip_peers(IPColocationFactorWhitelist=("2.3.0.0/16",))
    assert [ps.score(p) for p in (A, B, C, D)] == [0, 0, 0, 0]


def test_p7_behaviour_penalty():
    """go TestScoreBehaviourPenalty: penalties on unknown peers do nothing;
    1 then 2 give -1 and -4; one decay of 0.99 gives -3.9204."""
    ps = PeerScore(PeerScoreParams(BehaviourPenaltyWeight=-1, BehaviourPenaltyDecay=0.99))
    ps.add_penalty(A, 1)
    assert ps.score(A) == 0
    ps.add_peer(A)
    assert ps.score(A) == 0
    ps.add_penalty(A, 1)
    assert ps.score(A) == -1
    ps.add_penalty(A, 1)
    assert ps.score(A) == -4
    ps.refresh(0)
    assert ps.score(A) == -3.9204


def test_retention_after_disconnect():
    """go TestScoreRetention: a score of -1000 survives a disconnect for
    RetainScore (1 s), then is forgotten."""
    ps = PeerScore(PeerScoreParams(AppSpecificScore={A: -1000}, AppSpecificWeight=1.0, RetainScore=1.0))
    ps.add_peer(A)
    ps.graft(0, A, T)
    ps.refresh(0)
    assert ps.score(A) == -1000
    ps.remove_peer(0, A)
    ps.refresh(NS // 2)
    assert ps.score(A) == -1000
    ps.refresh(NS + 50 * MS)
    assert ps.score(A) == 0


def test_positive_score_is_not_retained():
    ps = PeerScore(PeerScoreParams(AppSpecificScore={A: 5}, AppSpecificWeight=1.0, RetainScore=10.0))
    ps.add_peer(A)
    ps.remove_peer(0, A)
    assert A not in ps.peer_stats


def test_decay_to_zero_floor():
    """DecayToZero: a counter that decays below it is 0, not a tiny value."""
    ps = PeerScore(PeerScoreParams(BehaviourPenaltyWeight=-1, BehaviourPenaltyDecay=0.5, DecayToZero=0.3))
    ps.add_peer(A)
    ps.add_penalty(A, 1)
    ps.refresh(0)
    assert ps.score(A) == -0.25
    ps.refresh(0)
    assert ps.score(A) == 0


def test_topic_weights_and_topic_cap():
    """Topic scores mix by TopicWeight and TopicScoreCap caps their sum,
    not P5-P7."""
    tp = TopicScoreParams(TopicWeight=2, FirstMessageDeliveriesWeight=1, FirstMessageDeliveriesCap=100)
    ps = PeerScore(PeerScoreParams(Topics={T: tp}, TopicScoreCap=15, AppSpecificScore={A: -1}, AppSpecificWeight=1))
    ps.add_peer(A)
    for i in range(5):
        deliver(ps, 0, A, i)
    assert ps.score(A) == 2 * 5 - 1
    for i in range(5, 10):
        deliver(ps, 0, A, i)
    assert ps.score(A) == 15 - 1
    parts = ps.components(A)
    assert (parts.p2, parts.p5) == (20.0, -1.0)


def test_unscored_topic_counts_nothing():
    ps = scored(TopicScoreParams(**P2, FirstMessageDeliveriesCap=10))
    ps.add_peer(A)
    ps.validate_message(0, mid(1))
    ps.deliver_message(0, A, "other", mid(1))
    assert ps.score(A) == 0


@pytest.mark.parametrize("params, message", [
    (PeerScoreParams(BehaviourPenaltyWeight=1), "BehaviourPenaltyWeight"),
    (PeerScoreParams(IPColocationFactorThreshold=0), "IPColocationFactorThreshold"),
    (PeerScoreParams(IPColocationFactorWhitelist=("nonsense",)), "IPColocationFactorWhitelist"),
    (PeerScoreParams(DecayToZero=0), "DecayToZero"),
    (PeerScoreParams(Topics={T: TopicScoreParams(MeshMessageDeliveriesThreshold=5, MeshMessageDeliveriesCap=1)}),
     "MeshMessageDeliveriesCap"),
    (PeerScoreParams(Topics={T: TopicScoreParams(InvalidMessageDeliveriesWeight=1)}), "InvalidMessageDeliveriesWeight"),
    (PeerScoreParams(Topics={T: TopicScoreParams(FirstMessageDeliveriesDecay=0)}), "FirstMessageDeliveriesDecay"),
])
def test_score_parameters_are_checked_against_the_spec(params, message):
    with pytest.raises(ValueError, match=message):
        PeerScore(params)


@pytest.mark.parametrize("thresholds, message", [
    (ScoreThresholds(GossipThreshold=0), "GossipThreshold must be < 0"),
    (ScoreThresholds(PublishThreshold=-5), "PublishThreshold must be <= GossipThreshold"),
    (ScoreThresholds(GraylistThreshold=-50), "GraylistThreshold must be < PublishThreshold"),
    (ScoreThresholds(AcceptPXThreshold=-1), "AcceptPXThreshold"),
    (ScoreThresholds(OpportunisticGraftThreshold=-1), "OpportunisticGraftThreshold"),
])
def test_thresholds_are_checked_against_the_spec(thresholds, message):
    with pytest.raises(ValueError, match=message):
        thresholds.check()


def test_cached_scores_always_equal_a_fresh_computation():
    """The score is cached per peer; after any sequence of inputs the cached
    value is what computing it afresh gives."""
    import random

    rng = random.Random(5)
    tp = TopicScoreParams(TopicWeight=1, TimeInMeshWeight=0.1, TimeInMeshQuantum=0.001, TimeInMeshCap=50,
                          FirstMessageDeliveriesWeight=1, FirstMessageDeliveriesDecay=0.9, FirstMessageDeliveriesCap=9,
                          MeshMessageDeliveriesWeight=-1, MeshMessageDeliveriesDecay=0.8,
                          MeshMessageDeliveriesThreshold=3, MeshMessageDeliveriesCap=9,
                          MeshMessageDeliveryWindow=0.002, MeshFailurePenaltyWeight=-1, MeshFailurePenaltyDecay=0.9,
                          InvalidMessageDeliveriesWeight=-1, InvalidMessageDeliveriesDecay=0.9)
    ps = PeerScore(PeerScoreParams(Topics={T: tp}, AppSpecificWeight=1, IPColocationFactorWeight=-1,
                                   BehaviourPenaltyWeight=-1, BehaviourPenaltyDecay=0.9, RetainScore=0.05))
    peers = [A, B, C, D]
    now = 0
    for step in range(3000):
        now += rng.randrange(0, 3 * MS)
        p, m = rng.choice(peers), mid(rng.randrange(40))
        op = rng.randrange(11)
        if op == 0:
            ps.add_peer(p)
        elif op == 1:
            ps.remove_peer(now, p)
        elif op == 2:
            ps.graft(now, p, T)
        elif op == 3:
            ps.prune(p, T)
        elif op == 4:
            ps.validate_message(now, m)
            ps.deliver_message(now, p, T, m)
        elif op == 5:
            ps.duplicate_message(now, p, T, m)
        elif op == 6:
            ps.reject_message(now, p, T, m, rng.choice([REJECT_VALIDATION_FAILED, REJECT_INVALID_SIGNATURE]))
        elif op == 7:
            ps.add_penalty(p, 1)
        elif op == 8:
            ps.refresh(now)
        elif op == 9:
            ps.set_ips(p, (rng.choice(["1.1.1.1", "2.2.2.2"]),))
        else:
            ps.set_app_specific_score(p, rng.uniform(-5, 5))
        for q in peers:
            assert ps.components(q) == ps._components(q), (step, op)
