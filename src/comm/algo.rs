//! The algorithm choice of `SYMM_ALGO` and symmCommSetAlgorithm: a base
//! (LL packets, one- or two-shot all-reduce), the opt-in kernels, and the
//! sized send/recv kernel's shape (p2p_shape.rs), parsed from tokens, packed into one word
//! per communicator (a cell the setter replaces at run time), and printed
//! back. What `auto` means per rank count lives with the collectives
//! (src/coll/mod.rs).

pub use super::p2p_shape::P2PShape;

/// The base choice of `SYMM_ALGO`: LL packets and the all-reduce algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// LL packets for small messages, then by size and rank count.
    Auto,
    /// LL packets wherever the message fits the LL slots (and, from 3
    /// ranks, the two-shot LL forms of the all-reduce and of the fused
    /// all-reduce + RMSNorm).
    Ll,
    /// All-reduce one-shot, no LL anywhere.
    OneShot,
    /// All-reduce two-shot, no LL anywhere.
    TwoShot,
}

/// `SYMM_ALGO` (or symmCommSetAlgorithm): a base choice plus opt-in
/// kernels, written as tokens joined by `+` or `,` (e.g. `twoshot+push`).
/// Every rank of a communicator must choose the same; the kernels compare
/// the protocol at their first sync and fail on a mismatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Algo {
    pub base: Base,
    /// `push`: two-shot all-reduce with symmetric/registered send and recv
    /// reduces its slice from the peers' inputs and stores it into every
    /// rank's output, with a sync at entry and exit only
    /// (kernels/allreduce_push.cu); all-gather with a symmetric/registered
    /// recvbuff stores each rank's block into every rank's output
    /// (kernels/allgather.cu).
    pub push: bool,
    /// `write`: the two-shot all-reduce into a symmetric/registered output
    /// by stores only (kernels/allreduce_write.cu): each rank stores the
    /// owners' slices of its input into their scratch, each owner reduces
    /// locally and stores its slice into every rank's output; any input
    /// buffer. Where both are named, `write` takes the all-reduce and
    /// `push` the all-gather. (Eighth session, issue 33; `auto` takes it
    /// for large all-reduces since the ninth: src/coll/defaults.rs.) The
    /// reduce-scatter by stores only (kernels/reduce_scatter_write.cu,
    /// tenth session): every rank stores each owner's block into its
    /// scratch, owners reduce locally; any buffers. The all-gather (where
    /// `push` is not named; kernels/allgather_write.cu): every rank stores
    /// its block into every peer's scratch, each copies them out locally;
    /// any buffers.
    pub write: bool,
    /// `pipe`: the two-shot all-reduce (whose output is not push-eligible)
    /// and the staged reduce-scatter go through scratch slots with
    /// per-chunk flags instead of whole-grid syncs (kernels/pipe.cuh).
    pub pipe: bool,
    /// `p2p`: send/recv by the sized kernel: blocks by the bytes, warp
    /// groups with their own flags, direct push into a receive buffer in
    /// the symmetric heap (kernels/sendrecv.cu). `p2p:blocks=N:kib=K:warps=W`
    /// also sets its shape ([`P2PShape`]).
    pub p2p: bool,
    pub p2p_shape: P2PShape,
    /// `classic`: the copy and reduction loops of before (rank-order loads,
    /// shallow copies of small ranges), for A/B measurements.
    pub classic: bool,
    /// `grid=N` (a power of two, 1-128): at most N blocks for the synced,
    /// push and pipelined collective kernels (LL packets and send/recv keep
    /// their own sizing), to sweep how many SMs the large messages need
    /// (NCCL moves them with far fewer). log2(N) + 1; 0: the default (the
    /// slowest rank's SM count, at most 128).
    pub grid_log2: u8,
    /// `spread`: the fused all-reduce + RMSNorm's one-shot LL form sends
    /// every row's packets from several blocks (SMs) instead of the row's
    /// own block, and its two-shot LL form owns rows in pieces of a block
    /// each (kernels/allreduce_norm.cu). A tuning of those kernels, not a
    /// choice of kernel: alone it keeps `auto`'s choices. `auto` spreads
    /// by itself where measured faster (coll/allreduce_norm.rs), but not
    /// the one-shot form in place, which only this token spreads there
    /// (behind a fence: allreduce_norm.rs `one_shot_sends`).
    pub spread: bool,
    /// `nospread`: the fused norm's LL forms one block a row, whole rows
    /// (what `auto` did before it spread at 4 ranks), for A/B measurements.
    pub no_spread: bool,
    /// `prefetch`: the fused norm's LL forms ask for the residual and
    /// weight in L1 before waiting for the peers' packets (seventh session;
    /// on 4 x H100 in the eighth within 0.3 us of `auto` either way: not a
    /// default). A tuning: alone it keeps `auto`'s choices.
    pub prefetch: bool,
    /// LL kernels (the small-message collectives and the fused norm's LL
    /// forms) launched as programmatic dependents of the stream's previous
    /// kernel, which they wait for on the GPU. On unless `nopdl`: on
    /// 4 x H100 (2026-11-27, eighth session) 0.45-0.55 us less per call
    /// graph-replayed at 2 and 4 ranks, 8 B - 1 MiB, every collective
    /// (docs/PERFORMANCE.md). `pdl` names the default. A tuning: `nopdl`
    /// alone keeps `auto`'s choices.
    pub pdl: bool,
    /// The synced kernels' cross-rank block syncs publish with their
    /// release store alone, without the system-scope sequentially
    /// consistent fence before it. On unless `fullsync` (the fence of
    /// before): on 4 x H100 (eighth session) 4 MiB all-reduce 30.9 against
    /// 35.7 us, 0.87-0.99x the time from 4 to 64 MiB, equal below.
    /// `lightsync` names the default. A tuning: `fullsync` alone keeps
    /// `auto`'s choices.
    pub light_sync: bool,
    /// `serial`: the store-only kernels (all-reduce, reduce-scatter and
    /// all-gather `write`; kernels/write_rounds.cuh) scatter round k + 1
    /// after reducing (copying out) round k, as the all-reduce did until
    /// the tenth session, instead of before it (so
    /// that the stores drain while the block reduces), for A/B
    /// measurements. A tuning: alone it keeps `auto`'s choices.
    pub serial: bool,
    /// `rsag`: the all-reduce as a reduce-scatter into this rank's block of
    /// the output and an in-place all-gather, each with `auto`'s choices
    /// (coll/allreduce_rsag.rs: two launches, blocks of whole 16-byte
    /// vectors, a small all-reduce of the elements left over).
    /// Seventeenth session, not a default until measured. Like the
    /// tunings, alone it keeps `auto`'s choices everywhere else, so that
    /// `SYMM_ALGO=rsag` times the composition against the defaults.
    pub rsag: bool,
    /// `batch` / `batch=N` (N = 1, 2 or 4; `batch` alone 4): the fused
    /// norm's forms on their batched entries (kernels/allreduce_norm.cu
    /// `allreduce_norm_ll_batch_body`, `allreduce_norm_ll2_batch_body`,
    /// `add_norm_batch_body`): N units a thread in blocks of at most 512,
    /// every load of a thread issued before it polls, its packets polled at
    /// once. The one-shot entry nineteenth session, the two-shot and
    /// norm-kernel entries twentieth; `auto`'s at 2 ranks since the
    /// twenty-fourth, N = 1 up to 16 tokens and 4 above (coll/defaults.rs
    /// `norm_batch_units`). A tuning:
    /// alone it keeps `auto`'s choices. log2(N) + 1; 0: not asked.
    pub norm_batch_log2: u8,
    /// `nobatch`: the fused norm's unbatched entries where `auto` would
    /// batch (2 ranks), for A/B measurements. A tuning.
    pub no_norm_batch: bool,
    /// `normwrite`: the fused norm above its LL forms as one kernel by
    /// stores (kernels/allreduce_norm_write.cu: each owner of rows sums,
    /// adds its residual and normalises them, the rows going there and
    /// back through scratch with block syncs) instead of the library's
    /// all-reduce and a norm kernel after it, where the scratch holds the
    /// message and rows fit one block (16 KiB). Twenty-first session;
    /// `auto`'s at 2 ranks since the twenty-fourth (coll/defaults.rs
    /// `norm_by_stores`). A tuning: alone it keeps `auto`'s choices
    /// everywhere else.
    pub norm_write: bool,
    /// `nonormwrite`: the all-reduce and a norm kernel above the fused
    /// norm's LL forms where `auto` would take the form by stores (2
    /// ranks), for A/B measurements. A tuning.
    pub no_norm_write: bool,
    /// `loopback`: where the fused norm's batched one-shot entry spreads
    /// its sends in place, each sender also puts its units as packets into
    /// this rank's own slot, and a row is written once those are back,
    /// instead of behind the grid-wide fence (kernels/allreduce_norm.cu
    /// OWN, the entry `symm_allreduce_norm_ll_batch_own_*`). Twenty-fifth
    /// session; `auto`'s where it batches (2 ranks) since the twenty-sixth
    /// (coll/defaults.rs `norm_loopback`), so named it asks for it
    /// elsewhere (`batch=1+spread+loopback`). A tuning.
    pub norm_loopback: bool,
    /// `noloopback`: the batched entry's fence in place where `auto` would
    /// take the own packets (2 ranks), and its in-place spread limit, for
    /// A/B measurements. A tuning.
    pub no_norm_loopback: bool,
    /// `ownstaged`: the staged kernels stage the part of a plain input that
    /// only this rank reads (the all-to-all's and reduce-scatter's own
    /// block, the two-shot all-reduce's own slice), as before the
    /// twenty-seventh session, instead of reading it where it is
    /// (`SYMM_COLL_OWN_DIRECT`), for A/B measurements. A tuning.
    pub own_staged: bool,
    /// `classic2`: at 2 ranks the classic copy and reduction loops under
    /// `auto`'s choices, as `auto` ran from 2026-11-24 to the twenty-ninth
    /// session (src/coll/defaults.rs `default_algo`), for the A/B across
    /// GPUs. A tuning: alone it keeps `auto`'s choices.
    pub classic_two_ranks: bool,
}

