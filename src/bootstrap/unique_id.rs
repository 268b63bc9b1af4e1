//! The 128-byte unique id that names one communicator's rendezvous.
//!
//! Layout (little endian), fixed by protocol version 1:
//!
//! | bytes      | field                                          |
//! |------------|------------------------------------------------|
//! | `0..8`     | magic `0x4D4D4F434D4D5953` (`"SYMMCOMM"`)      |
//! | `8..12`    | protocol version (1)                           |
//! | `12..14`   | root address family (4 or 6)                   |
//! | `14..16`   | root port                                      |
//! | `16..32`   | root IP (IPv4 in the first 4 bytes, rest zero) |
//! | `32..40`   | communicator tag (random)                      |
//! | `40..120`  | reserved, zero                                 |
//! | `120..128` | FNV-1a 64 of bytes `0..120`                    |
//!
//! The id travels through user code (MPI broadcasts, files, env vars), so it
//! carries a checksum: a garbled or never-initialised id is reported as such
//! instead of sending ranks to a random address.

use std::fmt;
use std::net::SocketAddr;

use super::net::{decode_sockaddr, encode_sockaddr, SOCKADDR_LEN};
use crate::error::{bail, Error, Result};

/// `"SYMMCOMM"` read as a little-endian u64.
pub(crate) const MAGIC: u64 = 0x4D4D_4F43_4D4D_5953;
/// Bumped whenever the id layout or the wire protocol changes.
pub(crate) const VERSION: u32 = 1;

const ADDR_AT: usize = 12;
const TAG_AT: usize = 32;
const RESERVED: std::ops::Range<usize> = 40..120;
const CHECKSUM_AT: usize = 120;

