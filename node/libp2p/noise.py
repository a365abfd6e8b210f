"""`/noise`: Noise_XX_25519_ChaChaPoly_SHA256 with libp2p's handshake payload.

The Noise framework's state objects (CipherState, SymmetricState and the XX
pattern) are written here over `cryptography`'s primitives (X25519,
ChaCha20-Poly1305, HMAC-SHA256); they are a few dozen lines and follow the
Noise specification's names, so each step can be checked against it.

libp2p's rules (libp2p/specs noise/README.md):
- prologue empty; every handshake and transport message is prefixed by its
  length as a 2-byte big-endian integer, at most 65535 bytes;
- XX: `-> e`, `<- e, ee, s, es` + the responder's payload, `-> s, se` + the
  initiator's payload;
- the payload is NoiseHandshakePayload{identity_key, identity_sig}: the
  libp2p public key and its signature over "noise-libp2p-static-key:" + the
  sender's static X25519 public key. We check the signature and derive the
  remote peer id from identity_key; a dialer also checks it is the peer id it
  meant to reach.

`NoiseHandshake` is the sans-I/O core (bytes in, bytes out); `handshake()`
drives it over a stream and returns a `NoiseChannel`, the encrypted stream.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from google.protobuf.message import DecodeError

from node.libp2p.identity import Identity, peer_id_from_public_key, peer_id_to_b58, verify
from node.libp2p.bufstream import READ_CHUNK, BufferedStream
from node.libp2p.errors import ProtocolError
from node.proto import libp2p_pb2

PROTOCOL_ID = "/noise"
PROTOCOL_NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"  # exactly HASHLEN bytes: h = name
SIGNATURE_PREFIX = b"noise-libp2p-static-key:"
DHLEN = 32
HASHLEN = 32
TAGLEN = 16
MAX_MESSAGE = 65535
MAX_PLAINTEXT = MAX_MESSAGE - TAGLEN
MAX_NONCE = (1 << 64) - 1


def _hkdf(chaining_key: bytes, ikm: bytes) -> tuple[bytes, bytes]:
    temp = hmac.digest(chaining_key, ikm, "sha256")
    out1 = hmac.digest(temp, b"\x01", "sha256")
    out2 = hmac.digest(temp, out1 + b"\x02", "sha256")
    return out1, out2


def _x25519_public(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes_raw()


def _dh(key: X25519PrivateKey, public: bytes) -> bytes:
    try:
        return key.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError as exc:  # a low-order point gives an all-zero secret
        raise ProtocolError(f"noise: bad X25519 public key: {exc}") from None


class CipherState:
    def __init__(self, key: bytes | None = None) -> None:
        self.aead = ChaCha20Poly1305(key) if key is not None else None
        self.nonce = 0

    def _next_nonce(self) -> bytes:
        if self.nonce >= MAX_NONCE:
            raise ProtocolError("noise: nonce exhausted")
        nonce = b"\0\0\0\0" + struct.pack("<Q", self.nonce)
        self.nonce += 1
        return nonce

    def encrypt(self, ad: bytes, plaintext: bytes) -> bytes:
        if self.aead is None:
            return plaintext
        return self.aead.encrypt(self._next_nonce(), plaintext, ad)

    def decrypt(self, ad: bytes, ciphertext: bytes) -> bytes:
        if self.aead is None:
            return ciphertext
        try:
            return self.aead.decrypt(self._next_nonce(), ciphertext, ad)
        except InvalidTag:
            raise ProtocolError("noise: a message failed authentication") from None


class SymmetricState:
    def __init__(self) -> None:
        self.h = PROTOCOL_NAME
        self.ck = PROTOCOL_NAME
        self.cipher = CipherState()
        self.mix_hash(b"")  # the empty prologue

    def mix_hash(self, data: bytes) -> None:
        self.h = hashlib.sha256(self.h + data).digest()

    def mix_key(self, ikm: bytes) -> None:
        self.ck, key = _hkdf(self.ck, ikm)
        self.cipher = CipherState(key)

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        ciphertext = self.cipher.encrypt(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        plaintext = self.cipher.decrypt(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    def split(self) -> tuple[CipherState, CipherState]:
        k1, k2 = _hkdf(self.ck, b"")
        return CipherState(k1), CipherState(k2)


class NoiseHandshake:
    """The XX pattern, one side. Call `write_message`/`read_message` in the
    pattern's order (initiator: write, read, write; responder: read, write,
    read); then `split()` gives (send, receive) cipher states."""

    def __init__(self, initiator: bool, static: X25519PrivateKey | None = None,
                 ephemeral: X25519PrivateKey | None = None) -> None:
        self.initiator = initiator
        self.s = static or X25519PrivateKey.generate()
        self.e = ephemeral or X25519PrivateKey.generate()
        self.s_pub = _x25519_public(self.s)
        self.rs: bytes | None = None
        self.re: bytes | None = None
        self.state = SymmetricState()
        self.step = 0

    def write_message(self, payload: bytes) -> bytes:
        ss, out = self.state, bytearray()
        if self.step == 0 and self.initiator:  # -> e
            out += self._write_e()
        elif self.step == 1 and not self.initiator:  # <- e, ee, s, es
            out += self._write_e()
            ss.mix_key(_dh(self.e, self._re()))
            out += ss.encrypt_and_hash(self.s_pub)
            ss.mix_key(_dh(self.s, self._re()))
        elif self.step == 2 and self.initiator:  # -> s, se
            out += ss.encrypt_and_hash(self.s_pub)
            ss.mix_key(_dh(self.s, self._re()))
        else:
            raise RuntimeError(f"noise: not our turn to write (step {self.step})")
        out += ss.encrypt_and_hash(payload)
        self.step += 1
        return bytes(out)

    def read_message(self, message: bytes) -> bytes:
        ss = self.state
        pos = 0
        if self.step == 0 and not self.initiator:  # -> e
            pos = self._read_e(message)
        elif self.step == 1 and self.initiator:  # <- e, ee, s, es
            pos = self._read_e(message)
            ss.mix_key(_dh(self.e, self._re()))
            pos = self._read_s(message, pos)
            ss.mix_key(_dh(self.e, self.rs))
        elif self.step == 2 and not self.initiator:  # -> s, se
            pos = self._read_s(message, 0)
            ss.mix_key(_dh(self.e, self.rs))
        else:
            raise RuntimeError(f"noise: not our turn to read (step {self.step})")
        payload = ss.decrypt_and_hash(message[pos:])
        self.step += 1
        return payload

    def split(self) -> tuple[CipherState, CipherState]:
        if self.step != 3:
            raise RuntimeError("noise: handshake not finished")
        c1, c2 = self.state.split()
        return (c1, c2) if self.initiator else (c2, c1)

    def _write_e(self) -> bytes:
        e_pub = _x25519_public(self.e)
        self.state.mix_hash(e_pub)
        return e_pub

    def _read_e(self, message: bytes) -> int:
        if len(message) < DHLEN:
            raise ProtocolError("noise: handshake message too short for an ephemeral key")
        self.re = message[:DHLEN]
        self.state.mix_hash(self.re)
        return DHLEN

    def _re(self) -> bytes:
        assert self.re is not None
        return self.re

    def _read_s(self, message: bytes, pos: int) -> int:
        size = DHLEN + (TAGLEN if self.state.cipher.aead is not None else 0)
        if len(message) < pos + size:
            raise ProtocolError("noise: handshake message too short for a static key")
        self.rs = self.state.decrypt_and_hash(message[pos:pos + size])
        return pos + size


def make_payload(identity: Identity, static_public: bytes) -> bytes:
    payload = libp2p_pb2.NoiseHandshakePayload(
        identity_key=identity.public_key_proto,
        identity_sig=identity.sign(SIGNATURE_PREFIX + static_public),
    )
    return payload.SerializeToString()


def check_payload(data: bytes, remote_static: bytes) -> bytes:
    """The remote peer id, after checking the payload's signature over the
    remote's static key; ProtocolError for anything wrong."""
    payload = libp2p_pb2.NoiseHandshakePayload()
    try:
        payload.ParseFromString(data)
    except DecodeError as exc:
        raise ProtocolError(f"noise: handshake payload does not decode: {exc}") from None
    if not payload.identity_key or not payload.identity_sig:
        raise ProtocolError("noise: handshake payload lacks identity_key or identity_sig")
    try:
        ok = verify(payload.identity_key, SIGNATURE_PREFIX + remote_static, payload.identity_sig)
        peer_id = peer_id_from_public_key(payload.identity_key)
    except ValueError as exc:
        raise ProtocolError(f"noise: identity key: {exc}") from None
    if not ok:
        raise ProtocolError("noise: the identity signature over the static key does not verify")
    return peer_id


