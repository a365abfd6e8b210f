//! The few C library calls this program makes, declared by hand (the crate
//! has no dependencies, not even `libc`), with small safe wrappers. All the
//! `unsafe` of the program is in this module. The declarations and constants
//! are those of glibc on 64-bit Linux (x86_64 and aarch64 agree on every one
//! used here).

use std::io;
use std::os::raw::{c_int, c_long, c_uint, c_ulong, c_void};

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!("gtb-delayline supports Linux on x86_64 and aarch64 only");

const AF_NETLINK: c_int = 16;
const SOCK_RAW: c_int = 3;
const SOCK_CLOEXEC: c_int = 0o2_000_000;
const SOL_SOCKET: c_int = 1;
const SO_RCVBUF: c_int = 8;
const SO_RCVBUFFORCE: c_int = 33;
const MSG_DONTWAIT: c_int = 0x40;
const CLOCK_MONOTONIC: c_int = 1;
const SIG_BLOCK: c_int = 0;
const SFD_NONBLOCK: c_int = 0o4_000;
const SFD_CLOEXEC: c_int = 0o2_000_000;
const PR_SET_TIMERSLACK: c_int = 29;
const SIGNALFD_SIGINFO_LEN: usize = 128;

pub const POLLIN: i16 = 0x1;
pub const POLLERR: i16 = 0x8;
pub const EAGAIN: i32 = 11;
pub const EINTR: i32 = 4;
pub const ENOBUFS: i32 = 105;
pub const SIGHUP: c_int = 1;
pub const SIGINT: c_int = 2;
pub const SIGTERM: c_int = 15;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

#[repr(C)]
struct SockaddrNl {
    nl_family: u16,
    nl_pad: u16,
    nl_pid: u32,
    nl_groups: u32,
}

/// glibc's `sigset_t`: 1024 bits, signal n at bit n - 1.
#[repr(C)]
pub struct SigSet {
    words: [c_ulong; 16],
}

/// `struct pollfd`.
#[repr(C)]
pub struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

extern "C" {
    fn socket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const SockaddrNl, len: c_uint) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: c_uint) -> c_int;
    fn send(fd: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    fn recv(fd: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    fn read(fd: c_int, buf: *mut c_void, len: usize) -> isize;
    fn close(fd: c_int) -> c_int;
    fn ppoll(fds: *mut PollFd, nfds: c_ulong, timeout: *const Timespec, sigmask: *const SigSet) -> c_int;
    fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int;
    fn sigprocmask(how: c_int, set: *const SigSet, old: *mut SigSet) -> c_int;
    fn signalfd(fd: c_int, mask: *const SigSet, flags: c_int) -> c_int;
    fn prctl(option: c_int, ...) -> c_int;
}

fn check(ret: c_long) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// A file descriptor this program owns, closed when dropped.
pub struct Fd(c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is owned by this value and closed once.
        unsafe { close(self.0) };
    }
}

/// A NETLINK_* socket of `protocol`, blocking, bound with a kernel-chosen port id.
pub fn netlink_socket(protocol: c_int) -> io::Result<Fd> {
    // SAFETY: plain syscall on integers.
    let fd = Fd(check(unsafe { socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol) } as c_long)? as c_int);
    let addr = SockaddrNl {
        nl_family: AF_NETLINK as u16,
        nl_pad: 0,
        nl_pid: 0,
        nl_groups: 0,
    };
    // SAFETY: addr is a valid sockaddr_nl of the length given.
    check(unsafe { bind(fd.0, &addr, std::mem::size_of::<SockaddrNl>() as c_uint) } as c_long)?;
    Ok(fd)
}

/// Sets the receive buffer to `bytes`: with SO_RCVBUFFORCE (beyond
/// net.core.rmem_max, needs CAP_NET_ADMIN), else with SO_RCVBUF (capped by
/// rmem_max). Returns whether the forced size was taken.
pub fn set_rcvbuf(fd: &Fd, bytes: i32) -> io::Result<bool> {
    let set = |name: c_int| {
        // SAFETY: the value points to a live c_int of the length given.
        check(unsafe {
            setsockopt(
                fd.0,
                SOL_SOCKET,
                name,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as c_uint,
            )
        } as c_long)
    };
    match set(SO_RCVBUFFORCE) {
        Ok(_) => Ok(true),
        Err(_) => set(SO_RCVBUF).map(|_| false),
    }
}

/// Sends one datagram (for netlink: one or more messages back to back).
pub fn send_datagram(fd: &Fd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is a live slice of the length given.
    check(unsafe { send(fd.0, buf.as_ptr().cast(), buf.len(), 0) } as c_long)
}

/// Receives one datagram without blocking (EAGAIN when there is none).
pub fn recv_nonblocking(fd: &Fd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is a live, writable slice of the length given.
    check(unsafe { recv(fd.0, buf.as_mut_ptr().cast(), buf.len(), MSG_DONTWAIT) } as c_long)
}

impl PollFd {
    pub fn new(fd: &Fd, events: i16) -> PollFd {
        PollFd {
            fd: fd.0,
            events,
            revents: 0,
        }
    }

    pub fn revents(&self) -> i16 {
        self.revents
    }
}

/// Waits for an event on `fds` or for `timeout_ns` (None: no timeout).
/// Returns how many descriptors have events (0: timed out).
pub fn poll(fds: &mut [PollFd], timeout_ns: Option<u64>) -> io::Result<usize> {
    let ts = timeout_ns.map(|ns| Timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as i64,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const Timespec);
    // SAFETY: fds is a live slice of pollfd; ts_ptr is null or points to ts.
    check(unsafe { ppoll(fds.as_mut_ptr(), fds.len() as c_ulong, ts_ptr, std::ptr::null()) } as c_long)
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sets this thread's timer slack (the lateness the kernel may add to its
/// timeouts to batch wake-ups; 50 us by default).
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long argument.
    check(unsafe { prctl(PR_SET_TIMERSLACK, ns as c_ulong) } as c_long).map(|_| ())
}

/// Blocks `signals` for this thread and returns a non-blocking signalfd
/// that reads them.
pub fn signal_fd(signals: &[c_int]) -> io::Result<Fd> {
    let mut set = SigSet { words: [0; 16] };
    for &sig in signals {
        let bit = (sig - 1) as usize;
        set.words[bit / 64] |= 1 << (bit % 64);
    }
    // SAFETY: set is a valid sigset_t; the old mask is not asked for.
    check(unsafe { sigprocmask(SIG_BLOCK, &set, std::ptr::null_mut()) } as c_long)?;
    // SAFETY: set is a valid sigset_t.
    let fd = check(unsafe { signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC) } as c_long)?;
    Ok(Fd(fd as c_int))
}

/// The next pending signal's number from a signalfd (None: none pending).
pub fn read_signal(fd: &Fd) -> io::Result<Option<c_int>> {
    let mut info = [0u8; SIGNALFD_SIGINFO_LEN];
    // SAFETY: info is a writable buffer of the length given.
    match check(unsafe { read(fd.0, info.as_mut_ptr().cast(), info.len()) } as c_long) {
        Ok(n) if n == SIGNALFD_SIGINFO_LEN => {
            Ok(Some(u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as c_int))
        }
        Ok(n) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("signalfd read {n} bytes"),
        )),
        Err(e) if e.raw_os_error() == Some(EAGAIN) => Ok(None),
        Err(e) => Err(e),
    }
}
