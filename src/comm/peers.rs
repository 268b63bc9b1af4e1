//! What the ranks tell each other at init, and the checks run on it: each
//! rank's host, process, GPU and set-up outcome, exchanged over the
//! bootstrap, so that every rank reaches the same verdict on the group.

use std::sync::Arc;

use crate::bootstrap::Bootstrap;
use crate::config;
use crate::cuda::device::{self, Device};
use crate::error::{bail, err, symmResult_t, Error, Result};

/// What every rank tells the others at init.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Same value on every process of one host (hostname + boot id).
    pub host_hash: u64,
    pub pid: u32,
    /// CUDA ordinal in the rank's own process (-1 if its set-up failed).
    pub device: i32,
    /// PCI bus id of the rank's GPU ("" if its set-up failed).
    pub pci_bus_id: String,
    /// Multiprocessors of the rank's GPU (0 if its set-up failed).
    pub sm_count: u32,
    /// The rank's local set-up outcome: `symmSuccess` or its error.
    pub status: symmResult_t,
    pub status_msg: String,
}

/// Open the GPUs of other ranks that live in this process (threads calling
/// symmCommInitRank) and enable peer access to them, so their cudaMalloc
/// buffers can be registered without IPC (which refuses same-process use).
pub(super) fn open_same_process_peers(peers: &[PeerInfo], rank: usize, dev: &Arc<Device>) -> Result<Vec<Arc<Device>>> {
    let mut out = Vec::new();
    for (r, p) in peers.iter().enumerate() {
        if r == rank || p.pid != peers[rank].pid || p.pci_bus_id == dev.pci_bus_id {
            continue;
        }
        if let Some(ord) = device::ordinal_by_pci_bus_id(&p.pci_bus_id)? {
            let other = Device::open(ord)?;
            device::enable_peer_access(dev, &other)?;
            out.push(other);
        }
    }
    Ok(out)
}

impl PeerInfo {
    pub(super) fn local(device: std::result::Result<&Arc<Device>, &Error>) -> PeerInfo {
        let (dev, bus, sms, status, msg) = match device {
            Ok(d) => (d.ordinal, d.pci_bus_id.clone(), d.sm_count as u32, symmResult_t::symmSuccess, String::new()),
            Err(e) => (-1, String::new(), 0, e.code, e.msg.clone()),
        };
        PeerInfo {
            host_hash: host_hash(),
            pid: std::process::id(),
            device: dev,
            pci_bus_id: bus,
            sm_count: sms,
            status,
            status_msg: msg,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.host_hash.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.device.to_le_bytes());
        b.extend_from_slice(&self.sm_count.to_le_bytes());
        b.extend_from_slice(&(self.status as i32).to_le_bytes());
        put_str(&mut b, &self.pci_bus_id);
        put_str(&mut b, &self.status_msg);
        b
    }

    fn decode(b: &[u8]) -> Result<PeerInfo> {
        let mut r = Reader(b);
        let host_hash = u64::from_le_bytes(r.take()?);
        let pid = u32::from_le_bytes(r.take()?);
        let device = i32::from_le_bytes(r.take()?);
        let sm_count = u32::from_le_bytes(r.take()?);
        let status = symmResult_t::from_raw(i32::from_le_bytes(r.take()?))
            .ok_or_else(|| err!(symmInternalError, "bad status in peer info"))?;
        let pci_bus_id = r.string()?;
        let status_msg = r.string()?;
        Ok(PeerInfo { host_hash, pid, device, pci_bus_id, sm_count, status, status_msg })
    }
}

/// All-gather every rank's `PeerInfo`.
pub(super) fn exchange(boot: &Bootstrap, me: &PeerInfo) -> Result<Vec<PeerInfo>> {
    boot.allgather(&me.encode())?.iter().map(|b| PeerInfo::decode(b)).collect()
}

/// Fail on every rank if any rank's local set-up failed: this rank's own
/// error first, else a remote error naming the first rank that failed.
pub(super) fn agree_on_status(peers: &[PeerInfo], rank: usize, local: Result<Arc<Device>>) -> Result<Arc<Device>> {
    let device = local?;
    if let Some((r, p)) = peers.iter().enumerate().find(|(_, p)| p.status != symmResult_t::symmSuccess) {
        bail!(symmRemoteError, "rank {r} (pid {}) failed to set up its GPU ({:?}): {}", p.pid, p.status, p.status_msg);
    }
    debug_assert_eq!(peers[rank].device, device.ordinal);
    Ok(device)
}

