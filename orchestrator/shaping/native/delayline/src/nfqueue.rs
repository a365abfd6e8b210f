//! NFQUEUE over netlink (nfnetlink_queue): encoding the configuration and
//! verdict messages, decoding what the kernel sends (packets and acks), as
//! pure functions over byte slices, and the socket that carries them.
//!
//! Layouts (include/uapi/linux/netlink.h, netfilter/nfnetlink.h,
//! netfilter/nfnetlink_queue.h): every message is a `nlmsghdr` (16 bytes,
//! host byte order) then an `nfgenmsg` (family, version, queue number in
//! network byte order) then attributes (`nlattr`: u16 length, u16 type, host
//! byte order; their payloads in network byte order), each padded to 4 bytes.

use std::io;

use crate::sys;

const NETLINK_NETFILTER: i32 = 12;
const NLMSG_HDR_LEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLATTR_HDR_LEN: usize = 4;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;
const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = NFNL_SUBSYS_QUEUE << 8;
const NFQNL_MSG_VERDICT: u16 = (NFNL_SUBSYS_QUEUE << 8) | 1;
const NFQNL_MSG_CONFIG: u16 = (NFNL_SUBSYS_QUEUE << 8) | 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_PAYLOAD: u16 = 10;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
const AF_UNSPEC: u8 = 0;
const AF_INET: u16 = 2;
const NFNETLINK_V0: u8 = 0;

/// Length of one encoded verdict message.
pub const VERDICT_LEN: usize = NLMSG_HDR_LEN + NFGENMSG_LEN + NLATTR_HDR_LEN + 8;

/// What becomes of a queued packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop = 0,
    Accept = 1,
}

/// One message from the kernel.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A queued packet: its id (for the verdict) and the copied start of it
    /// (from the network header on; empty when the kernel copied nothing).
    Packet { id: u32, payload: &'a [u8] },
    /// An NLMSG_ERROR: an ack (errno 0) or the failure of our request `seq`.
    Ack { seq: u32, errno: i32 },
    /// Anything else (NLMSG_NOOP, NLMSG_DONE, other subsystems).
    Other,
}

#[derive(Debug, PartialEq, Eq)]
pub struct MalformedError(pub &'static str);

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn put_nlmsghdr(out: &mut Vec<u8>, len: usize, kind: u16, flags: u16, seq: u32) {
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
}

fn put_nfgenmsg(out: &mut Vec<u8>, queue: u16) {
    out.extend_from_slice(&[AF_UNSPEC, NFNETLINK_V0]);
    out.extend_from_slice(&queue.to_be_bytes());
}

fn put_attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = NLATTR_HDR_LEN + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    out.resize(out.len() + align4(len) - len, 0);
}

/// One NFQNL_MSG_CONFIG message that binds `queue` (BIND), asks for the
/// first `copy_range` bytes of each packet (COPY_PACKET) and sets the queue
/// length to `maxlen`, with NLM_F_ACK: the kernel answers with an ack whose
/// errno says whether it worked (EPERM: another socket has the queue).
pub fn encode_config(queue: u16, seq: u32, copy_range: u32, maxlen: u32) -> Vec<u8> {
    let mut body = Vec::new();
    put_nfgenmsg(&mut body, queue);
    let mut cmd = vec![NFQNL_CFG_CMD_BIND, 0];
    cmd.extend_from_slice(&AF_INET.to_be_bytes());
    put_attr(&mut body, NFQA_CFG_CMD, &cmd);
    let mut params = copy_range.to_be_bytes().to_vec();
    params.push(NFQNL_COPY_PACKET);
    put_attr(&mut body, NFQA_CFG_PARAMS, &params);
    put_attr(&mut body, NFQA_CFG_QUEUE_MAXLEN, &maxlen.to_be_bytes());
    let mut out = Vec::with_capacity(NLMSG_HDR_LEN + body.len());
    put_nlmsghdr(
        &mut out,
        NLMSG_HDR_LEN + body.len(),
        NFQNL_MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        seq,
    );
    out.extend_from_slice(&body);
    out
}

/// Appends one NFQNL_MSG_VERDICT message (VERDICT_LEN bytes, no ack asked)
/// for packet `id` of `queue`.
pub fn encode_verdict(out: &mut Vec<u8>, queue: u16, id: u32, verdict: Verdict) {
    put_nlmsghdr(out, VERDICT_LEN, NFQNL_MSG_VERDICT, NLM_F_REQUEST, 0);
    put_nfgenmsg(out, queue);
    let mut hdr = [0u8; 8];
    hdr[..4].copy_from_slice(&(verdict as u32).to_be_bytes());
    hdr[4..].copy_from_slice(&id.to_be_bytes());
    put_attr(out, NFQA_VERDICT_HDR, &hdr);
}

