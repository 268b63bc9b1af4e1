//! A host model of the pipelined collectives' flag protocol
//! (kernels/pipe.cuh, allreduce_pipe.cu, reduce_scatter_pipe.cu), run under
//! random interleavings of the ranks: no GPU needed to see a deadlock, or a
//! rank reading a slot that is not yet (or no longer) what it expects.
//!
//! One block per rank: block b of a pipelined kernel exchanges flags and
//! scratch only with block b of the peers, and its chunk counter is its own,
//! so blocks are independent models. Each kernel is written out below as
//! the kernels execute it, step for step; keep the two in step.
//!
//! What is checked:
//! - progress: some rank can always move until every rank ran every kernel;
//! - a read of a slot (or of a peer's direct input) finds the data of the
//!   chunk (call) it expects, published: not an older chunk still there,
//!   not a newer one that overwrote it, not one still being written;
//! - nothing overwrites a slot (or a user input, after its kernel) that a
//!   rank is still reading (reads end at the reader's next flag publish);
//! - after the last kernel every flag equals the block's counter (no flag
//!   trails it, which wrap-safe comparisons need).
//!
//! What it showed beyond the hang it reproduces: with the kernels' step
//! order, the same-chunk waits keep a block within about one chunk of its
//! peers, so for two or more slots the slot waits never bind (the model
//! passes without them), and with one slot they are what keeps it right.

use crate::cuda::abi::PIPE_SLOTS;

const IN_READY: usize = 0;
const REDUCED: usize = 1;
const GATHERED: usize = 2;

/// One pipelined kernel launch, the same on every rank.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kernel {
    /// All-reduce through input slots (plain or in-place input).
    AllReduceStaged(u32),
    /// All-reduce reading the peers' symmetric/registered inputs.
    AllReduceDirect(u32),
    /// Reduce-scatter of plain inputs.
    ReduceScatter(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    In(u32),
    Out(u32),
    /// The rank's user input (all-reduce of a direct input).
    User,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tag {
    /// Nothing any kernel may read: never written, or left behind by a
    /// kernel that ended (the stream's next work may overwrite it).
    Stale,
    Writing(u64),
    Ready(u64),
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Entry sync (block_sync): publish "entered kernel i", ...
    Enter,
    /// ... wait for every peer's; then read the block's chunk counter and
    /// expand the kernel's steps.
    Begin,
    Write(Region, u64),
    /// `__syncthreads` + release store to every peer: ends the rank's
    /// reads, publishes its writes.
    Publish(usize, u32),
    /// pipe_publish_all.
    PublishAll(u32),
    Wait(usize, u32),
    /// Every rank's `region` (own included) must hold `tag`, published.
    ReadAll(Region, u64),
    /// Counter := seq; the user may now rewrite the input.
    End(u32),
}

/// Data identities: kernel i's chunk k, and kernel i's user input.
fn chunk_tag(i: usize, k: u32) -> u64 {
    (i as u64) << 32 | k as u64
}
fn user_tag(i: usize) -> u64 {
    (i as u64) << 32 | 0xffff_ffff
}

fn seq_geq(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) as i32 >= 0
}

/// Which protocol the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proto {
    /// The kernels as they are: slot waits for the kernel's own chunks
    /// only (pipe_wait_slot), every kind of flag published before the exit
    /// wait (pipe_publish_all).
    Fixed,
    /// The kernels before: slot waits for every chunk, also those an
    /// earlier kernel numbered; no pipe_publish_all. (The GPU run's hang.)
    Before,
    /// No slot waits at all: for showing that the model catches a slot
    /// overwritten under a reader (with one slot).
    NoSlotWaits,
}