impl Algo {
    pub const AUTO: Algo =
        Algo {
            base: Base::Auto,
            push: false,
            write: false,
            pipe: false,
            p2p: false,
            p2p_shape: P2PShape { max_blocks: 0, kib_log2: 0, group_log2: 0, direct_log2: 0, stride_log2: 0, ll_log2: 0, pair: false },
            classic: false,
            grid_log2: 0,
            spread: false,
            no_spread: false,
            prefetch: false,
            pdl: true,
            light_sync: true,
            serial: false,
            rsag: false,
            norm_batch_log2: 0,
            no_norm_batch: false,
            norm_write: false,
            no_norm_write: false,
            norm_loopback: false,
            no_norm_loopback: false,
            own_staged: false,
            classic_two_ranks: false,
        };

    /// Whether this leaves every choice to the defaults (a `grid=N` cap
    /// and `spread` / `nospread` / `prefetch` / `nopdl` / `fullsync` /
    /// `serial` / `rsag` / `batch` / `nobatch` / `normwrite` / `nonormwrite` /
    /// `loopback` / `noloopback` / `ownstaged` / `classic2` aside: they tune kernels,
    /// or in `rsag`'s and `normwrite`'s cases how the all-reduce or the
    /// fused norm uses the other collectives' choices, not the choice of
    /// kernel elsewhere).
    pub fn is_auto(self) -> bool {
        let t = Algo::AUTO; // every tuning as `auto` has it
        #[rustfmt::skip]
        let choice = Algo { grid_log2: t.grid_log2, spread: t.spread, no_spread: t.no_spread, prefetch: t.prefetch,
                            pdl: t.pdl, light_sync: t.light_sync, serial: t.serial, rsag: t.rsag,
                            norm_batch_log2: t.norm_batch_log2, no_norm_batch: t.no_norm_batch,
                            norm_write: t.norm_write, no_norm_write: t.no_norm_write,
                            norm_loopback: t.norm_loopback, no_norm_loopback: t.no_norm_loopback,
                            own_staged: t.own_staged, classic_two_ranks: t.classic_two_ranks, ..self };
        choice == Algo::AUTO
    }