/// Group-wide rules every rank evaluates identically from the same table.
pub(super) fn check_group(peers: &[PeerInfo]) -> Result<()> {
    for (r, p) in peers.iter().enumerate() {
        if p.host_hash != peers[0].host_hash {
            bail!(symmNotSupported, "rank {r} is on another host than rank 0; symmcomm only connects GPUs of one node");
        }
        if config::get().test_shared_devices {
            continue;
        }
        if let Some(q) = peers[..r].iter().position(|q| q.pci_bus_id == p.pci_bus_id) {
            bail!(
                symmInvalidUsage,
                "ranks {q} and {r} both use the GPU at PCI {} (device {} in pid {}); each rank needs its own GPU",
                p.pci_bus_id, p.device, p.pid
            );
        }
    }
    Ok(())
}

/// Peer access and native atomics between this rank's GPU and every other.
pub(super) fn check_my_pairs(peers: &[PeerInfo], rank: usize, dev: &Device) -> Result<()> {
    for (r, p) in peers.iter().enumerate() {
        if r == rank || p.pci_bus_id == dev.pci_bus_id {
            continue;
        }
        match device::ordinal_by_pci_bus_id(&p.pci_bus_id)? {
            Some(theirs) => device::check_peer_pair(dev.handle, theirs).map_err(|e| {
                e.context(format!(
                    "rank {rank} (device {}, PCI {}) and rank {r} (PCI {})",
                    dev.ordinal, dev.pci_bus_id, p.pci_bus_id
                ))
            })?,
            None => log::warn!(
                target: "symmcomm::init",
                "rank {r}'s GPU (PCI {}) is not visible to rank {rank}'s process (CUDA_VISIBLE_DEVICES?); \
                 peer access to it cannot be verified in advance",
                p.pci_bus_id
            ),
        }
    }
    Ok(())
}

pub(super) fn pair_error(e: Error, a: &Device, b: &Device) -> Error {
    e.context(format!("devices {} (PCI {}) and {} (PCI {})", a.ordinal, a.pci_bus_id, b.ordinal, b.pci_bus_id))
}

pub(super) fn encode_status(e: Option<Error>) -> Vec<u8> {
    match e {
        None => vec![],
        Some(e) => {
            let mut b = (e.code as i32).to_le_bytes().to_vec();
            put_str(&mut b, &e.msg);
            b
        }
    }
}

pub(super) fn decode_status(b: &[u8]) -> Result<Option<Error>> {
    if b.is_empty() {
        return Ok(None);
    }
    let mut r = Reader(b);
    let code = symmResult_t::from_raw(i32::from_le_bytes(r.take()?)).unwrap_or(symmResult_t::symmInternalError);
    Ok(Some(Error::new(code, r.string()?)))
}

/// Same on every process of one host: hostname plus the kernel's boot id.
pub fn host_hash() -> u64 {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) };
    let boot_id = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    crate::fnv::fnv1a64(name.iter().copied().take_while(|&c| c != 0).chain(boot_id))
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// Minimal reader for the little-endian records above.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        if self.0.len() < N {
            bail!(symmInternalError, "truncated peer record");
        }
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(head.try_into().expect("split_at gave N bytes"))
    }

    fn string(&mut self) -> Result<String> {
        let n = u32::from_le_bytes(self.take()?) as usize;
        if self.0.len() < n {
            bail!(symmInternalError, "truncated peer record");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(String::from_utf8_lossy(head).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_info_round_trip() {
        let p = PeerInfo {
            host_hash: 42,
            pid: 7,
            device: 1,
            pci_bus_id: "0000:18:00.0".into(),
            sm_count: 132,
            status: symmResult_t::symmUnhandledCudaError,
            status_msg: "no driver".into(),
        };
        assert_eq!(PeerInfo::decode(&p.encode()).unwrap(), p);
        assert!(PeerInfo::decode(&p.encode()[..10]).is_err());
    }

    #[test]
    fn status_round_trip() {
        assert_eq!(decode_status(&encode_status(None)).unwrap(), None);
        let e = Error::new(symmResult_t::symmNotSupported, "no atomics");
        assert_eq!(decode_status(&encode_status(Some(e.clone()))).unwrap(), Some(e));
    }

    #[test]
    fn group_rules() {
        let p = |bus: &str, host| PeerInfo {
            host_hash: host,
            pid: 1,
            device: 0,
            pci_bus_id: bus.into(),
            sm_count: 132,
            status: symmResult_t::symmSuccess,
            status_msg: String::new(),
        };
        assert!(check_group(&[p("a", 1), p("b", 1)]).is_ok());
        let e = check_group(&[p("a", 1), p("b", 2)]).unwrap_err();
        assert_eq!(e.code, symmResult_t::symmNotSupported);
        if !config::get().test_shared_devices {
            let e = check_group(&[p("a", 1), p("a", 1)]).unwrap_err();
            assert_eq!(e.code, symmResult_t::symmInvalidUsage);
            assert!(e.msg.contains("ranks 0 and 1"), "{}", e.msg);
        }
    }

    #[test]
    fn host_hash_is_stable() {
        assert_eq!(host_hash(), host_hash());
    }
}