/// The steps of kernel `i` for a block whose counter reads `seq0`, with
/// `slots` slots per direction (SYMM_PIPE_SLOTS).
fn steps(kernel: Kernel, i: usize, seq0: u32, proto: Proto, slots: u32) -> Vec<Op> {
    let (publish_all, s) = (proto != Proto::Before, slots);
    let slot = |q: u32| q % s;
    // The slot wait for this kernel's chunk k (pipe_wait_slot).
    let slot_wait = |v: &mut Vec<Op>, kind: usize, k: u32, seq: u32| {
        if proto == Proto::Before || (proto == Proto::Fixed && k >= s) {
            v.push(Op::Wait(kind, seq));
        }
    };
    let mut v = Vec::new();
    match kernel {
        Kernel::AllReduceStaged(n) | Kernel::AllReduceDirect(n) => {
            let staged = matches!(kernel, Kernel::AllReduceStaged(_));
            if staged {
                v.push(Op::Write(Region::In(slot(seq0)), chunk_tag(i, 0)));
                v.push(Op::Publish(IN_READY, seq0.wrapping_add(1)));
            }
            for k in 0..n {
                let q = seq0.wrapping_add(k);
                if staged {
                    v.push(Op::Wait(IN_READY, q.wrapping_add(1)));
                }
                slot_wait(&mut v, GATHERED, k, q.wrapping_add(1).wrapping_sub(s));
                if staged {
                    v.push(Op::ReadAll(Region::In(slot(q)), chunk_tag(i, k)));
                } else {
                    v.push(Op::ReadAll(Region::User, user_tag(i)));
                }
                v.push(Op::Write(Region::Out(slot(q)), chunk_tag(i, k)));
                v.push(Op::Publish(REDUCED, q.wrapping_add(1)));
                if staged && k + 1 < n {
                    slot_wait(&mut v, REDUCED, k + 1, q.wrapping_add(2).wrapping_sub(s));
                    v.push(Op::Write(Region::In(slot(q.wrapping_add(1))), chunk_tag(i, k + 1)));
                    v.push(Op::Publish(IN_READY, q.wrapping_add(2)));
                }
                v.push(Op::Wait(REDUCED, q.wrapping_add(1)));
                v.push(Op::ReadAll(Region::Out(slot(q)), chunk_tag(i, k)));
                v.push(Op::Publish(GATHERED, q.wrapping_add(1)));
            }
            let end = seq0.wrapping_add(n);
            if publish_all {
                v.push(Op::PublishAll(end));
            }
            v.push(Op::Wait(GATHERED, end));
            v.push(Op::End(end));
        }
        Kernel::ReduceScatter(n) => {
            v.push(Op::Write(Region::In(slot(seq0)), chunk_tag(i, 0)));
            v.push(Op::Publish(IN_READY, seq0.wrapping_add(1)));
            for k in 0..n {
                let q = seq0.wrapping_add(k);
                v.push(Op::Wait(IN_READY, q.wrapping_add(1)));
                v.push(Op::ReadAll(Region::In(slot(q)), chunk_tag(i, k)));
                v.push(Op::Publish(REDUCED, q.wrapping_add(1)));
                if k + 1 < n {
                    slot_wait(&mut v, REDUCED, k + 1, q.wrapping_add(2).wrapping_sub(s));
                    v.push(Op::Write(Region::In(slot(q.wrapping_add(1))), chunk_tag(i, k + 1)));
                    v.push(Op::Publish(IN_READY, q.wrapping_add(2)));
                }
            }
            let end = seq0.wrapping_add(n);
            if publish_all {
                v.push(Op::PublishAll(end));
            }
            v.push(Op::Wait(REDUCED, end));
            v.push(Op::End(end));
        }
    }
    v
}

struct Rank {
    counter: u32,
    /// flags[kind][p]: what rank p published into this rank's pad.
    flags: [Vec<u32>; 3],
    entered: usize,
    kernel: usize,
    ops: Vec<Op>,
    pc: usize,
    ins: Vec<Tag>,
    outs: Vec<Tag>,
    user: Tag,
    /// Reads in progress: (owner rank, region).
    reading: Vec<(usize, Region)>,
}

impl Rank {
    fn tag(&mut self, r: Region) -> &mut Tag {
        match r {
            Region::In(s) => &mut self.ins[s as usize],
            Region::Out(s) => &mut self.outs[s as usize],
            Region::User => &mut self.user,
        }
    }
}