class NoiseChannel:
    """The transport phase: a stream of plaintext over length-prefixed
    ChaCha20-Poly1305 messages. `seal` encrypts without I/O, so a caller can
    encrypt in order and write the bytes when the socket takes them; a read
    decrypts every whole message the network delivered at once."""

    def __init__(self, stream: BufferedStream, send: CipherState, receive: CipherState) -> None:
        self.stream = stream
        self._send = send
        self._receive = receive
        self._buf = bytearray()

    def seal(self, data: bytes | bytearray | memoryview) -> bytes:
        """`data` as transport messages (length prefix + ciphertext)."""
        if len(data) <= MAX_PLAINTEXT:
            ciphertext = self._send.encrypt(b"", bytes(data))
            return struct.pack(">H", len(ciphertext)) + ciphertext
        view = memoryview(data)
        parts = []
        for start in range(0, len(view), MAX_PLAINTEXT):
            ciphertext = self._send.encrypt(b"", bytes(view[start:start + MAX_PLAINTEXT]))
            parts.append(struct.pack(">H", len(ciphertext)))
            parts.append(ciphertext)
        return b"".join(parts)

    def open(self, data: bytes) -> bytes:
        """Ciphertext in, the plaintext of every message it completes out
        (b"" while a message is still partial); without I/O, so a connection
        can read its socket itself. b"" in is the end of the stream, which
        must not fall inside a message."""
        if not data:
            if self._buf:
                raise ProtocolError("connection closed while reading a noise message")
            return b""
        self._buf += data
        return self._open_whole_messages()

    def take_pending(self) -> bytes:
        """The plaintext of whole messages already read from the stream (read
        ahead during the handshake or by `receive_some`); partial ones stay."""
        self._buf += self.stream.take_buffer()
        return self._open_whole_messages()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(self.seal(data))

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The plaintext of every whole message received so far (at least
        one); b"" at end of stream (never inside a message)."""
        while True:
            plaintext = self._open_whole_messages()
            if plaintext:
                return plaintext
            data = await self.stream.receive_some(READ_CHUNK)
            if not data:
                return self.open(data)
            self._buf += data

    def _open_whole_messages(self) -> bytes:
        buf, pos, parts = self._buf, 0, []
        while len(buf) - pos >= 2:
            end = pos + 2 + (buf[pos] << 8 | buf[pos + 1])
            if end > len(buf):
                break
            parts.append(self._receive.decrypt(b"", bytes(buf[pos + 2:end])))
            pos = end
        del buf[:pos]
        return b"".join(parts)


async def _read_handshake_message(stream: BufferedStream) -> bytes:
    (length,) = struct.unpack(">H", await stream.read_exactly(2, "a noise handshake length"))
    return await stream.read_exactly(length, "a noise handshake message")


def _framed(message: bytes) -> bytes:
    return struct.pack(">H", len(message)) + message


async def handshake(stream: BufferedStream, identity: Identity, initiator: bool,
                    expect: bytes | None = None) -> tuple[bytes, NoiseChannel]:
    """(remote peer id, channel). ProtocolError when the remote fails the
    handshake or (dialer) is not the peer `expect`."""
    hs = NoiseHandshake(initiator)
    ours = make_payload(identity, hs.s_pub)
    if initiator:
        await stream.send_all(_framed(hs.write_message(b"")))
        theirs = hs.read_message(await _read_handshake_message(stream))
        assert hs.rs is not None
        peer_id = check_payload(theirs, hs.rs)
        if expect is not None and peer_id != expect:
            raise ProtocolError(
                f"noise: dialled {peer_id_to_b58(expect)} but the peer is {peer_id_to_b58(peer_id)}")
        await stream.send_all(_framed(hs.write_message(ours)))
    else:
        hs.read_message(await _read_handshake_message(stream))
        await stream.send_all(_framed(hs.write_message(ours)))
        theirs = hs.read_message(await _read_handshake_message(stream))
        assert hs.rs is not None
        peer_id = check_payload(theirs, hs.rs)
    send, receive = hs.split()
    return peer_id, NoiseChannel(stream, send, receive)
