//! Every `SYMM_*` environment variable, read once per process through one helper.
//!
//! Values are cached on first use, like NCCL's params: later `setenv` calls
//! have no effect. Internal code that needs other values (tests, InitAll
//! groups) passes explicit settings instead of mutating the environment.

use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

/// The prefix of every variable symmcomm reads.
pub const PREFIX: &str = "SYMM_";

/// `SYMM_LL_MAX_BYTES`'s default: the data one LL slot holds, from 3 ranks.
pub(crate) const LL_MAX_BYTES_DEFAULT: u64 = 512 << 10;

/// `SYMM_LL_MAX_BYTES`'s default at 2 ranks, where every collective's LL
/// form beats the synced kernels up to 1 MiB a rank (docs/PERFORMANCE.md,
/// sixth session): the slots then take 8 MiB of symmetric memory a rank.
pub(crate) const LL_MAX_BYTES_TWO_RANKS: u64 = 1 << 20;

/// `SYMM_P2P_RING_BYTES`'s default at 1 rank and from 5: the send/recv engine's
/// ring per channel, 256 chunks of 16 KiB, as before the thirteenth
/// session (not measured larger there; the rings take nranks x this a
/// rank, so 16 MiB would be 128 MiB at 8).
pub(crate) const P2P_RING_BYTES_DEFAULT: u64 = 4 << 20;

/// `SYMM_P2P_RING_BYTES`'s default at 2 to 4 ranks. On 2 x H200
/// (2026-11-28, thirteenth session, `scripts/device-measure p2p:2`, plain
/// buffers, eager) send/recv with `auto`'s shape took 0.79 / 0.78 / 0.74 /
/// 0.73x NCCL's faster column at 16 MiB / 64 MiB / 256 MiB / 1 GiB on the
/// 4 MiB ring and 0.92 / 0.97 / 0.96 / 0.94x on this one, the same within
/// 1 % below 16 MiB (graph-replayed 0.80-0.73 against 0.95-0.94): the ring
/// bounds what a pair has in flight (docs/PERFORMANCE.md). On 4 x H200
/// (2026-11-28, sixteenth session, `p2p:4`, plain buffers, eager, a process
/// per ring) at 4 ranks 0.86 / 0.87 / 0.77 / 0.75x on the 4 MiB ring
/// and 0.99 / 1.09 / 0.99 / 0.99x on this one; from 64 KiB to 4 MiB
/// 0.96-1.75x against 0.92-1.74x. At 3 ranks, predicted from the same
/// bound (0.74-0.88x from 16 MiB on the 4 MiB ring in that run's
/// `sweep:3`) and then measured as the default against the old ring in the
/// next process (`auto`, eager / graph-replayed): 0.99 / 1.09 / 1.00 /
/// 0.98x against 0.85 / 0.86 / 0.76 / 0.74x, and 1.02 / 1.09 / 1.00 /
/// 0.98x against 0.87 / 0.85 / 0.75 / 0.76x (at 4 ranks the same A/B
/// 0.99 / 1.07 / 0.99 / 0.99x against 0.88 / 0.87 / 0.77 / 0.78x eager).
/// 32, 48 or 64 MiB of symmetric memory a rank.
pub(crate) const P2P_RING_BYTES_UP_TO_4_RANKS: u64 = 16 << 20;

/// The send/recv engine's ring per channel on a communicator of `nranks`:
/// the variable's value where it is set (the same on every rank), else the
/// default for that rank count.
pub(crate) fn p2p_ring_bytes(cfg: &Config, nranks: usize) -> u64 {
    cfg.p2p_ring_bytes.unwrap_or_else(|| p2p_ring_bytes_default(nranks))
}

fn p2p_ring_bytes_default(nranks: usize) -> u64 {
    // One rank sends only to itself: the small ring.
    if (2..=4).contains(&nranks) {
        P2P_RING_BYTES_UP_TO_4_RANKS
    } else {
        P2P_RING_BYTES_DEFAULT
    }
}

/// The data one LL slot holds on a communicator of `nranks`: the
/// variable's value where it is set (the same on every rank), else the
/// default for that rank count.
pub(crate) fn ll_max_bytes(cfg: &Config, nranks: usize) -> u64 {
    cfg.ll_max_bytes.unwrap_or(if nranks == 2 { LL_MAX_BYTES_TWO_RANKS } else { LL_MAX_BYTES_DEFAULT })
}

