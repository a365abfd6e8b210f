"""The pubsub RPC as small frozen dataclasses, and their protobuf encoding.

Engines speak these dataclasses, never protobuf objects: the simulator moves
millions of them and never needs bytes, while the runtime encodes them with
`encode_rpc`/`decode_rpc`. `rpc_size` computes the encoded length without
encoding, so the simulator can charge serialization delay cheaply; a test keeps
it equal to `len(encode_rpc(rpc))`.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from node.proto import rpc_pb2
from node.wire.frozen import frozen

PeerId = bytes
MessageId = bytes


@frozen
class SubOpts:
    subscribe: bool
    topic: str


FROM_SEQNO = "from-seqno"
FIRST_8_BYTES = "first-8-bytes"
MESSAGE_ID_FUNCTIONS = (FROM_SEQNO, FIRST_8_BYTES)


def message_id(function: str, from_peer: PeerId, seqno: bytes, data: bytes) -> MessageId:
    """A message's id under the network's message-id function:
    `from-seqno`, libp2p's default, is the `from` bytes followed by the seqno
    bytes; `first-8-bytes`, test-plans' convention, is the first 8 bytes of the
    data exactly as they are (a big-endian u64 when the publisher wrote one;
    shorter data is its own id)."""
    if function == FROM_SEQNO:
        return from_peer + seqno
    if function == FIRST_8_BYTES:
        return data[:8]
    raise ValueError(f"unknown message-id function {function!r} (known: {', '.join(MESSAGE_ID_FUNCTIONS)})")


def workload_data(seq: int, size: int) -> bytes:
    """The testbed's deterministic message data: the workload sequence number
    as a big-endian u64 (test-plans' convention, so first-8-bytes ids are
    unique), then `msg-<seq>:` repeated, cut to `size` bytes."""
    head = f"msg-{seq}:".encode()
    return (seq.to_bytes(8, "big") + head * (size // len(head) + 1))[:size]


@frozen
class Message:
    """A pubsub message. Empty `from_peer`, `seqno`, `signature` and `key` are
    absent on the wire. `id` is computed once, when the message is built or
    decoded, by the network's message-id function; left out, it is libp2p's
    default (from + seqno)."""

    from_peer: PeerId
    data: bytes
    seqno: bytes
    topic: str
    signature: bytes
    key: bytes
    id: MessageId

    def __init__(
        self, from_peer: PeerId, data: bytes, seqno: bytes, topic: str, signature: bytes = b"", key: bytes = b"",
        id: MessageId | None = None,
    ) -> None:
        """The dataclass's own fields, in order; `id` only when given (the
        field itself is always bytes)."""
        setattr_ = object.__setattr__
        setattr_(self, "from_peer", from_peer)
        setattr_(self, "data", data)
        setattr_(self, "seqno", seqno)
        setattr_(self, "topic", topic)
        setattr_(self, "signature", signature)
        setattr_(self, "key", key)
        setattr_(self, "id", from_peer + seqno if id is None else id)


def seqno_bytes(counter: int) -> bytes:
    """The seqno field as libp2p writes it: an 8-byte big-endian counter."""
    return counter.to_bytes(8, "big")


@frozen
class IHave:
    topic: str
    message_ids: tuple[MessageId, ...]


@frozen
class IWant:
    message_ids: tuple[MessageId, ...]


@frozen
class Graft:
    topic: str


@frozen
class Prune:
    """`peers` (peer exchange) and `backoff` (seconds) are gossipsub v1.1's;
    a v1.0 PRUNE has neither."""

    topic: str
    peers: tuple[PeerId, ...] = ()
    backoff: int | None = None


@frozen
class IDontWant:
    """gossipsub v1.2: the sender already has these messages."""

    message_ids: tuple[MessageId, ...]


@frozen
class Control:
    ihave: tuple[IHave, ...] = ()
    iwant: tuple[IWant, ...] = ()
    graft: tuple[Graft, ...] = ()
    prune: tuple[Prune, ...] = ()
    idontwant: tuple[IDontWant, ...] = ()

    def is_empty(self) -> bool:
        return not (self.ihave or self.iwant or self.graft or self.prune or self.idontwant)


@frozen
class Rpc:
    subscriptions: tuple[SubOpts, ...] = ()
    publish: tuple[Message, ...] = ()
    control: Control | None = None


class WireError(ValueError):
    """Bytes from a peer that are not a pubsub RPC we can act on."""


def encode_rpc(rpc: Rpc) -> bytes:
    pb = rpc_pb2.RPC()
    for sub in rpc.subscriptions:
        pb.subscriptions.add(subscribe=sub.subscribe, topicid=sub.topic)
    for msg in rpc.publish:
        _fill_message(pb.publish.add(), msg)
    if rpc.control is not None:
        ctl = pb.control
        ctl.SetInParent()
        for ihave in rpc.control.ihave:
            ctl.ihave.add(topicID=ihave.topic, messageIDs=ihave.message_ids)
        for iwant in rpc.control.iwant:
            ctl.iwant.add(messageIDs=iwant.message_ids)
        for graft in rpc.control.graft:
            ctl.graft.add(topicID=graft.topic)
        for prune in rpc.control.prune:
            pb_prune = ctl.prune.add(topicID=prune.topic)
            for peer in prune.peers:
                pb_prune.peers.add(peerID=peer)
            if prune.backoff is not None:
                pb_prune.backoff = prune.backoff
        for idontwant in rpc.control.idontwant:
            ctl.idontwant.add(messageIDs=idontwant.message_ids)
    return pb.SerializeToString()


def _fill_message(pb: rpc_pb2.Message, msg: Message) -> None:
    if msg.from_peer:
        setattr(pb, "from", msg.from_peer)
    pb.data = msg.data
    if msg.seqno:
        pb.seqno = msg.seqno
    pb.topic = msg.topic
    if msg.signature:
        pb.signature = msg.signature
    if msg.key:
        pb.key = msg.key


def encode_message(msg: Message) -> bytes:
    """The message alone, without signature and key: what libp2p signs
    (after the "libp2p-pubsub:" prefix)."""
    pb = rpc_pb2.Message()
    _fill_message(pb, Message(msg.from_peer, msg.data, msg.seqno, msg.topic))
    return pb.SerializeToString()


def _text(value: str | bytes) -> str:
    """A proto2 string field. protobuf hands back the raw bytes, not an error,
    when a peer sent invalid UTF-8; a topic must be a str everywhere after."""
    if isinstance(value, bytes):
        raise WireError(f"string field is not valid UTF-8: {value[:32]!r}")
    return value


def decode_rpc(data: bytes, message_id_function: str = FROM_SEQNO) -> Rpc:
    """Decode one RPC, giving each message its id under `message_id_function`;
    unknown fields are skipped, malformed bytes raise WireError."""
    pb = rpc_pb2.RPC()
    try:
        pb.ParseFromString(data)
    except DecodeError as exc:
        raise WireError(f"undecodable RPC ({len(data)} bytes): {exc}") from None
    try:
        subs = tuple(SubOpts(s.subscribe, _text(s.topicid)) for s in pb.subscriptions)
        msgs = tuple(
            Message(
                getattr(m, "from"), m.data, m.seqno, _text(m.topic), m.signature, m.key,
                message_id(message_id_function, getattr(m, "from"), m.seqno, m.data),
            )
            for m in pb.publish
        )
        control = None
        if pb.HasField("control"):
            c = pb.control
            control = Control(
                ihave=tuple(IHave(_text(i.topicID), tuple(i.messageIDs)) for i in c.ihave),
                iwant=tuple(IWant(tuple(i.messageIDs)) for i in c.iwant),
                graft=tuple(Graft(_text(g.topicID)) for g in c.graft),
                prune=tuple(
                    Prune(_text(p.topicID), tuple(i.peerID for i in p.peers),
                          p.backoff if p.HasField("backoff") else None)
                    for p in c.prune
                ),
                idontwant=tuple(IDontWant(tuple(i.messageIDs)) for i in c.idontwant),
            )
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"RPC with invalid field contents: {exc}") from None
    return Rpc(subs, msgs, control)


class RpcDecoder:
    """`decode_rpc` for one router, remembering the frames it decoded last
    (at most `max_bytes` of them; a frame above an eighth of that is never
    kept). A message forwarded through a mesh reaches a router once from each
    mesh peer, and every copy is the same bytes (each forwarder encodes the
    same message the same way), so the copies after the first are one dict
    lookup, and they are the same `Rpc` object, whose trace metadata the trace
    encoder already holds. Decoding is a pure function of the bytes, so
    sharing the frozen result changes nothing; a frame that fails to decode is
    not remembered."""

    def __init__(self, message_id_function: str = FROM_SEQNO, max_bytes: int = 1 << 20) -> None:
        self.message_id_function = message_id_function
        self.max_bytes = max_bytes
        self._recent: dict[bytes, Rpc] = {}
        self._bytes = 0

    def decode(self, frame: bytes) -> Rpc:
        rpc = self._recent.get(frame)
        if rpc is None:
            rpc = decode_rpc(frame, self.message_id_function)
            if len(frame) <= self.max_bytes >> 3:
                recent = self._recent
                self._bytes += len(frame)
                while self._bytes > self.max_bytes:
                    self._bytes -= len(oldest := next(iter(recent)))
                    del recent[oldest]
                recent[frame] = rpc
        return rpc


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _field(payload_len: int) -> int:
    """Size of one length-delimited field with a one-byte tag."""
    return 1 + _varint_len(payload_len) + payload_len


def _optional_field(payload_len: int) -> int:
    """An optional bytes field, absent when empty."""
    return _field(payload_len) if payload_len else 0


def _str_field(s: str) -> int:
    return _field(len(s.encode()))


_SIZE_CACHE_LIMIT = 200_000
_message_sizes: dict[Message, int] = {}


def _message_size(msg: Message) -> int:
    """Cached: one message is forwarded in many RPCs."""
    size = _message_sizes.get(msg)
    if size is None:
        if len(_message_sizes) >= _SIZE_CACHE_LIMIT:
            _message_sizes.clear()
        size = _message_sizes[msg] = (
            _optional_field(len(msg.from_peer))
            + _field(len(msg.data))
            + _optional_field(len(msg.seqno))
            + _str_field(msg.topic)
            + _optional_field(len(msg.signature))
            + _optional_field(len(msg.key))
        )
    return size


def _control_size(control: Control) -> int:
    size = 0
    for ihave in control.ihave:
        size += _field(_str_field(ihave.topic) + sum(_field(len(m)) for m in ihave.message_ids))
    for iwant in control.iwant:
        size += _field(sum(_field(len(m)) for m in iwant.message_ids))
    for graft in control.graft:
        size += _field(_str_field(graft.topic))
    for prune in control.prune:
        size += _field(
            _str_field(prune.topic)
            + sum(_field(_optional_field(len(peer))) for peer in prune.peers)
            + (0 if prune.backoff is None else 1 + _varint_len(prune.backoff))
        )
    for idontwant in control.idontwant:
        size += _field(sum(_field(len(m)) for m in idontwant.message_ids))
    return size


def rpc_size(rpc: Rpc) -> int:
    """The length of `encode_rpc(rpc)`, computed without encoding; an RPC of
    another protocol (node/wire/episub.py) knows its own `wire_size`."""
    if type(rpc) is not Rpc:
        return rpc.wire_size  # type: ignore[attr-defined]
    size = 0
    for sub in rpc.subscriptions:
        size += _field(2 + _str_field(sub.topic))
    for msg in rpc.publish:
        size += _field(_message_size(msg))
    if rpc.control is not None:
        size += _field(_control_size(rpc.control))
    return size