    /// Units a thread of the fused norm's batched entry (`batch=N`); None
    /// when not asked.
    pub fn norm_batch_units(self) -> Option<u64> {
        (self.norm_batch_log2 != 0).then(|| 1 << (self.norm_batch_log2 - 1))
    }

    /// The most blocks `grid=N` allows (u32::MAX when not set).
    pub fn grid_cap(self) -> u32 {
        if self.grid_log2 == 0 { u32::MAX } else { 1 << (self.grid_log2 - 1) }
    }

    /// Parse tokens joined by `+` or `,`; case does not matter.
    pub fn parse(s: &str) -> std::result::Result<Algo, String> {
        let mut a = Algo::AUTO;
        let mut bases = 0;
        // Which of `pdl` / `nopdl` and of `lightsync` / `fullsync` were named.
        let (mut pdl_named, mut sync_named) = ([false; 2], [false; 2]);
        for tok in s.split(['+', ',']).map(|t| t.trim().to_ascii_lowercase()) {
            match tok.as_str() {
                "" => {}
                "auto" => bases += 1,
                "ll" => (a.base, bases) = (Base::Ll, bases + 1),
                "oneshot" | "one_shot" | "one-shot" => (a.base, bases) = (Base::OneShot, bases + 1),
                "twoshot" | "two_shot" | "two-shot" => (a.base, bases) = (Base::TwoShot, bases + 1),
                "push" => a.push = true,
                "write" => a.write = true,
                "pipe" => a.pipe = true,
                "p2p" => a.p2p = true,
                "classic" => a.classic = true,
                "classic2" | "classic_2" | "classic-2" => a.classic_two_ranks = true,
                "spread" => a.spread = true,
                "nospread" | "no_spread" | "no-spread" => a.no_spread = true,
                "prefetch" => a.prefetch = true,
                "serial" => a.serial = true,
                "rsag" => a.rsag = true,
                "normwrite" | "norm_write" | "norm-write" => a.norm_write = true,
                "nonormwrite" | "no_norm_write" | "no-norm-write" => a.no_norm_write = true,
                "batch" => a.norm_batch_log2 = 3,
                "nobatch" | "no_batch" | "no-batch" => a.no_norm_batch = true,
                "loopback" => a.norm_loopback = true,
                "noloopback" | "no_loopback" | "no-loopback" => a.no_norm_loopback = true,
                "ownstaged" | "own_staged" | "own-staged" => a.own_staged = true,
                t if t.starts_with("batch=") => {
                    a.norm_batch_log2 = match &t[6..] {
                        "1" => 1,
                        "2" => 2,
                        "4" => 3,
                        _ => return Err(format!("\"{t}\" in \"{s}\": batch=N with N 1, 2 or 4")),
                    };
                }
                "pdl" => (a.pdl, pdl_named[0]) = (true, true),
                "nopdl" | "no_pdl" | "no-pdl" => (a.pdl, pdl_named[1]) = (false, true),
                "lightsync" | "light_sync" | "light-sync" => (a.light_sync, sync_named[0]) = (true, true),
                "fullsync" | "full_sync" | "full-sync" => (a.light_sync, sync_named[1]) = (false, true),
                t if t.starts_with("p2p:") => (a.p2p, a.p2p_shape) = (true, P2PShape::parse(&t[3..]).map_err(|e| format!("{e} in \"{s}\""))?),
                t if t.starts_with("grid=") => {
                    let n: u32 = t[5..].parse().map_err(|_| format!("\"{t}\" in \"{s}\": grid=N with N a number"))?;
                    if !n.is_power_of_two() || n > 128 {
                        return Err(format!("\"{t}\" in \"{s}\": grid=N with N a power of two from 1 to 128"));
                    }
                    a.grid_log2 = n.trailing_zeros() as u8 + 1;
                }
                other => {
                    return Err(format!(
                        "unknown algorithm \"{other}\" in \"{s}\" (tokens: auto, ll, oneshot, twoshot, push, write, pipe, p2p, \
                         p2p:blocks=N:kib=K:warps=W:direct=D:stride=S:ll=L, classic, grid=N, spread, nospread, prefetch, \
                         pdl, nopdl, lightsync, fullsync, serial, rsag, batch, batch=N, nobatch, normwrite, nonormwrite, \
                         loopback, noloopback, ownstaged, classic2, joined with '+')"
                    ))
                }
            }
        }
        if bases > 1 {
            return Err(format!("\"{s}\" names more than one of auto, ll, oneshot, twoshot"));
        }
        if a.spread && a.no_spread {
            return Err(format!("\"{s}\" names both spread and nospread"));
        }
        if a.norm_batch_log2 != 0 && a.no_norm_batch {
            return Err(format!("\"{s}\" names both batch and nobatch"));
        }
        if a.norm_loopback && a.no_norm_batch {
            return Err(format!("\"{s}\" names both loopback and nobatch (loopback is the batched entry's)"));
        }
        if a.classic && a.classic_two_ranks {
            return Err(format!(
                "\"{s}\" names both classic and classic2 (classic: the classic loops in every kernel; classic2: at 2 ranks \
                 under auto's choices)"
            ));
        }
        if a.classic_two_ranks && !a.is_auto() {
            return Err(format!("\"{s}\": classic2 keeps auto's choices; with kernels named, name classic instead"));
        }
        if a.norm_loopback && a.no_norm_loopback {
            return Err(format!("\"{s}\" names both loopback and noloopback"));
        }
        if a.norm_write && a.no_norm_write {
            return Err(format!("\"{s}\" names both normwrite and nonormwrite"));
        }
        if pdl_named == [true, true] {
            return Err(format!("\"{s}\" names both pdl and nopdl"));
        }
        if sync_named == [true, true] {
            return Err(format!("\"{s}\" names both lightsync and fullsync"));
        }
        Ok(a)
    }