/// The data one of send/recv's own LL slots holds at 2 to 4 ranks, where
/// `auto` sends a message of up to 1 MiB as LL packets (coll::defaults
/// `P2P_LL_LOG2_KIB`). On 4 x H200 (2026-11-28, seventeenth session, plain
/// buffers, NCCL's faster column over each, eager / graph-replayed) send/recv
/// of 1 MiB with the slots this large against the collectives' 512 KiB:
/// 1.32 / 1.43x against 0.94 / 1.00x at 3 ranks and 1.31 / 1.43x against
/// 0.94 / 1.02x at 4 (symmetric buffers 1.32 / 1.41x against 1.27 / 1.38x;
/// 256 KiB - 4 MiB otherwise within 2 %). The collectives' slots keep
/// [`ll_max_bytes`]: a larger one would move the two-shot LL all-reduce's
/// reach, which that run did not measure. 16 MiB of symmetric memory a
/// rank at 4 ranks (8 before).
pub(crate) const P2P_LL_MAX_BYTES_UP_TO_4_RANKS: u64 = 1 << 20;

/// The data one of send/recv's own LL slots holds on a communicator of
/// `nranks`: the variable's value where it is set (both kinds of slot
/// follow it, as before), else at least the collectives' slot and 1 MiB at
/// 2 to 4 ranks.
pub(crate) fn p2p_ll_max_bytes(cfg: &Config, nranks: usize) -> u64 {
    let collectives = ll_max_bytes(cfg, nranks);
    if cfg.ll_max_bytes.is_none() && (2..=4).contains(&nranks) {
        collectives.max(P2P_LL_MAX_BYTES_UP_TO_4_RANKS)
    } else {
        collectives
    }
}