fn ne_u16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn ne_u32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The netlink messages in one received datagram, in order.
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { buf, at: 0 }
}

pub struct Messages<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, MalformedError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = &self.buf[self.at..];
        if rest.len() < NLMSG_HDR_LEN {
            return None;
        }
        let len = ne_u32(rest, 0) as usize;
        if len < NLMSG_HDR_LEN || len > rest.len() {
            self.at = self.buf.len();
            return Some(Err(MalformedError("netlink message length out of bounds")));
        }
        self.at += align4(len).min(rest.len());
        Some(decode(ne_u16(rest, 4), ne_u32(rest, 8), &rest[NLMSG_HDR_LEN..len]))
    }
}

fn decode(kind: u16, seq: u32, body: &[u8]) -> Result<Message<'_>, MalformedError> {
    match kind {
        NLMSG_ERROR => {
            if body.len() < 4 {
                return Err(MalformedError("NLMSG_ERROR shorter than its error code"));
            }
            Ok(Message::Ack {
                seq,
                errno: -(ne_u32(body, 0) as i32),
            })
        }
        NFQNL_MSG_PACKET => decode_packet(body),
        _ => Ok(Message::Other),
    }
}

fn decode_packet(body: &[u8]) -> Result<Message<'_>, MalformedError> {
    if body.len() < NFGENMSG_LEN {
        return Err(MalformedError("packet message shorter than nfgenmsg"));
    }
    let mut id = None;
    let mut payload: &[u8] = &[];
    let mut at = NFGENMSG_LEN;
    while at + NLATTR_HDR_LEN <= body.len() {
        let len = ne_u16(body, at) as usize;
        if len < NLATTR_HDR_LEN || at + len > body.len() {
            return Err(MalformedError("attribute length out of bounds"));
        }
        let data = &body[at + NLATTR_HDR_LEN..at + len];
        match ne_u16(body, at + 2) & NLA_TYPE_MASK {
            NFQA_PACKET_HDR if data.len() >= 4 => id = Some(u32::from_be_bytes([data[0], data[1], data[2], data[3]])),
            NFQA_PACKET_HDR => return Err(MalformedError("NFQA_PACKET_HDR too short")),
            NFQA_PAYLOAD => payload = data,
            _ => {}
        }
        at += align4(len);
    }
    match id {
        Some(id) => Ok(Message::Packet { id, payload }),
        None => Err(MalformedError("packet message without NFQA_PACKET_HDR")),
    }
}

/// Source and destination address of an IPv4 packet (as u32, network
/// order read big-endian), or None for anything else or a short copy.
pub fn ipv4_addrs(payload: &[u8]) -> Option<(u32, u32)> {
    if payload.len() < 20 || payload[0] >> 4 != 4 {
        return None;
    }
    let addr = |at: usize| u32::from_be_bytes([payload[at], payload[at + 1], payload[at + 2], payload[at + 3]]);
    Some((addr(12), addr(16)))
}

/// A netlink socket of the netfilter family.
pub struct Socket {
    fd: sys::Fd,
}

impl Socket {
    /// A new socket with a receive buffer of `rcvbuf` bytes, and whether
    /// that size was forced past net.core.rmem_max (else it is capped there).
    pub fn open(rcvbuf: i32) -> io::Result<(Socket, bool)> {
        let fd = sys::netlink_socket(NETLINK_NETFILTER)?;
        let forced = sys::set_rcvbuf(&fd, rcvbuf)?;
        Ok((Socket { fd }, forced))
    }

    pub fn fd(&self) -> &sys::Fd {
        &self.fd
    }