    /// `SYMM_ALGO`, parsed once per process: an invalid value is warned
    /// about once and means `auto` (for every communicator, and for
    /// symmCommSetAlgorithm(comm, NULL)).
    pub fn from_env() -> Algo {
        static PARSED: std::sync::OnceLock<Algo> = std::sync::OnceLock::new();
        *PARSED.get_or_init(|| {
            Algo::parse(&crate::config::get().algo).unwrap_or_else(|e| {
                log::warn!(target: "symmcomm::coll", "SYMM_ALGO: {e}; using auto");
                Algo::AUTO
            })
        })
    }

    fn to_bits(self) -> u64 {
        let base = match self.base {
            Base::Auto => 0,
            Base::Ll => 1,
            Base::OneShot => 2,
            Base::TwoShot => 3,
        };
        // The shape takes bits 6-26 (P2PShape::to_bits's bits 0-20), 38-44 (its stride and LL size, bits 21-27)
        // and 55 (pair, bit 28),
        // grid=N 27-30, spread 31, nospread 32, prefetch 33, nopdl 34, fullsync 35 (all zero: the
        // defaults), write 36, serial 37, rsag 45, batch 46-47, normwrite 48, nobatch 49,
        // nonormwrite 50, loopback 51, noloopback 52, ownstaged 53, classic2 54.
        let shape = self.p2p_shape.to_bits();
        let low = base | (self.push as u32) << 2 | (self.pipe as u32) << 3 | (self.p2p as u32) << 4
            | (self.classic as u32) << 5
            | (shape & 0x1f_ffff) << 6
            | (self.grid_log2 as u32) << 27
            | (self.spread as u32) << 31;
        low as u64 | (self.no_spread as u64) << 32 | (self.prefetch as u64) << 33 | (!self.pdl as u64) << 34
            | (!self.light_sync as u64) << 35
            | (self.write as u64) << 36
            | (self.serial as u64) << 37
            | (((shape >> 21) & 0x7f) as u64) << 38
            | (self.rsag as u64) << 45
            | ((self.norm_batch_log2 & 3) as u64) << 46
            | (self.norm_write as u64) << 48
            | (self.no_norm_batch as u64) << 49
            | (self.no_norm_write as u64) << 50
            | (self.norm_loopback as u64) << 51
            | (self.no_norm_loopback as u64) << 52
            | (self.own_staged as u64) << 53
            | (self.classic_two_ranks as u64) << 54
            | ((shape >> 28) as u64 & 1) << 55
    }