/// Opaque handle every rank of one communicator must share (C: `symmUniqueId`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl UniqueId {
    pub fn from_bytes(b: &[u8; 128]) -> Self {
        UniqueId(*b)
    }

    pub fn as_bytes(&self) -> &[u8; 128] {
        &self.0
    }

    /// A fresh id for a root listening on `root`.
    pub(crate) fn new(root: SocketAddr, tag: u64) -> Self {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[ADDR_AT..ADDR_AT + SOCKADDR_LEN].copy_from_slice(&encode_sockaddr(&root));
        b[TAG_AT..TAG_AT + 8].copy_from_slice(&tag.to_le_bytes());
        let sum = fnv1a64(&b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
        UniqueId(b)
    }

    /// Checks that these bytes are an id made by `create_root` (of this
    /// protocol version) and were not altered on the way.
    pub fn validate(&self) -> Result<()> {
        self.root_addr().map(|_| ())
    }

    /// The communicator tag: random per id, so that sockets and messages of
    /// two communicators never mix.
    pub fn tag(&self) -> u64 {
        u64_at(&self.0, TAG_AT)
    }

    /// The root's address; fails exactly when [`validate`](Self::validate) does.
    pub(crate) fn root_addr(&self) -> Result<SocketAddr> {
        let b = &self.0;
        let bad = |what: String| -> Error {
            crate::error::err!(
                symmInvalidArgument,
                "corrupted or uninitialised unique id: {what}; pass the bytes from symmGetUniqueId unchanged to every rank"
            )
        };
        let magic = u64_at(b, 0);
        if magic != MAGIC {
            return Err(bad(format!("bad magic {magic:#018x} (expected {MAGIC:#018x})")));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().unwrap());
        if version != VERSION {
            return Err(bad(format!("protocol version {version}, this library speaks {VERSION}")));
        }
        let stored = u64_at(b, CHECKSUM_AT);
        let computed = fnv1a64(&b[..CHECKSUM_AT]);
        if stored != computed {
            return Err(bad(format!("checksum {stored:#018x} does not match the contents ({computed:#018x})")));
        }
        // The checksum already catches accidents; these catch ids made by a
        // buggy or foreign writer that computed a valid checksum.
        if b[RESERVED].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes 40..120 are not zero".into()));
        }
        match decode_sockaddr(&b[ADDR_AT..ADDR_AT + SOCKADDR_LEN]) {
            Some(addr) if addr.port() != 0 => Ok(addr),
            Some(_) => Err(bad("root port is 0".into())),
            None => Err(bad(format!(
                "root address family {} is not 4 or 6 (or the unused IP bytes are not zero)",
                u16::from_le_bytes([b[ADDR_AT], b[ADDR_AT + 1]])
            ))),
        }
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.root_addr() {
            Ok(addr) => write!(f, "UniqueId {{ root: {addr}, tag: {:#018x} }}", self.tag()),
            Err(_) => f.write_str("UniqueId(<invalid>)"),
        }
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The checksum: FNV-1a changes with any single byte, so every 1-bit
/// corruption is caught.
fn fnv1a64(bytes: &[u8]) -> u64 {
    crate::fnv::fnv1a64(bytes.iter().copied())
}

/// A random, non-zero u64 from the kernel (getrandom, then /dev/urandom).
pub(crate) fn random_u64() -> Result<u64> {
    let mut buf = [0u8; 8];
    loop {
        // SAFETY: buf is valid for 8 writable bytes.
        let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n == buf.len() as isize {
            break;
        }
        let e = std::io::Error::last_os_error();
        if n < 0 && e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        // Very old kernels lack getrandom(2).
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut buf))
            .map_err(|e| Error::from_io("bootstrap: cannot read random bytes", e))?;
        break;
    }
    let v = u64::from_le_bytes(buf);
    if v == 0 {
        bail!(symmSystemError, "bootstrap: the random source returned zero");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t;

    fn sample() -> UniqueId {
        UniqueId::new("127.0.0.1:4242".parse().unwrap(), 0x0123_4567_89ab_cdef)
    }

    #[test]
    fn round_trip_v4_and_v6() {
        let id = sample();
        id.validate().unwrap();
        assert_eq!(id.tag(), 0x0123_4567_89ab_cdef);
        assert_eq!(id.root_addr().unwrap(), "127.0.0.1:4242".parse().unwrap());
        assert_eq!(UniqueId::from_bytes(id.as_bytes()), id);
        assert_eq!(&id.as_bytes()[0..8], b"SYMMCOMM");

        let v6 = UniqueId::new("[::1]:9".parse().unwrap(), 7);
        v6.validate().unwrap();
        assert_eq!(v6.root_addr().unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(u16::from_le_bytes([v6.0[12], v6.0[13]]), 6);
        assert!(format!("{v6:?}").contains("[::1]:9"));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let id = sample();
        for byte in 0..128 {
            for bit in 0..8 {
                let mut b = *id.as_bytes();
                b[byte] ^= 1 << bit;
                let e = UniqueId::from_bytes(&b).validate().unwrap_err();
                assert_eq!(e.code, symmResult_t::symmInvalidArgument, "byte {byte} bit {bit}");
                assert!(e.msg.starts_with("corrupted or uninitialised unique id: "), "{}", e.msg);
            }
        }
    }

    #[test]
    fn zeroed_and_random_ids_are_rejected() {
        let e = UniqueId([0; 128]).validate().unwrap_err();
        assert_eq!(e.code, symmResult_t::symmInvalidArgument);
        assert!(e.msg.contains("bad magic"), "{}", e.msg);
        assert_eq!(format!("{:?}", UniqueId([0; 128])), "UniqueId(<invalid>)");
        for _ in 0..64 {
            let mut b = [0u8; 128];
            for chunk in b.chunks_mut(8) {
                chunk.copy_from_slice(&random_u64().unwrap().to_le_bytes());
            }
            assert_eq!(UniqueId(b).validate().unwrap_err().code, symmResult_t::symmInvalidArgument);
        }
    }

    #[test]
    fn well_formed_but_insane_fields_are_rejected() {
        // A writer that recomputes the checksum still cannot smuggle in a
        // bad family, port 0 or non-zero reserved bytes.
        let reseal = |mut b: [u8; 128]| {
            let sum = fnv1a64(&b[..CHECKSUM_AT]);
            b[CHECKSUM_AT..].copy_from_slice(&sum.to_le_bytes());
            UniqueId(b)
        };
        let mut b = sample().0;
        b[12] = 5;
        assert!(reseal(b).validate().unwrap_err().msg.contains("family 5"));
        let mut b = sample().0;
        b[14] = 0;
        b[15] = 0;
        assert!(reseal(b).validate().unwrap_err().msg.contains("port is 0"));
        let mut b = sample().0;
        b[77] = 1;
        assert!(reseal(b).validate().unwrap_err().msg.contains("reserved"));
        let mut b = sample().0;
        b[8] = 2;
        assert!(reseal(b).validate().unwrap_err().msg.contains("version 2"));
        let mut b = sample().0;
        b[25] = 1; // IPv4 with junk in the unused IP bytes
        assert!(reseal(b).validate().is_err());
    }

    #[test]
    fn fnv_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn random_tags_differ() {
        assert_ne!(random_u64().unwrap(), random_u64().unwrap());
    }
}
