//! What a kernel's recorded error means, in words: the status block that
//! kernels fill on a timeout, an abort or a mismatch (kernels/coll.cuh,
//! kernels/sendrecv.cu) becomes the message `symmCommGetAsyncError` gives,
//! naming the call, the peer and what to fix.

use crate::cuda::abi::{self, OpId, Status};
use crate::error::{err, Error};

/// The error a kernel recorded in the status block (`s.error` is not
/// `DEV_OK`), as `symmCommGetAsyncError` reports it.
pub(super) fn status_error(s: &Status, timeout_ns: u64) -> Error {
    if s.op == OpId::Device as u32 {
        return abi::device_status_error(s, timeout_ns);
    }
    let op = OpId::from_raw(s.op).unwrap_or(OpId::None).name();
    let waited = s.waited_ns as f64 / 1e9;
    match s.error {
        abi::DEV_TIMEOUT => err!(
            symmTimeout,
            "rank {}: {op} timed out after {waited:.1} s waiting for rank {} (SYMM_TIMEOUT={:.1} s; wait detail {:#x}, \
             the kernel's code for which wait){}; the communicator is unusable, abort it",
            s.rank, s.peer, timeout_ns as f64 / 1e9, s.detail, mismatch_hint(s.op)
        ),
        abi::DEV_ABORTED => err!(symmRemoteError, "rank {}: {op} stopped because the communicator was aborted", s.rank),
        abi::DEV_MISMATCH => mismatch_error(s),
        k => err!(symmInternalError, "unknown device error kind {k}"),
    }
}

/// Describe a call descriptor recorded by a kernel (kernels/coll.cuh).
fn describe_call(d: &[u32; abi::DESC_WORDS]) -> String {
    use crate::cuda::abi::CollId;
    if let Some(name) = fused_op_name(d[0] >> 24) {
        // src/fused: op << 24 | aType << 16 | cType << 8 | bType << 2 | transB;
        // mShard; a hash of the other shapes, layouts and chunks.
        let t = |v: u32| crate::types::symmDataType_t::from_raw(v as i32).map_or_else(|| format!("type {v}"), |t| format!("{t:?}"));
        return format!(
            "{name}(mShard={}, aType {}, bType {}, cType {}, transB={}, n/k/ld/chunks hash {:#010x})",
            d[1], t((d[0] >> 16) & 0xff), t((d[0] >> 2) & 0x3f), t((d[0] >> 8) & 0xff), d[0] & 1, d[2]
        );
    }
    let coll = CollId::from_raw(d[0] >> 24);
    let count = (d[1] as u64) | ((d[2] >> 16) as u64) << 32;
    let dtype = crate::types::symmDataType_t::from_raw(((d[2] >> 8) & 0xff) as i32)
        .map_or_else(|| format!("datatype {}", (d[2] >> 8) & 0xff), |t| format!("{t:?}"));
    let mut s = format!("{}(count={count}, {dtype}", coll.map_or("?", |c| c.name()));
    if matches!(coll, Some(CollId::AllReduce | CollId::ReduceScatter | CollId::Reduce)) {
        let op = crate::types::symmRedOp_t::from_raw((d[2] & 0xff) as i32);
        s += &op.map_or_else(|| format!(", op {}", d[2] & 0xff), |o| format!(", {o:?}"));
    }
    if matches!(coll, Some(CollId::Broadcast | CollId::Reduce)) {
        s += &format!(", root={}", d[0] & 0xffff);
    }
    s + ")"
}

/// The fused matmul ops' descriptor ids (src/fused writes them; this
/// module only names them, to stay below it).
fn fused_op_name(id: u32) -> Option<&'static str> {
    match id {
        abi::DESC_ALLGATHER_MATMUL => Some("symmAllGatherMatmul"),
        abi::DESC_MATMUL_REDUCE_SCATTER => Some("symmMatmulReduceScatter"),
        _ => None,
    }
}