    fn from_bits(wide: u64) -> Algo {
        let b = wide as u32;
        let base = [Base::Auto, Base::Ll, Base::OneShot, Base::TwoShot][(b & 3) as usize];
        let p2p_shape = P2PShape::from_bits(
            (b >> 6) & 0x1f_ffff | ((wide >> 38) as u32 & 0x7f) << 21 | ((wide >> 55) as u32 & 1) << 28,
        );
        let grid_log2 = ((b >> 27) & 0xf) as u8;
        Algo {
            base,
            push: b & 4 != 0,
            write: wide >> 36 & 1 != 0,
            pipe: b & 8 != 0,
            p2p: b & 16 != 0,
            p2p_shape,
            classic: b & 32 != 0,
            grid_log2,
            spread: b >> 31 != 0,
            no_spread: wide >> 32 & 1 != 0,
            prefetch: wide >> 33 & 1 != 0,
            pdl: wide >> 34 & 1 == 0,
            light_sync: wide >> 35 & 1 == 0,
            serial: wide >> 37 & 1 != 0,
            rsag: wide >> 45 & 1 != 0,
            norm_batch_log2: (wide >> 46 & 3) as u8,
            norm_write: wide >> 48 & 1 != 0,
            no_norm_batch: wide >> 49 & 1 != 0,
            no_norm_write: wide >> 50 & 1 != 0,
            norm_loopback: wide >> 51 & 1 != 0,
            no_norm_loopback: wide >> 52 & 1 != 0,
            own_staged: wide >> 53 & 1 != 0,
            classic_two_ranks: wide >> 54 & 1 != 0,
        }
    }
}