/// Process-wide settings, from the environment.
#[derive(Clone, Debug)]
pub struct Config {
    /// `SYMM_DEBUG`: WARN (default), INFO, TRACE, or NONE/OFF.
    pub debug: String,
    /// `SYMM_DEBUG_SUBSYS`: comma list of INIT, BOOTSTRAP, CUDA, MEM, COLL or
    /// ALL (default); a leading `^` excludes the listed ones instead.
    pub debug_subsys: String,
    /// `SYMM_BOOTSTRAP_ADDR`: `ip` or `ip:port` the unique-id root listens on
    /// (default 127.0.0.1, any free port).
    pub bootstrap_addr: Option<String>,
    /// `SYMM_BOOTSTRAP_TIMEOUT` in seconds (default 60): longest wait for the
    /// other ranks in any host-side rendezvous.
    pub bootstrap_timeout: Duration,
    /// `SYMM_TIMEOUT` in seconds (default 120): longest a kernel spins
    /// waiting for a peer before it records a timeout and exits.
    pub timeout: Duration,
    /// `SYMM_ALGO`: `auto` (default); `ll` (LL packets wherever they fit);
    /// `oneshot` or `twoshot` (that all-reduce algorithm, and no LL); plus,
    /// joined with `+` or `,`, the opt-in kernels `push`, `pipe`, `p2p` and
    /// `classic` (the loops of before), `grid=N`. See comm::algo::Algo.
    pub algo: String,
    /// `SYMM_TIMELINE=1`: synced collective kernels record per-block phase
    /// times (symmCommGetTimeline; a diagnostic, off by default).
    pub timeline: bool,
    /// `SYMM_CHECK=1`: every collective also compares (collective, count,
    /// dtype, op, root) across ranks on the device and fails on a mismatch.
    pub check: bool,
    /// `SYMM_COPY_ENGINE=1`: all-gather and reduce-scatter use the copy
    /// engines instead of SM kernels (default for new communicators).
    pub copy_engine: bool,
    /// `SYMM_SCRATCH_BYTES`: per-communicator staging scratch (default 64 MiB).
    pub scratch_bytes: usize,
    /// `SYMM_P2P_RING_BYTES`: the send/recv engine's ring per channel
    /// (sender -> receiver pair), in the receiver's symmetric memory: how
    /// many staged bytes a channel has in flight (4-16 MiB, a power of two;
    /// nranks rings per rank; default 16 MiB at 2 to 4 ranks, 4 MiB from
    /// 5: [`p2p_ring_bytes`]). The same on every rank.
    pub p2p_ring_bytes: Option<u64>,
    /// `SYMM_LL_MAX_BYTES`: the most data one LL slot holds, one rank's
    /// contribution to one call (default 1 MiB at 2 ranks, 512 KiB from
    /// 3: [`ll_max_bytes`]; 64 KiB to 4 MiB, rounded down to 4 KiB). The
    /// slots take 2 parities x nranks x twice this of symmetric memory per
    /// rank. `auto` stays within its measured limits; `SYMM_ALGO=ll` uses
    /// all of it. The same on every rank.
    pub ll_max_bytes: Option<u64>,
    /// `SYMM_TEST_SHARED_DEVICES=1`: TEST ONLY. Lets several ranks of one
    /// communicator use the same GPU so that N-rank code paths can run on
    /// fewer GPUs. Never set it in production.
    pub test_shared_devices: bool,
    /// `SYMM_FUSED_WORKSPACE_BYTES`: symmetric memory each rank gives the
    /// fused matmul ops at a communicator's first fused call (default 256
    /// MiB); it bounds their pipeline chunks (src/fused).
    pub fused_workspace_bytes: usize,
    /// `SYMM_FUSED_WORKSPACE_MAX_BYTES`: how far a fused call may grow that
    /// workspace so that its pipeline runs in whole chunks (default 2 GiB;
    /// when only SYMM_FUSED_WORKSPACE_BYTES is set, that size: no growth).
    pub fused_workspace_max_bytes: usize,
    /// `SYMM_FUSED_RESERVE_SMS`: SMs the pipelined GEMMs leave free for the
    /// fused ops' sync and reduction kernels (default 2).
    pub fused_reserve_sms: u32,
    /// `SYMM_CUBLASLT_LIB`: the cuBLASLt library to load (a path or a
    /// file name); unset: libcublasLt.so.13, then .12, by name and in the
    /// CUDA toolkit (`CUDA_HOME`, /usr/local/cuda). Pointing it at a file
    /// that does not exist is how tests see the library missing.
    pub cublaslt_lib: Option<String>,
    /// `CUDA_HOME` (not a symmcomm variable): where cuBLASLt is looked for.
    pub cuda_home: Option<String>,
    /// Variables that were set but unusable; logged once the logger is up.
    pub warnings: Vec<String>,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The settings, read from the environment on first call.
pub fn get() -> &'static Config {
    CONFIG.get_or_init(|| {
        let mut w = Vec::new();
        let ws_range = ((1u64 << 20) as f64, (64u64 << 30) as f64);
        let fused_workspace_bytes = param_in_range(&mut w, "FUSED_WORKSPACE_BYTES", (256u64 << 20) as f64, ws_range.0, ws_range.1) as usize;
        // A size set on its own is a bound the user chose: keep it.
        let max_default = if param_opt::<String>(&mut Vec::new(), "FUSED_WORKSPACE_BYTES").is_some() { fused_workspace_bytes } else { 2usize << 30 };
        let fused_workspace_max_bytes =
            (param_in_range(&mut w, "FUSED_WORKSPACE_MAX_BYTES", max_default as f64, ws_range.0, ws_range.1) as usize).max(fused_workspace_bytes);
        Config {
            debug: param(&mut w, "DEBUG", "WARN".to_string()),
            debug_subsys: param(&mut w, "DEBUG_SUBSYS", "ALL".to_string()),
            bootstrap_addr: param_opt(&mut w, "BOOTSTRAP_ADDR"),
            bootstrap_timeout: secs(param_in_range(&mut w, "BOOTSTRAP_TIMEOUT", 60.0, 0.1, 86_400.0)),
            timeout: secs(param_in_range(&mut w, "TIMEOUT", 120.0, 0.001, 86_400.0)),
            algo: param(&mut w, "ALGO", "auto".to_string()).to_ascii_lowercase(),
            timeline: param(&mut w, "TIMELINE", 0u32) != 0,
            check: param(&mut w, "CHECK", 0u32) != 0,
            copy_engine: param(&mut w, "COPY_ENGINE", 0u32) != 0,
            scratch_bytes: param_in_range(&mut w, "SCRATCH_BYTES", (64u64 << 20) as f64, (1u64 << 20) as f64, (4u64 << 30) as f64) as usize,
            p2p_ring_bytes: param_opt::<String>(&mut w, "P2P_RING_BYTES").and_then(|_| {
                let v = param(&mut w, "P2P_RING_BYTES", 0.0f64);
                let ring = [4u64 << 20, 8 << 20, 16 << 20].into_iter().find(|&r| r as f64 == v);
                if ring.is_none() {
                    w.push(format!("{PREFIX}P2P_RING_BYTES={v} is not 4194304, 8388608 or 16777216; using the default"));
                }
                ring
            }),
            ll_max_bytes: param_opt::<String>(&mut w, "LL_MAX_BYTES").map(|_| {
                param_in_range(&mut w, "LL_MAX_BYTES", LL_MAX_BYTES_DEFAULT as f64, (64u64 << 10) as f64, (4u64 << 20) as f64) as u64
                    / 4096
                    * 4096
            }),
            test_shared_devices: param(&mut w, "TEST_SHARED_DEVICES", 0u32) != 0,
            fused_workspace_bytes,
            fused_workspace_max_bytes,
            fused_reserve_sms: param_in_range(&mut w, "FUSED_RESERVE_SMS", 2.0, 0.0, 64.0) as u32,
            cublaslt_lib: param_opt(&mut w, "CUBLASLT_LIB"),
            cuda_home: std::env::var("CUDA_HOME").ok().filter(|s| !s.trim().is_empty()),
            warnings: w,
        }
    })
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Read `SYMM_<name>`, falling back to `default` when unset or unparsable.
/// The one place that touches the environment.
/// Bad values are noted in `warn` (the logger is not up yet when this runs).
fn param<T: FromStr + std::fmt::Debug>(warn: &mut Vec<String>, name: &str, default: T) -> T {
    param_opt(warn, name).unwrap_or(default)
}

fn param_opt<T: FromStr>(warn: &mut Vec<String>, name: &str) -> Option<T> {
    let raw = std::env::var(format!("{PREFIX}{name}")).ok()?;
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    let parsed = raw.parse().ok();
    if parsed.is_none() {
        warn.push(format!("{PREFIX}{name}={raw:?} is not valid; using the default"));
    }
    parsed
}

fn param_in_range(warn: &mut Vec<String>, name: &str, default: f64, lo: f64, hi: f64) -> f64 {
    let v = param(warn, name, default);
    if v.is_finite() && (lo..=hi).contains(&v) {
        v
    } else {
        warn.push(format!("{PREFIX}{name}={v} is outside [{lo}, {hi}]; using {default}"));
        default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_16_mib_ring_where_it_was_measured_or_predicted() {
        assert_eq!(p2p_ring_bytes_default(2), 16 << 20, "measured on 2 GPUs");
        assert_eq!(p2p_ring_bytes_default(3), 16 << 20, "measured on 3 GPUs");
        assert_eq!(p2p_ring_bytes_default(4), 16 << 20, "measured on 4 GPUs");
        assert_eq!(p2p_ring_bytes_default(8), 4 << 20, "not measured at 8: 128 MiB a rank");
        assert_eq!(p2p_ring_bytes_default(1), 4 << 20, "one rank: only itself to send to");
    }

    #[test]
    fn send_recv_ll_slots_hold_1_mib_at_2_to_4_ranks_unless_set() {
        let mut cfg = get().clone();
        cfg.ll_max_bytes = None;
        assert_eq!(p2p_ll_max_bytes(&cfg, 2), 1 << 20, "the collectives' slots hold as much there");
        assert_eq!(p2p_ll_max_bytes(&cfg, 3), 1 << 20, "measured on 3 GPUs");
        assert_eq!(p2p_ll_max_bytes(&cfg, 4), 1 << 20, "measured on 4 GPUs");
        assert_eq!(ll_max_bytes(&cfg, 4), 512 << 10, "the collectives' slots unchanged");
        assert_eq!(p2p_ll_max_bytes(&cfg, 8), 512 << 10, "not measured at 8");
        assert_eq!(p2p_ll_max_bytes(&cfg, 1), 512 << 10, "one rank");
        cfg.ll_max_bytes = Some(256 << 10);
        assert_eq!(p2p_ll_max_bytes(&cfg, 4), 256 << 10, "SYMM_LL_MAX_BYTES sets both kinds of slot");
    }
}