/// The kernel protocol in a descriptor (bits 16-23 of word 0, abi::desc_protocol).
fn protocol_name(d: &[u32; abi::DESC_WORDS]) -> &'static str {
    use abi::{desc_protocol, MODE_PIPE, MODE_PUSH, MODE_TWO_SHOT, MODE_WRITE};
    const ONE_SHOT: u32 = desc_protocol(0);
    const TWO_SHOT: u32 = desc_protocol(MODE_TWO_SHOT);
    const PUSH: u32 = desc_protocol(MODE_TWO_SHOT | MODE_PUSH);
    const PIPE_TWO_SHOT: u32 = desc_protocol(MODE_TWO_SHOT | MODE_PIPE);
    const PIPE: u32 = desc_protocol(MODE_PIPE);
    const WRITE: u32 = desc_protocol(MODE_WRITE);
    match (d[0] >> 16) & 0xff {
        ONE_SHOT => "the one-shot kernel",
        TWO_SHOT => "the two-shot kernel",
        PUSH => "the two-shot push kernel",
        PIPE_TWO_SHOT => "the pipelined two-shot kernel",
        PIPE => "the pipelined kernel",
        WRITE => "the write-only two-shot kernel",
        _ => "an unknown kernel",
    }
}

/// What a collective's timeout may mean besides a dead or stalled peer.
/// The LL packets and the point-to-point engine do not compare the ranks'
/// calls (only SYMM_CHECK's synced kernels do), so ranks that disagree on
/// a count, a peer or a buffer class (symmetric on one rank, plain on
/// another: a different algorithm) wait for data that never comes.
fn mismatch_hint(op: u32) -> &'static str {
    if op == OpId::Collective as u32 {
        "; if that rank is alive and calling, the ranks' calls may differ (count, datatype, a send without its \
         receive, a buffer symmetric on one rank and plain on another): SYMM_CHECK=1 compares collectives' calls"
    } else if op == OpId::SendRecv as u32 {
        "; if that rank is alive, its matching symmRecv or symmSend may be missing, name another peer, or come \
         after a call that waits for this one"
    } else {
        ""
    }
}