impl std::fmt::Display for Algo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = vec![match self.base {
            Base::Auto => "auto",
            Base::Ll => "ll",
            Base::OneShot => "oneshot",
            Base::TwoShot => "twoshot",
        }];
        let p2p = format!("p2p{}", self.p2p_shape);
        let grid = format!("grid={}", self.grid_cap());
        let batch = format!("batch={}", self.norm_batch_units().unwrap_or(0));
        for (on, name) in [
            (self.push, "push"),
            (self.write, "write"),
            (self.pipe, "pipe"),
            (self.p2p, p2p.as_str()),
            (self.classic, "classic"),
            (self.grid_log2 != 0, grid.as_str()),
            (self.spread, "spread"),
            (self.no_spread, "nospread"),
            (self.prefetch, "prefetch"),
            (!self.pdl, "nopdl"),
            (!self.light_sync, "fullsync"),
            (self.serial, "serial"),
            (self.rsag, "rsag"),
            (self.norm_batch_log2 != 0, batch.as_str()),
            (self.no_norm_batch, "nobatch"),
            (self.norm_write, "normwrite"),
            (self.no_norm_write, "nonormwrite"),
            (self.norm_loopback, "loopback"),
            (self.no_norm_loopback, "noloopback"),
            (self.own_staged, "ownstaged"),
            (self.classic_two_ranks, "classic2"),
        ] {
            if on {
                parts.push(name);
            }
        }
        f.write_str(&parts.join("+"))
    }
}

/// A communicator's algorithm choice, replaceable at run time by the
/// test/benchmark setter (symmCommSetAlgorithm).
pub struct AlgoCell(std::sync::atomic::AtomicU64);