/// Run `kernels` on `n` ranks whose counters and flags start at `start`,
/// scheduling by `seed`. Err describes the first violation.
pub(crate) fn run(n: usize, kernels: &[Kernel], start: u32, seed: u64, proto: Proto, slots: u32) -> Result<(), String> {
    let mut ranks: Vec<Rank> = (0..n)
        .map(|_| Rank {
            counter: start,
            flags: std::array::from_fn(|_| vec![start; n]),
            entered: 0,
            kernel: 0,
            ops: vec![Op::Enter, Op::Begin],
            pc: 0,
            ins: vec![Tag::Stale; slots as usize],
            outs: vec![Tag::Stale; slots as usize],
            user: Tag::Ready(user_tag(0)),
            reading: Vec::new(),
        })
        .collect();
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut last = 0usize;
    loop {
        let live: Vec<usize> = (0..n).filter(|&r| ranks[r].kernel < kernels.len()).collect();
        if live.is_empty() {
            break;
        }
        let ready: Vec<usize> = live.iter().copied().filter(|&r| can_step(&ranks, r)).collect();
        if ready.is_empty() {
            let at: Vec<String> = live
                .iter()
                .map(|&r| format!("rank {r} in kernel {} at {:?}", ranks[r].kernel, ranks[r].ops[ranks[r].pc]))
                .collect();
            return Err(format!("deadlock: {}", at.join("; ")));
        }
        // Often keep running the same rank, so that one runs ahead.
        let r = if ready.contains(&last) && next() % 4 != 0 { last } else { ready[(next() % ready.len() as u64) as usize] };
        last = r;
        step(&mut ranks, r, kernels, proto, slots)?;
    }
    for (r, rank) in ranks.iter().enumerate().filter(|_| proto != Proto::Before) {
        for kind in 0..3 {
            for p in (0..n).filter(|&p| p != r) {
                if rank.flags[kind][p] != ranks[p].counter {
                    return Err(format!(
                        "after the last kernel rank {r}'s flag {kind} from rank {p} is {} but the counter is {}",
                        rank.flags[kind][p], ranks[p].counter
                    ));
                }
            }
        }
    }
    Ok(())
}

fn can_step(ranks: &[Rank], r: usize) -> bool {
    let me = &ranks[r];
    match me.ops[me.pc] {
        Op::Begin => ranks.iter().all(|p| p.entered > me.kernel),
        Op::Wait(kind, seq) => (0..ranks.len()).filter(|&p| p != r).all(|p| seq_geq(me.flags[kind][p], seq)),
        _ => true,
    }
}

fn step(ranks: &mut [Rank], r: usize, kernels: &[Kernel], proto: Proto, slots: u32) -> Result<(), String> {
    let n = ranks.len();
    let i = ranks[r].kernel;
    let op = ranks[r].ops[ranks[r].pc];
    ranks[r].pc += 1;
    let who = format!("rank {r}, kernel {i} ({:?})", kernels[i]);
    match op {
        Op::Enter => ranks[r].entered = i + 1,
        Op::Begin => {
            let seq0 = ranks[r].counter;
            let body = steps(kernels[i], i, seq0, proto, slots);
            ranks[r].ops.extend(body);
        }
        Op::Write(region, tag) => {
            if let Some(p) = ranks.iter().position(|p| p.reading.contains(&(r, region))) {
                return Err(format!("{who}: overwrites its {region:?} while rank {p} still reads it"));
            }
            *ranks[r].tag(region) = Tag::Writing(tag);
        }
        Op::Publish(kind, seq) => {
            publish(ranks, r);
            for p in (0..n).filter(|&p| p != r) {
                ranks[p].flags[kind][r] = seq;
            }
        }
        Op::PublishAll(seq) => {
            publish(ranks, r);
            for p in (0..n).filter(|&p| p != r) {
                for kind in 0..3 {
                    ranks[p].flags[kind][r] = seq;
                }
            }
        }
        Op::Wait(..) => {}
        Op::ReadAll(region, tag) => {
            for p in 0..n {
                let found = *ranks[p].tag(region);
                if found != Tag::Ready(tag) {
                    return Err(format!("{who}: reads rank {p}'s {region:?} expecting {tag:#x}, finds {found:x?}"));
                }
                ranks[r].reading.push((p, region));
            }
        }
        Op::End(seq) => {
            // Once the kernel ended, the stream moves on: the user may
            // rewrite the input, and the next kernel, of any kind, may
            // write scratch before it syncs with anyone (the staged
            // kernels' first copy-in), so nothing of this rank's may still
            // be read, or be read later, as this kernel's.
            publish(ranks, r);
            for (p, reader) in ranks.iter().enumerate() {
                if let Some((_, region)) = reader.reading.iter().find(|(owner, _)| *owner == r) {
                    return Err(format!("{who}: ends while rank {p} still reads its {region:?}"));
                }
            }
            let me = &mut ranks[r];
            for t in me.ins.iter_mut().chain(me.outs.iter_mut()) {
                *t = Tag::Stale;
            }
            me.counter = seq;
            me.kernel += 1;
            me.user = Tag::Ready(user_tag(me.kernel));
            me.ops = vec![Op::Enter, Op::Begin];
            me.pc = 0;
        }
    }
    Ok(())
}