    /// Sends one datagram of messages.
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        sys::send_datagram(&self.fd, buf).map(|_| ())
    }

    /// One datagram, without blocking (Err EAGAIN: none waiting; Err
    /// ENOBUFS: the kernel dropped messages for us since the last call).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        sys::recv_nonblocking(&self.fd, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_attr(&mut out, kind, data);
        out
    }

    fn packet_msg(id: u32, payload: &[u8]) -> Vec<u8> {
        let mut body = vec![2, 0, 0, 77];
        let mut hdr = id.to_be_bytes().to_vec();
        hdr.extend_from_slice(&[0x08, 0x00, 2]);
        body.extend(attr(NFQA_PACKET_HDR, &hdr));
        body.extend(attr(5, &7u32.to_be_bytes()));
        body.extend(attr(NFQA_PAYLOAD | 0x4000, payload));
        let mut out = Vec::new();
        put_nlmsghdr(&mut out, NLMSG_HDR_LEN + body.len(), NFQNL_MSG_PACKET, 0, 0);
        out.extend(body);
        out
    }

    fn ipv4_header(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut h = vec![0x45, 0, 0, 84, 0, 0, 0x40, 0, 64, 1, 0, 0];
        h.extend_from_slice(&src);
        h.extend_from_slice(&dst);
        h.push(8);
        h
    }

    #[test]
    fn two_packets_in_one_buffer() {
        let first = ipv4_header([10, 77, 0, 1], [10, 77, 0, 2]);
        let second = ipv4_header([10, 77, 0, 2], [10, 77, 0, 1]);
        let mut buf = packet_msg(41, &first);
        buf.extend(packet_msg(42, &second));
        let got: Vec<_> = messages(&buf).collect();
        assert_eq!(
            got,
            vec![
                Ok(Message::Packet {
                    id: 41,
                    payload: &first[..]
                }),
                Ok(Message::Packet {
                    id: 42,
                    payload: &second[..]
                })
            ]
        );
        assert_eq!(ipv4_addrs(&first), Some((0x0a4d_0001, 0x0a4d_0002)));
        assert_eq!(ipv4_addrs(&second[..19]), None);
        assert_eq!(ipv4_addrs(&[0x60; 40]), None);
    }

    #[test]
    fn ack_and_error() {
        let mut buf = Vec::new();
        for (seq, err) in [(1u32, 0i32), (2, -1)] {
            put_nlmsghdr(&mut buf, NLMSG_HDR_LEN + 4 + 16, NLMSG_ERROR, 0, seq);
            buf.extend_from_slice(&err.to_ne_bytes());
            buf.extend_from_slice(&[0; 16]);
        }
        let got: Vec<_> = messages(&buf).collect();
        assert_eq!(
            got,
            vec![
                Ok(Message::Ack { seq: 1, errno: 0 }),
                Ok(Message::Ack { seq: 2, errno: 1 })
            ]
        );
    }

    #[test]
    fn malformed_messages() {
        let mut buf = packet_msg(1, &[0x45; 20]);
        buf.truncate(buf.len() - 4);
        assert_eq!(
            messages(&buf).collect::<Vec<_>>(),
            vec![Err(MalformedError("netlink message length out of bounds"))]
        );
        let mut no_hdr = Vec::new();
        put_nlmsghdr(&mut no_hdr, NLMSG_HDR_LEN + 4, NFQNL_MSG_PACKET, 0, 0);
        no_hdr.extend_from_slice(&[2, 0, 0, 77]);
        assert_eq!(
            messages(&no_hdr).collect::<Vec<_>>(),
            vec![Err(MalformedError("packet message without NFQA_PACKET_HDR"))]
        );
    }

    #[test]
    fn verdict_encoding() {
        let mut out = Vec::new();
        encode_verdict(&mut out, 77, 0x0102_0304, Verdict::Accept);
        encode_verdict(&mut out, 77, 5, Verdict::Drop);
        assert_eq!(out.len(), 2 * VERDICT_LEN);
        let mut expected = Vec::new();
        expected.extend_from_slice(&32u32.to_ne_bytes());
        expected.extend_from_slice(&0x0301u16.to_ne_bytes());
        expected.extend_from_slice(&1u16.to_ne_bytes());
        expected.extend_from_slice(&[0; 8]);
        expected.extend_from_slice(&[0, 0, 0, 77]);
        expected.extend_from_slice(&12u16.to_ne_bytes());
        expected.extend_from_slice(&2u16.to_ne_bytes());
        expected.extend_from_slice(&[0, 0, 0, 1, 1, 2, 3, 4]);
        assert_eq!(&out[..VERDICT_LEN], &expected[..]);
        assert_eq!(&out[VERDICT_LEN + 24..], &[0, 0, 0, 0, 0, 0, 0, 5]);
    }

    #[test]
    fn config_encoding() {
        let msg = encode_config(77, 9, 40, 65536);
        assert_eq!(msg.len(), 16 + 4 + 8 + 12 + 8);
        assert_eq!(ne_u32(&msg, 0) as usize, msg.len());
        assert_eq!(ne_u16(&msg, 4), 0x0302);
        assert_eq!(ne_u16(&msg, 6), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(ne_u32(&msg, 8), 9);
        assert_eq!(&msg[16..20], &[0, 0, 0, 77]);
        assert_eq!(&msg[24..28], &[1, 0, 0, 2]);
        assert_eq!(ne_u16(&msg, 28), 9);
        assert_eq!(&msg[32..37], &[0, 0, 0, 40, 2]);
        assert_eq!(&msg[44..48], &65536u32.to_be_bytes());
    }
}
