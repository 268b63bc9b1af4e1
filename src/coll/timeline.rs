//! The per-phase timeline (SYMM_TIMELINE=1): synced collective kernels
//! stamp %globaltimer at each phase boundary, per block, into a device
//! buffer of the communicator (kernels/coll.cuh, Timeline); this turns the
//! last kernel's stamps into phase intervals.

use crate::comm::Comm;
use crate::cuda::abi::{TlEvent, COLL_MAX_BLOCKS, TL_EVENTS};
use crate::cuda::cu;
use crate::error::{bail, Result};

#[allow(non_camel_case_types)]
/// One phase of one block of the last synced collective kernel
/// (SYMM_TIMELINE=1; see symmCommGetTimeline).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct symmTimelineEvent_t {
    /// Block index in the kernel's grid.
    pub block: u32,
    /// 0 start, 1 copy-in, 2 sync, 3 reduce, 4 gather, 5 wait (per-chunk
    /// flags), 6 end (a zero-length last event).
    pub phase: u32,
    /// Round or chunk the phase belongs to.
    pub round: u32,
    pub reserved: u32,
    /// %globaltimer at the phase's start, in ns.
    pub start_ns: u64,
    /// Until the block's next event.
    pub duration_ns: u64,
}

/// The last kernel's phases, block by block, each lasting until the
/// block's next stamp; with `clear`, the record is emptied after (so that
/// a reader later sees nothing unless another synced kernel ran).
pub fn read(c: &Comm, clear: bool) -> Result<Vec<symmTimelineEvent_t>> {
    let Some(buf) = &c.coll.timeline else {
        bail!(symmInvalidUsage, "the timeline is off: run with SYMM_TIMELINE=1");
    };
    let mut raw = vec![TlEvent::default(); COLL_MAX_BLOCKS * (1 + TL_EVENTS)];
    {
        let _cur = c.device.make_current()?;
        // SAFETY: `raw` has exactly the buffer's size.
        cu!(cuMemcpyDtoH_v2(raw.as_mut_ptr().cast(), buf.ptr, std::mem::size_of_val(raw.as_slice())))?;
        if clear {
            cu!(cuMemsetD8_v2(buf.ptr, 0, buf.size))?;
            crate::cuda::buffer::wait_legacy_stream()?;
        }
    }
    Ok(intervals(&raw))
}

/// Phase intervals from the raw per-block records: [header, events...] per
/// block; block 0's header says how many blocks the last kernel had (the
/// blocks past it hold older kernels' stamps).
pub fn intervals(raw: &[TlEvent]) -> Vec<symmTimelineEvent_t> {
    let per = 1 + TL_EVENTS;
    let grid = raw.first().map_or(0, |h| h.arg as usize).min(COLL_MAX_BLOCKS);
    let mut out = Vec::new();
    for b in 0..grid {
        let rec = &raw[b * per..(b + 1) * per];
        let n = (rec[0].phase as usize).min(TL_EVENTS);
        let ev = &rec[1..=n];
        for (i, e) in ev.iter().enumerate() {
            let end = ev.get(i + 1).map_or(e.ns, |next| next.ns);
            out.push(symmTimelineEvent_t {
                block: b as u32,
                phase: e.phase,
                round: e.arg,
                reserved: 0,
                start_ns: e.ns,
                duration_ns: end.saturating_sub(e.ns),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_become_intervals() {
        let per = 1 + TL_EVENTS;
        let mut raw = vec![TlEvent::default(); COLL_MAX_BLOCKS * per];
        let ev = |phase, ns| TlEvent { phase, arg: 0, ns };
        // Block 0 of a 2-block kernel: start, sync, reduce, end.
        raw[0] = TlEvent { phase: 4, arg: 2, ns: 0 };
        raw[1..5].copy_from_slice(&[ev(0, 100), ev(2, 150), ev(3, 400), ev(6, 1000)]);
        // Block 1: start, end.
        raw[per] = TlEvent { phase: 2, arg: 2, ns: 0 };
        raw[per + 1..per + 3].copy_from_slice(&[ev(0, 110), ev(6, 990)]);
        // Block 2 holds an older kernel's stamps: ignored.
        raw[2 * per] = TlEvent { phase: 1, arg: 3, ns: 0 };
        raw[2 * per + 1] = ev(0, 5);
        let iv = intervals(&raw);
        let got: Vec<(u32, u32, u64)> = iv.iter().map(|e| (e.block, e.phase, e.duration_ns)).collect();
        assert_eq!(got, vec![(0, 0, 50), (0, 2, 250), (0, 3, 600), (0, 6, 0), (1, 0, 880), (1, 6, 0)]);
        assert!(intervals(&[]).is_empty());
    }
}