/// A publish (or the kernel's end): the rank's reads are over, its writes
/// visible.
fn publish(ranks: &mut [Rank], r: usize) {
    let me = &mut ranks[r];
    me.reading.clear();
    for t in me.ins.iter_mut().chain(me.outs.iter_mut()) {
        if let Tag::Writing(x) = *t {
            *t = Tag::Ready(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kernel::*;

    const SLOTS: u32 = PIPE_SLOTS as u32;

    /// Every sequence of three kernels (two kinds alternating), at chunk
    /// counts around the slot count, on 2 to 4 ranks, from a fresh pad and
    /// from counters about to wrap.
    fn check_all(slots: u32, seeds: u64) {
        let counts = [1u32, 2, 3, 4, 5, 9, 17];
        let make = |c: u32, k: usize| [AllReduceStaged(c), AllReduceDirect(c), ReduceScatter(c)][k];
        let mut seqs: Vec<Vec<Kernel>> = Vec::new();
        for a in 0..3 {
            for b in 0..3 {
                for &ca in &counts {
                    for &cb in &counts {
                        seqs.push(vec![make(ca, a), make(cb, b), make(ca, a)]);
                    }
                }
            }
        }
        // Tier P's order: reduce-scatters of many chunks, then all-reduces.
        seqs.push(vec![ReduceScatter(3), ReduceScatter(3), AllReduceStaged(17), ReduceScatter(33), AllReduceDirect(17)]);
        for (si, kernels) in seqs.iter().enumerate() {
            for n in 2..=4 {
                for start in [0u32, u32::MAX - 6] {
                    for seed in 0..seeds {
                        let seed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) + si as u64 + 1;
                        if let Err(e) = run(n, kernels, start, seed, Proto::Fixed, slots) {
                            panic!("{slots} slots, {kernels:?} on {n} ranks from {start:#x}, seed {seed:#x}: {e}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pipelines_never_hang_nor_race() {
        check_all(SLOTS, 4);
    }

    /// The protocol does not lean on the slot count: one slot works too
    /// (its slot waits then bind), and without them the model sees a slot
    /// overwritten under its reader.
    #[test]
    fn the_model_sees_a_slot_overwritten_under_its_reader() {
        check_all(1, 1);
        let e = run(2, &[AllReduceStaged(4)], 0, 2, Proto::NoSlotWaits, 1).unwrap_err();
        assert!(e.contains("reads rank") || e.contains("overwrites"), "{e}");
    }

    /// The hang of the first GPU run: before the fix, an all-reduce after
    /// reduce-scatters of S or more chunks waited for GATHERED flags of
    /// chunks that no peer gathers (reduce-scatter publishes none).
    #[test]
    fn the_protocol_before_the_fix_hangs_after_a_reduce_scatter() {
        let tier_p = [ReduceScatter(5), AllReduceStaged(17)];
        let e = run(2, &tier_p, 0, 1, Proto::Before, SLOTS).unwrap_err();
        assert!(e.contains("deadlock") && e.contains("Wait(2"), "{e}");
        // ... while all-reduces alone ran (as in tier Q's all-reduce part).
        let all_reduces = [AllReduceStaged(17), AllReduceDirect(9), AllReduceStaged(5)];
        assert_eq!(run(2, &all_reduces, 0, 1, Proto::Before, SLOTS), Ok(()));
        assert_eq!(run(2, &tier_p, 0, 1, Proto::Fixed, SLOTS), Ok(()));
    }
}