fn mismatch_error(s: &Status) -> Error {
    let wide = |w: &[u32; 4]| w[1] as u64 | (w[2] as u64) << 32;
    if s.mine[0] == abi::A2AV_TAG {
        let (api, counts) = match s.mine[3] >> abi::A2AV_FORM_SHIFT {
            abi::A2AV_FORM_2D => ("symmAllToAllvDevice2d", "send counts are negative or run past the end of its sendbuff"),
            abi::A2AV_FORM_2D_OFFSET => (
                "symmAllToAllvDevice2dOffset",
                "inSplitsOffsets hold a negative count or offset, or a block past the end of its sendbuff",
            ),
            _ => ("symmAllToAllvDevice", "send counts are negative or run past the end of its sendbuff"),
        };
        let padding = if s.mine[3] >> abi::A2AV_FORM_SHIFT == abi::A2AV_FORM_2D { " (with the majorAlign padding)" } else { "" };
        return if s.mine[3] & 0xff == 2 {
            err!(
                symmInvalidUsage,
                "rank {}: {api} would receive {} rows{padding}, but recvCapacity is {} (rows of rowElems elements); nothing was moved",
                s.rank,
                wide(&s.mine),
                wide(&s.theirs)
            )
        } else {
            err!(symmInvalidUsage, "rank {}: {api}: rank {}'s {counts}; nothing was moved", s.rank, wide(&s.mine))
        };
    }
    if s.mine[0] == abi::P2P_SIZE_TAG {
        // mine[3]: 0 recorded by the sender, 1 by the receiver (told by
        // its sender: kernels/sendrecv.cu, NACK).
        let (does, to, other_does, moved, other_side) = if s.mine[3] == 0 {
            ("sends", "to", "receives", "sent", "receive")
        } else {
            ("receives", "from", "sends", "received", "send")
        };
        return err!(
            symmInvalidUsage,
            "rank {} {does} {} bytes {to} rank {}, which {other_does} {} bytes: a send and its receive must have the \
             same size (nothing was {moved}; the {other_side} fails too)",
            s.rank,
            wide(&s.mine),
            s.peer,
            wide(&s.theirs),
        );
    }
    // Blame the kernel only when the calls are otherwise the same: ranks that
    // called different collectives (or counts, types) often pick different
    // kernels too, and then the call is what the user must fix.
    let same_call = (s.mine[0] ^ s.theirs[0]) & !0x00ff_0000 == 0 && s.mine[1..3] == s.theirs[1..3];
    if same_call && fused_op_name(s.mine[0] >> 24).is_none() && (s.mine[0] ^ s.theirs[0]) & 0x00ff_0000 != 0 {
        return err!(
            symmInvalidUsage,
            "rank {} and rank {} disagree on the kernel of {}: this rank ran {}, rank {} ran {}; set SYMM_ALGO (or \
             symmCommSetAlgorithm) the same on every rank, and pass buffers of the same classes (symmetric/registered \
             or plain) for sendbuff and for recvbuff on every rank",
            s.rank,
            s.peer,
            abi::CollId::from_raw(s.mine[0] >> 24).map_or("the collective", |c| c.name()),
            protocol_name(&s.mine),
            s.peer,
            protocol_name(&s.theirs),
        );
    }
    if s.mine[..3] == s.theirs[..3] {
        let input = |token: u32| if token == 0 { "an ordinary buffer" } else { "a symmetric/registered buffer" };
        let theirs = if s.mine[3] != 0 && s.theirs[3] != 0 {
            "a different symmetric/registered buffer or offset"
        } else {
            input(s.theirs[3])
        };
        let coll = abi::CollId::from_raw(s.mine[0] >> 24);
        let rows = if coll == Some(abi::CollId::AllToAll) {
            " (the device-count all-to-alls also need the same rowElems on every rank)"
        } else {
            ""
        };
        return err!(
            symmInvalidUsage,
            "rank {} and rank {} disagree on where {} reads its input: this rank passed {}, rank {} passed {}; \
             pass symmetric or registered buffers at the same offset on every rank, or ordinary buffers on every \
             rank{rows}",
            s.rank,
            s.peer,
            coll.map(|c| c.name()).or(fused_op_name(s.mine[0] >> 24)).unwrap_or("the collective"),
            input(s.mine[3]),
            s.peer,
            theirs,
        );
    }
    err!(
        symmInvalidUsage,
        "collective mismatch (SYMM_CHECK): rank {} called {} but rank {} called {}",
        s.rank,
        describe_call(&s.mine),
        s.peer,
        describe_call(&s.theirs)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t;

    #[test]
    fn protocol_names_follow_the_kernels_encoding() {
        // kernels/coll.cuh: desc[0] bits 16-23 = (mode & SYMM_COLL_PROTO_BITS) >> 2.
        let name = |proto: u32| protocol_name(&[proto << 16, 0, 0, 0]);
        assert_eq!(name(1), "the two-shot kernel");
        assert_eq!(name(17), "the two-shot push kernel");
        assert_eq!(name(33), "the pipelined two-shot kernel");
        assert_eq!(name(32), "the pipelined kernel");
        assert_eq!(name(49), "the write-only two-shot kernel");
        assert_eq!(name(0), "the one-shot kernel");
    }

    #[test]
    fn mismatch_blames_the_kernel_only_for_the_same_call() {
        let status = |mine: [u32; 4], theirs: [u32; 4]| Status { rank: 1, peer: 0, mine, theirs, ..Default::default() };
        // All-reduce (id 1) of 1024 int32, sum: two-shot (1) against pipelined two-shot (33).
        let call = |proto: u32, dtype: u32| [1 << 24 | proto << 16, 1024, dtype << 8, 0];
        let e = mismatch_error(&status(call(1, 2), call(33, 2)));
        assert!(e.msg.contains("disagree on the kernel"), "{}", e.msg);
        // Different datatypes that also picked different kernels: the call is named.
        let e = mismatch_error(&status(call(1, 2), call(33, 7)));
        assert!(e.msg.contains("collective mismatch"), "{}", e.msg);
        // The same call with different input tokens: an all-to-all (id 6)
        // names rowElems too (the device-count forms fold it into the token).
        let a2a = |token: u32| [6 << 24, 0, 2 << 8, token];
        let e = mismatch_error(&status(a2a(0x11), a2a(0x23)));
        assert!(e.msg.contains("disagree on where") && e.msg.contains("same rowElems"), "{}", e.msg);
        let e = mismatch_error(&status([1 << 24, 1024, 2 << 8, 0x11], [1 << 24, 1024, 2 << 8, 0x23]));
        assert!(e.msg.contains("disagree on where") && !e.msg.contains("rowElems"), "{}", e.msg);
    }

    #[test]
    fn size_mismatch_names_both_sides_from_either_end() {
        let bytes = |b: u64, role: u32| [abi::P2P_SIZE_TAG, b as u32, (b >> 32) as u32, role];
        let sender = Status { rank: 0, peer: 1, mine: bytes(2 << 20, 0), theirs: bytes(1 << 20, 1), ..Default::default() };
        let e = mismatch_error(&sender);
        assert!(e.msg.contains("rank 0 sends 2097152 bytes to rank 1, which receives 1048576 bytes"), "{}", e.msg);
        assert!(e.msg.contains("same size") && e.msg.contains("nothing was sent"), "{}", e.msg);
        let receiver = Status { rank: 1, peer: 0, mine: bytes(1 << 20, 1), theirs: bytes(5 << 32, 0), ..Default::default() };
        let e = mismatch_error(&receiver);
        assert!(e.msg.contains("rank 1 receives 1048576 bytes from rank 0, which sends 21474836480 bytes"), "{}", e.msg);
        assert!(e.msg.contains("nothing was received; the send fails too"), "{}", e.msg);
    }

    #[test]
    fn timeouts_name_send_recv_and_hint_at_its_pairing() {
        assert_eq!(OpId::from_raw(OpId::SendRecv as u32), Some(OpId::SendRecv));
        assert_eq!(OpId::from_raw(OpId::Device as u32), Some(OpId::Device));
        assert_eq!(OpId::SendRecv.name(), "symmSend/symmRecv");
        assert!(mismatch_hint(OpId::SendRecv as u32).contains("matching symmRecv or symmSend"));
        assert!(mismatch_hint(OpId::Collective as u32).contains("SYMM_CHECK=1"));
        assert_eq!(mismatch_hint(OpId::Barrier as u32), "");
    }

    #[test]
    fn all_to_all_v_errors_name_their_form() {
        let a2av = |how: u32, mine: u64, cap: u64| Status {
            rank: 3,
            mine: [abi::A2AV_TAG, mine as u32, (mine >> 32) as u32, how],
            theirs: [abi::A2AV_TAG, cap as u32, (cap >> 32) as u32, how],
            ..Status::default()
        };
        let shift = abi::A2AV_FORM_SHIFT;
        let e = mismatch_error(&a2av(2, 5 << 32, 7));
        assert_eq!(e.code, symmResult_t::symmInvalidUsage);
        assert!(e.msg.contains("rank 3: symmAllToAllvDevice would receive 21474836480 rows, but recvCapacity is 7 (rows of rowElems elements)"), "{}", e.msg);
        let e = mismatch_error(&a2av(2 | abi::A2AV_FORM_2D << shift, 40, 39));
        assert!(e.msg.contains("symmAllToAllvDevice2d would receive 40 rows (with the majorAlign padding)"), "{}", e.msg);
        let e = mismatch_error(&a2av(1 | abi::A2AV_FORM_2D << shift, 1, 0));
        assert!(e.msg.contains("symmAllToAllvDevice2d: rank 1's send counts are negative"), "{}", e.msg);
        let e = mismatch_error(&a2av(1 | abi::A2AV_FORM_2D_OFFSET << shift, 0, 0));
        assert!(e.msg.contains("symmAllToAllvDevice2dOffset: rank 0's inSplitsOffsets hold a negative"), "{}", e.msg);
        let e = mismatch_error(&a2av(2 | abi::A2AV_FORM_2D_OFFSET << shift, 9, 8));
        assert!(e.msg.contains("symmAllToAllvDevice2dOffset would receive 9 rows, but"), "{}", e.msg);
    }
}