impl AlgoCell {
    pub fn new(a: Algo) -> AlgoCell {
        AlgoCell(std::sync::atomic::AtomicU64::new(a.to_bits()))
    }
    pub fn get(&self) -> Algo {
        Algo::from_bits(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }
    pub fn set(&self, a: Algo) {
        self.0.store(a.to_bits(), std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algo_tokens() {
        assert_eq!(Algo::parse("").unwrap(), Algo::AUTO);
        assert_eq!(Algo::parse("auto").unwrap(), Algo::AUTO);
        let a = Algo::parse("TwoShot+push, pipe+p2p").unwrap();
        assert_eq!(a.base, Base::TwoShot);
        assert!(a.push && a.pipe && a.p2p && !a.classic);
        assert_eq!(a.to_string(), "twoshot+push+pipe+p2p");
        let c = Algo::parse("classic").unwrap();
        assert!(c.classic && c.base == Base::Auto && !c.push);
        assert!(Algo::parse("oneshot+twoshot").is_err(), "two base choices");
        assert!(Algo::parse("fast").unwrap_err().contains("fast"));
        // Every token the error lists parses (with values for its letters): the
        // list is what the README's token table is checked against
        // (python/tests/test_readme.py).
        let err = Algo::parse("fast").unwrap_err();
        let listed = err.split("(tokens: ").nth(1).and_then(|t| t.split(" joined with").next()).unwrap();
        let tokens: Vec<&str> = listed.split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
        assert!(tokens.len() >= 25 && tokens.contains(&"classic2"), "{tokens:?}");
        for tok in tokens {
            let valued = [("=N", "=4"), ("=K", "=64"), ("=W", "=4"), ("=D", "=64"), ("=S", "=4"), ("=L", "=64")]
                .iter()
                .fold(tok.to_string(), |t, (letter, value)| t.replace(letter, value));
            assert!(Algo::parse(&valued).is_ok(), "listed token {tok} ({valued}) does not parse");
        }
        for bits in 0..64 {
            let a = Algo::from_bits(bits);
            assert_eq!(Algo::from_bits(a.to_bits()), a);
            assert_eq!(Algo::parse(&a.to_string()).unwrap(), a, "{a} round-trips through its name");
        }
        let wide = Algo::parse("p2p:blocks=64:kib=128+classic").unwrap();
        assert!(wide.p2p && wide.classic && wide.p2p_shape.max_blocks == 64);
        assert_eq!(wide.to_string(), "auto+p2p:blocks=64:kib=128+classic");
        assert_eq!(Algo::from_bits(wide.to_bits()), wide);
        assert!(Algo::parse("p2p:blocks=99").unwrap_err().contains("blocks=99"));
        let cell = AlgoCell::new(Algo::AUTO);
        cell.set(a);
        assert_eq!(cell.get(), a);
        let g = Algo::parse("twoshot+push+grid=32").unwrap();
        assert_eq!((g.grid_cap(), g.push, Algo::AUTO.grid_cap()), (32, true, u32::MAX));
        assert_eq!(g.to_string(), "twoshot+push+grid=32");
        let widest = Algo::parse("ll+grid=128+p2p:blocks=64:kib=65536:warps=16:direct=65536").unwrap();
        assert_eq!(Algo::from_bits(widest.to_bits()), widest, "grid=N's bits stay clear of the shape's");
        assert_eq!(Algo::parse("grid=1").unwrap().grid_cap(), 1);
        let spread = Algo::parse("ll+grid=128+spread+p2p:blocks=64:kib=65536:warps=16:direct=65536").unwrap();
        assert!(spread.spread && spread.grid_cap() == 128 && !Algo::AUTO.spread);
        assert_eq!(Algo::from_bits(spread.to_bits()), spread, "spread's bit stays clear of grid=N's");
        assert_eq!(Algo::parse("spread").unwrap().to_string(), "auto+spread");
        let unspread = Algo::parse("ll+spread+grid=128").map(|a| Algo { spread: false, no_spread: true, ..a }).unwrap();
        assert_eq!(Algo::from_bits(unspread.to_bits()), unspread, "nospread's bit stays clear of spread's");
        assert_eq!(Algo::parse("nospread").unwrap().to_string(), "auto+nospread");
        assert!(Algo::parse("nospread").unwrap().is_auto(), "nospread alone keeps auto's choices");
        assert!(Algo::parse("spread+nospread").unwrap_err().contains("both"));
        let p = Algo::parse("nospread+prefetch").unwrap();
        assert!(p.prefetch && p.no_spread && p.is_auto() && !Algo::AUTO.prefetch);
        assert_eq!((Algo::from_bits(p.to_bits()), p.to_string().as_str()), (p, "auto+nospread+prefetch"));
        const { assert!(Algo::AUTO.pdl && Algo::AUTO.light_sync, "both are the defaults since the eighth session") };
        assert_eq!(Algo::parse("pdl+lightsync").unwrap(), Algo::AUTO, "the tokens name the defaults");
        let d = Algo::parse("ll+nopdl+prefetch").unwrap();
        assert!(!d.pdl && d.light_sync && d.prefetch && d.base == Base::Ll && Algo::parse("nopdl").unwrap().is_auto());
        assert_eq!((Algo::from_bits(d.to_bits()), d.to_string().as_str()), (d, "ll+prefetch+nopdl"));
        let l = Algo::parse("twoshot+push+fullsync").unwrap();
        assert!(!l.light_sync && l.pdl && !l.is_auto() && Algo::parse("fullsync").unwrap().is_auto());
        assert_eq!((Algo::from_bits(l.to_bits()), l.to_string().as_str()), (l, "twoshot+push+fullsync"));
        assert_eq!(Algo::parse("nopdl+fullsync").unwrap().to_string(), "auto+nopdl+fullsync");
        assert!(Algo::parse("pdl+nopdl").unwrap_err().contains("both"));
        assert!(Algo::parse("lightsync+full-sync").unwrap_err().contains("both"));
        let rsag = Algo::parse("rsag+serial").unwrap();
        assert!(rsag.rsag && !Algo::AUTO.rsag && rsag.is_auto(), "rsag alone keeps auto's choices elsewhere");
        assert!(!Algo::parse("rsag+push").unwrap().is_auto());
        assert_eq!((Algo::from_bits(rsag.to_bits()), rsag.to_string().as_str()), (rsag, "auto+serial+rsag"));
        let every = Algo::parse("ll+grid=128+p2p:blocks=64:kib=65536:warps=16:direct=65536:stride=16:ll=1024+serial+rsag").unwrap();
        assert_eq!(Algo::from_bits(every.to_bits()), every, "bit 45 clear of the shape's bits 38-44");
        let serial = Algo::parse("write+serial").unwrap();
        assert!(serial.serial && !Algo::AUTO.serial && Algo::parse("serial").unwrap().is_auto());
        assert_eq!((Algo::from_bits(serial.to_bits()), serial.to_string().as_str()), (serial, "auto+write+serial"));
        let w = Algo::parse("twoshot+write+push+fullsync").unwrap();
        assert!(w.write && w.push && !w.is_auto() && !Algo::AUTO.write);
        assert_eq!((Algo::from_bits(w.to_bits()), w.to_string().as_str()), (w, "twoshot+push+write+fullsync"));
        for bad in ["grid=0", "grid=3", "grid=256", "grid=x"] {
            assert!(Algo::parse(bad).unwrap_err().contains(bad), "{bad}");
        }
        let b = Algo::parse("batch+spread").unwrap();
        assert!(b.is_auto() && b.norm_batch_units() == Some(4) && Algo::AUTO.norm_batch_units().is_none());
        assert_eq!((Algo::from_bits(b.to_bits()), b.to_string().as_str()), (b, "auto+spread+batch=4"));
        for (tok, units) in [("batch=1", 1), ("batch=2", 2), ("BATCH=4", 4)] {
            let a = Algo::parse(&format!("{tok}+{}", every)).unwrap();
            assert_eq!((a.norm_batch_units(), Algo::from_bits(a.to_bits())), (Some(units), a), "{tok}: bits 46-47 clear of the rest");
        }
        for bad in ["batch=3", "batch=8", "batch=0", "batch="] {
            assert!(Algo::parse(bad).unwrap_err().contains(bad), "{bad}");
        }
        let nw = Algo::parse("normwrite+batch=1").unwrap();
        assert!(nw.norm_write && nw.is_auto() && !Algo::AUTO.norm_write, "normwrite alone keeps auto's choices elsewhere");
        assert_eq!((Algo::from_bits(nw.to_bits()), nw.to_string().as_str()), (nw, "auto+batch=1+normwrite"));
        let a = Algo::parse(&format!("normwrite+batch=4+{every}")).unwrap();
        assert_eq!(Algo::from_bits(a.to_bits()), a, "bit 48 clear of the rest");
        assert!(Algo::parse("Norm-Write").unwrap().norm_write);
        let off = Algo::parse("nobatch+nonormwrite").unwrap();
        assert!(off.no_norm_batch && off.no_norm_write && off.is_auto(), "the opt-outs keep auto's choices elsewhere");
        assert_eq!((Algo::from_bits(off.to_bits()), off.to_string().as_str()), (off, "auto+nobatch+nonormwrite"));
        let a = Algo::parse(&format!("nobatch+nonormwrite+{every}")).unwrap();
        assert_eq!(Algo::from_bits(a.to_bits()), a, "bits 49-50 clear of the rest");
        assert!(Algo::parse("batch=1+nobatch").unwrap_err().contains("both"));
        assert!(Algo::parse("normwrite+No-Norm-Write").unwrap_err().contains("both"));
        let lb = Algo::parse("loopback+batch=1+spread").unwrap();
        assert!(lb.norm_loopback && lb.is_auto() && !Algo::AUTO.norm_loopback, "loopback alone keeps auto's choices");
        assert_eq!((Algo::from_bits(lb.to_bits()), lb.to_string().as_str()), (lb, "auto+spread+batch=1+loopback"));
        let a = Algo::parse(&format!("loopback+{every}")).unwrap();
        assert_eq!(Algo::from_bits(a.to_bits()), a, "bit 51 clear of the rest");
        assert!(Algo::parse("loopback+nobatch").unwrap_err().contains("both"));
        // A one-flag tuning: parsed in any spelling, auto's choices kept,
        // printed back, and its bit clear of every other field's.
        let tuning = |spelled: &str, printed: &str, flag: fn(&Algo) -> bool, beside: &str| {
            let t = Algo::parse(spelled).unwrap();
            assert!(flag(&t) && t.is_auto() && !flag(&Algo::AUTO), "{printed} keeps auto's choices");
            assert_eq!((Algo::from_bits(t.to_bits()), t.to_string()), (t, format!("auto+{printed}")));
            let a = Algo::parse(&format!("{printed}+{beside}")).unwrap();
            assert_eq!(Algo::from_bits(a.to_bits()), a, "{printed}'s bit clear of the rest");
        };
        tuning("No-Loopback", "noloopback", |a| a.no_norm_loopback, &format!("ownstaged+{every}"));
        assert!(Algo::parse("loopback+noloopback").unwrap_err().contains("both"));
        tuning("Own-Staged", "ownstaged", |a| a.own_staged, &format!("noloopback+{every}"));
        // classic2 under auto only: beside every other tuning.
        let tunings = "grid=128+spread+prefetch+nopdl+fullsync+serial+rsag+batch=4+normwrite+loopback+ownstaged";
        tuning("Classic-2", "classic2", |a| a.classic_two_ranks, tunings);
        assert!(Algo::parse("classic+classic2").unwrap_err().contains("both"));
        assert!(Algo::parse("twoshot+classic2").unwrap_err().contains("name classic instead"));
    }

    #[test]
    fn p2p_shapes_keep_their_bits_inside_algo() {
        let a = Algo::parse("ll+grid=128+p2p:blocks=64:kib=65536:warps=16:direct=65536:stride=16:ll=1024+serial").unwrap();
        assert_eq!(Algo::from_bits(a.to_bits()), a, "the stride's and LL size's bits stay clear of the others");
        assert_eq!((a.p2p_shape.stride_log2, a.p2p_shape.ll_log2), (4, 10));
        let a = Algo::parse("ll+p2p:pair=1+ownstaged+serial").unwrap();
        assert_eq!(Algo::from_bits(a.to_bits()), a, "pair's bit 55 clear of the others");
        assert!(a.p2p_shape.pair && !Algo::from_bits(a.to_bits() & !(1 << 55)).p2p_shape.pair);
    }
}
