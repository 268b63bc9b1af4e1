//! symmAllReduceAddRMSNorm: the all-reduce that ends a tensor-parallel
//! layer, fused with the residual add and the RMSNorm that follow it
//! (kernels/allreduce_norm.cu):
//!
//! ```text
//! residual_out = allreduce(input) + residual
//! out          = residual_out / sqrt(mean(residual_out^2) + eps) * weight
//! ```
//!
//! Where the message fits the LL slots (decode sizes; the all-reduce's own
//! LL limit) one kernel does it all with LL packets; above, the library's
//! all-reduce leaves the sum in `out` and one kernel adds and normalises in
//! place (the all-reduce plus a norm kernel, which it is). Between the two,
//! by default at 4 ranks (measured: `Call::ll_two_shot_allowed`) and with
//! `SYMM_ALGO=ll` from 3, the two-shot LL form: each rank sums and adds the residual for its share
//! of the rows, and the rows go back as LL packets (kernels/allreduce_norm.cu
//! `allreduce_norm_ll2`; it takes the owner's residual, the same on every
//! rank in tensor parallelism). At one rank only the norm kernel runs.
//! With `SYMM_ALGO=batch[=N]` each form runs on its batched entry (a
//! thread's loads issued together, a peer's packets polled at once), where
//! a block's part of a row fits one. With `normwrite` the messages above
//! the LL forms take one kernel by stores instead of the all-reduce and the
//! norm kernel (allreduce_norm_write.rs). Both are `auto`'s at 2 ranks
//! (one unit a thread up to 16 tokens, four above; measured across GPUs)
//! and since the twenty-sixth session from 3 ranks (one unit a thread; on
//! figures with every rank on one GPU): coll/defaults.rs
//! `NORM_BATCH_DEFAULT_MIN_RANKS`.
//! Like the collectives: the caller's stream, graph-capturable, bounded
//! waits, any buffer class.

use std::ffi::{c_void, CStr};

use cudarc::driver::sys::CUstream;

use super::ranges::check_disjoint;
use super::{allreduce, allreduce_norm_write, defaults, Call, CollId, Request};
use crate::comm::Comm;
use crate::cuda::abi::{
    NormArgs, NORM_FP8_TENSOR, NORM_FP8_TOKEN, NORM_MAX_THREADS, NORM_MAX_UNITS, NORM_PARTS_SHIFT, NORM_PREFETCH,
    NORM_SAME_TYPE, NORM_SPREAD,
};
use crate::cuda::launch::{self, LaunchConfig};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, symmRedOp_t, RawDataType};

/// With `spread` (SYMM_ALGO token), the 8-byte units one block of the
/// one-shot LL form sends at most, as the all-reduce's LL kernel gives a
/// block of LL_SMALL_BLOCK threads one each: at decode sizes a row per
/// block leaves one SM to store 3 x 16 KiB of packets (hidden 4096, 4
/// ranks), where the all-reduce alone spreads them over 8
/// (docs/PERFORMANCE.md, sixth session's hypotheses).
const SPREAD_UNITS: u64 = 128;

/// Whether the LL forms spread: asked (`spread`), or where `auto` does
/// (coll/defaults.rs `norm_spread_by_default`: at 4 ranks, and at 2 up to
/// 16 tokens, 8 in place) unless `nospread`.
fn spread(call: &Call, tokens: usize, in_place: bool) -> bool {
    let by_default = defaults::norm_spread_by_default(call.algo, call.defaulted, call.comm.nranks, tokens, in_place);
    !call.algo.no_spread && (call.algo.spread || by_default)
}

/// How the one-shot LL form sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OneShotSends {
    /// Each block its own rows' units, before it writes those rows.
    WholeRows,
    /// An equal share of all the units from every block of the grid (the
    /// kernel's SYMM_NORM_SPREAD).
    Spread,
    /// Spread, and in place: the fenced entry (or with `batch` the
    /// batched entry's own fence), where no block writes its rows before
    /// every block has sent.
    SpreadFenced,
    /// Spread, in place, on the batched entry with its own packets
    /// (defaults.rs `norm_loopback`: `auto`'s wherever it batches,
    /// `loopback` named elsewhere): this rank's units go to its own slot
    /// as packets too, and a row is written once they are back
    /// (kernels/allreduce_norm.cu OWN, the entry `ll_batch_own`), no fence.
    SpreadOwnPackets,
}

/// The one-shot LL form's sends: spread as `spread` says, but in place
/// only when `spread` was asked for (`asked`), behind the fence. In place
/// a block writes `out`, the input, for its rows while the block that
/// sends those rows' input units to the peers may not have read them yet:
/// a peer then summed this rank's output instead of its input (fifteenth
/// session, 2 ranks, `ll+spread`, beside other processes: one warp of a
/// row wrong on the peer). The fenced entry (eighteenth session) waits for
/// every block's sends; not yet measured, so `auto`'s spread at 4 ranks
/// keeps whole rows in place, where a block sends its rows before it
/// writes them. The two-shot form needs no such care: it writes a
/// peer-owned row only after the owner's sums came back, which needed
/// this rank's sends of that row, and never sends its own rows.
/// The batched entry (`batch`) fences in place wherever it spreads, asked
/// or not (`batched`): its fence is a wait that hides behind the peers'
/// packets (kernels/allreduce_norm.cu SYMM_NORM_FENCE); with its own
/// packets (`loopback`, defaults.rs `norm_loopback`) it takes them back
/// instead.
fn one_shot_sends(spread: bool, asked: bool, in_place: bool, batched: bool, loopback: bool) -> OneShotSends {
    match (spread, in_place) {
        (false, _) => OneShotSends::WholeRows,
        (true, false) => OneShotSends::Spread,
        (true, true) if batched && loopback => OneShotSends::SpreadOwnPackets,
        (true, true) if asked || batched => OneShotSends::SpreadFenced,
        (true, true) => OneShotSends::WholeRows,
    }
}

/// What `out` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormOutput {
    /// The input's type.
    SameType,
    /// fp8 e4m3: y / scales[0] (a device float the caller gives).
    Fp8Tensor(*mut f32),
    /// fp8 e4m3: y / the row's scale, max|y| / 448, written to scales[row].
    Fp8Token(*mut f32),
}

/// The arguments of one call, as C passes them.
pub struct NormRequest {
    pub input: *const c_void,
    pub residual: *const c_void,
    pub weight: *const c_void,
    pub out: *mut c_void,
    pub residual_out: *mut c_void,
    pub tokens: usize,
    pub hidden: usize,
    pub eps: f32,
    pub dtype: RawDataType,
    pub output: NormOutput,
}

/// The kernels of the three forms, for one element type (and the one-shot
/// form's fenced entry, `OneShotSends::SpreadFenced`; with `batch` the
/// batched entry of each form, and the one-shot form's with its own
/// packets, `OneShotSends::SpreadOwnPackets`).
struct Kernels {
    ll: &'static CStr,
    ll_fenced: &'static CStr,
    ll_batch: &'static CStr,
    ll_batch_own: &'static CStr,
    ll_two_shot: &'static CStr,
    ll_two_shot_batch: &'static CStr,
    add_norm: &'static CStr,
    add_norm_batch: &'static CStr,
    by_stores: &'static CStr,
}

/// Kernel names for the element types the op exists for.
fn kernels(dtype: symmDataType_t) -> Option<Kernels> {
    use symmDataType_t::*;
    /// Every entry's name, for one kernels/allreduce_norm.cu suffix.
    macro_rules! entries {
        ($t:literal) => {
            Kernels {
                ll: const { cstr(concat!("symm_allreduce_norm_ll_", $t, "\0")) },
                ll_fenced: const { cstr(concat!("symm_allreduce_norm_ll_fenced_", $t, "\0")) },
                ll_batch: const { cstr(concat!("symm_allreduce_norm_ll_batch_", $t, "\0")) },
                ll_batch_own: const { cstr(concat!("symm_allreduce_norm_ll_batch_own_", $t, "\0")) },
                ll_two_shot: const { cstr(concat!("symm_allreduce_norm_ll2_", $t, "\0")) },
                ll_two_shot_batch: const { cstr(concat!("symm_allreduce_norm_ll2_batch_", $t, "\0")) },
                add_norm: const { cstr(concat!("symm_add_norm_", $t, "\0")) },
                add_norm_batch: const { cstr(concat!("symm_add_norm_batch_", $t, "\0")) },
                by_stores: const { cstr(concat!("symm_allreduce_norm_write_", $t, "\0")) },
            }
        };
    }
    const fn cstr(s: &'static str) -> &'static CStr {
        match CStr::from_bytes_with_nul(s.as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("kernel names are NUL-terminated once"),
        }
    }
    Some(match dtype {
        symmBfloat16 => entries!("bf16"),
        symmFloat16 => entries!("f16"),
        symmFloat32 => entries!("f32"),
        _ => return None,
    })
}

/// Whether the two-shot LL form serves `tokens` rows of `row_bytes` at
/// `nranks` ranks with LL slots of `ll_slot` bytes: every rank owns a row
/// (so every call hears from every peer, which the slots' two parities
/// rely on: kernels/ll.cuh), a slot holds an owner's share of rows twice
/// (8 data bytes in a 16-byte packet), and a rank's own slot a packet per
/// piece of every row (their sums of squares; `parts` pieces a row).
fn two_shot_fits(nranks: usize, tokens: usize, row_bytes: usize, ll_slot: u64, parts: u64) -> bool {
    if nranks < 3 || tokens < nranks {
        return false;
    }
    let share_packets = tokens.div_ceil(nranks) as u64 * (row_bytes as u64 / 8);
    2 * share_packets * 16 <= ll_slot && tokens as u64 * parts * 16 <= ll_slot
}

/// With `spread`, the pieces a row of the two-shot LL form: as many as
/// give every owned piece its own block within `max_grid` (a piece waits
/// for its siblings' sums of squares, so they must run at once), at most
/// 8, each at least 32 units; whole rows with per-token fp8 scales (the
/// row's largest value is taken in one block). At 4 ranks and 1 MiB of
/// hidden 4096 the 32 owned rows then go out from 128 SMs instead of 32
/// (docs/PERFORMANCE.md, sixth session's hypotheses).
fn two_shot_parts(spread: bool, per_token_scales: bool, nranks: usize, tokens: usize, units: u64, max_grid: u32) -> u64 {
    if !spread || per_token_scales {
        return 1;
    }
    let owned = tokens.div_ceil(nranks).max(1) as u64;
    (max_grid as u64 / owned).min(8).min(units / 32).max(1)
}

/// kernels/allreduce_norm.cu's SYMM_NORM_BATCH_THREADS and
/// SYMM_NORM_BATCH_UNITS: the batched entry's largest block, and the units
/// a thread of it holds at most (so rows of up to 16 KiB).
const NORM_BATCH_THREADS: u64 = 512;
const NORM_BATCH_UNITS: u64 = 4;
/// kernels/allreduce_norm.cu's SYMM_NORM_FENCE (NormArgs::flags): the
/// batched entry spreads in place behind its fence.
const NORM_BATCH_FENCE: u32 = 4;

/// The batched entry's block for rows of `units` units, `per` units a
/// thread (`batch=N`) where that keeps the block within
/// NORM_BATCH_THREADS (more a thread where it would not); None for rows
/// longer than it holds, which take the one-shot entry.
fn batch_threads(units: u64, per: u64) -> Option<u32> {
    (units <= NORM_BATCH_THREADS * NORM_BATCH_UNITS)
        .then(|| (units.div_ceil(per).div_ceil(32) * 32).clamp(32, NORM_BATCH_THREADS) as u32)
}

/// Threads for rows of `units` 8-byte units: one unit a thread up to a
/// full block, then up to NORM_MAX_UNITS each. At decode sizes a row's
/// peer packets are then polled by as many threads at once as it has
/// units: the polls of one thread follow each other.
fn threads_for(units: u64) -> u32 {
    (units.div_ceil(32) * 32).clamp(32, NORM_MAX_THREADS) as u32
}

/// The checks before anything is enqueued: shapes, element type, pointers,
/// alignment (16 bytes: the kernels move 8-byte units of rows that are
/// 16-byte multiples) and aliasing. Returns the element type.
fn check(r: &NormRequest) -> Result<symmDataType_t> {
    let Some(dtype) = symmDataType_t::from_raw(r.dtype) else {
        bail!(symmInvalidArgument, "datatype {} is not a symmDataType_t", r.dtype);
    };
    if kernels(dtype).is_none() {
        bail!(symmInvalidArgument, "datatype {dtype:?}: the fused all-reduce + RMSNorm takes symmBfloat16, symmFloat16 or symmFloat32");
    }
    let es = dtype.size();
    if r.hidden == 0 || !(r.hidden * es).is_multiple_of(16) {
        bail!(symmInvalidArgument, "hidden {} is not a positive multiple of {} elements (rows must be 16-byte multiples)", r.hidden, 16 / es);
    }
    let max_hidden = (NORM_MAX_UNITS * NORM_MAX_THREADS * 8) as usize / es;
    if r.hidden > max_hidden {
        bail!(symmNotSupported, "hidden {} is above the {max_hidden} elements a row may have ({dtype:?}: 64 KiB, held in one block's registers)", r.hidden);
    }
    if !(r.eps.is_finite() && r.eps >= 0.0) {
        bail!(symmInvalidArgument, "eps {} must be finite and not negative", r.eps);
    }
    let row_bytes = r.hidden * es;
    let Some(bytes) = r.tokens.checked_mul(row_bytes).filter(|&b| b <= isize::MAX as usize) else {
        bail!(symmInvalidArgument, "tokens {} x hidden {} overflows", r.tokens, r.hidden);
    };
    let (out_bytes, scales, scale_bytes) = match r.output {
        NormOutput::SameType => (bytes, 0, 0),
        NormOutput::Fp8Tensor(p) => (bytes / es, p as usize, 4),
        NormOutput::Fp8Token(p) => (bytes / es, p as usize, 4 * r.tokens),
    };
    // Scales: 0 bytes (skipped) when out has the input's type.
    let buffers: [(&str, usize, usize, usize); 6] = [
        ("input", r.input as usize, bytes, 16),
        ("residual", r.residual as usize, bytes, 16),
        ("weight", r.weight as usize, row_bytes, 16),
        ("out", r.out as usize, out_bytes, 16),
        ("residualOut", r.residual_out as usize, bytes, 16),
        ("scales", scales, scale_bytes, 4),
    ];
    for &(name, p, n, align) in &buffers {
        if n == 0 && name == "scales" {
            continue;
        }
        if p == 0 {
            bail!(symmInvalidArgument, "{name} is NULL");
        }
        if p % align != 0 {
            bail!(symmInvalidArgument, "{name} ({p:#x}) is not {align}-byte aligned");
        }
    }
    // out may be input (same type only) and residualOut may be residual,
    // exactly; nothing else may overlap (the two-kernel form writes out
    // before it reads residual).
    let same_type = r.output == NormOutput::SameType;
    let ranges = buffers.map(|(name, p, n, _)| (name, p as u64, n as u64));
    check_disjoint(&ranges, |a, b, same_start| {
        same_start && (a == "input" && b == "out" && same_type || a == "residual" && b == "residualOut")
    })
    .map_err(|e| e.context("only out = input (same type) and residualOut = residual may alias, exactly"))?;
    Ok(dtype)
}

/// Enqueue the fused op on `stream` (the communicator's context current).
pub fn all_reduce_add_rms_norm(comm: &Comm, stream: CUstream, r: &NormRequest) -> Result<()> {
    let dtype = check(r)?;
    // With an fp8 out, the two-kernel form sums in place in the input (out
    // cannot hold the sums): input is the all-reduce's output then.
    let sums = if r.output == NormOutput::SameType { r.out } else { r.input as *mut c_void };
    let Some(call) = Request::new(CollId::AllReduce, r.input, sums, r.tokens * r.hidden, r.dtype)
        .op(symmRedOp_t::symmSum as i32)
        .validate(comm, stream)?
    else {
        return Ok(()); // no tokens
    };
    let bytes = (r.tokens * r.hidden * dtype.size()) as usize;
    let (quant, scales) = match r.output {
        NormOutput::SameType => (NORM_SAME_TYPE, std::ptr::null_mut()),
        NormOutput::Fp8Tensor(p) => {
            comm.check_buffer(p.cast(), 4, "scales")?;
            (NORM_FP8_TENSOR, p)
        }
        NormOutput::Fp8Token(p) => {
            comm.check_buffer(p.cast(), 4 * r.tokens, "scales")?;
            (NORM_FP8_TOKEN, p)
        }
    };
    if quant != NORM_SAME_TYPE {
        comm.check_buffer(r.out, r.tokens * r.hidden, "out")?;
    }
    comm.check_buffer(r.residual, bytes, "residual")?;
    comm.check_buffer(r.residual_out, bytes, "residualOut")?;
    comm.check_buffer(r.weight, r.hidden * dtype.size(), "weight")?;
    let k = kernels(dtype).expect("checked");
    let units = (r.hidden * dtype.size() / 8) as u64;
    let row_bytes = r.hidden * dtype.size();
    // In place is only ever the same type (check: an fp8 out never aliases
    // the input), the one output the fenced entry writes (the batched one
    // writes every output).
    let in_place = std::ptr::eq(r.out, r.input);
    let spread = spread(&call, r.tokens, in_place);
    let form = choose_form(&FormInputs {
        nranks: comm.nranks,
        tokens: r.tokens,
        row_bytes,
        one_shot: call.use_ll((r.tokens * row_bytes) as u64),
        two_shot_allowed: call.ll_two_shot_allowed(),
        spread,
        per_token_scales: quant == NORM_FP8_TOKEN,
        by_stores: defaults::norm_by_stores(call.algo, call.defaulted, comm.nranks, bytes),
        ll_slot: comm.coll.ll_slot,
        half: comm.coll.half,
        max_grid: comm.coll.max_grid,
    });
    // What one block holds of a row: the whole row, or one of the two-shot
    // LL form's pieces.
    let block_units = match form {
        Form::TwoShotLl { parts } => units.div_ceil(parts),
        _ => units,
    };
    // The batched layout: with `batch=N` (or by default) each
    // form's batched entry where a block's part of a row fits one; always
    // for the form by stores, one unit a thread unless `batch=N` (or the
    // default) says otherwise.
    let per = defaults::norm_batch_units(call.algo, call.defaulted, comm.nranks, r.tokens);
    let batch_block = match form {
        Form::ByStores => batch_threads(units, per.unwrap_or(1)),
        _ => per.and_then(|per| batch_threads(block_units, per)),
    };
    let sends = match form {
        Form::OneShotLl => {
            let loopback = defaults::norm_loopback(call.algo, call.defaulted, comm.nranks);
            one_shot_sends(spread, call.algo.spread, in_place, batch_block.is_some(), loopback)
        }
        _ => OneShotSends::WholeRows,
    };
    let spread_sends = sends != OneShotSends::WholeRows;
    let mut n = NormArgs {
        coll: call.args(),
        residual: r.residual as u64,
        residual_out: r.residual_out as u64,
        weight: r.weight as u64,
        rows: r.tokens as u64,
        hidden: r.hidden as u32,
        eps: r.eps,
        scales: scales as u64,
        quant,
        flags: if spread_sends { NORM_SPREAD } else { 0 }
            | if call.algo.prefetch { NORM_PREFETCH } else { 0 }
            | if batch_block.is_some() && sends == OneShotSends::SpreadFenced { NORM_BATCH_FENCE } else { 0 },
    };
    n.coll.recv = r.out as u64;
    if form == Form::TwoKernel && comm.nranks > 1 {
        // The sums into out by the all-reduce's own choice of algorithm;
        // the norm kernel reads them there. (One rank has nothing to add:
        // the norm kernel reads the input.)
        allreduce::all_reduce(&call)?;
        n.coll.send = sums as u64;
    }
    let max_grid = comm.coll.max_grid as u64;
    let tokens = r.tokens as u64;
    let grid = match form {
        // At least one block per SPREAD_UNITS of the message, so that no SM
        // sends more than the all-reduce's LL kernel gives one.
        Form::OneShotLl if spread_sends => tokens.max((tokens * units).div_ceil(SPREAD_UNITS)).min(max_grid),
        Form::OneShotLl => tokens.min(max_grid),
        Form::TwoShotLl { parts: 1 } => tokens.min(max_grid),
        Form::TwoShotLl { parts } => {
            // A block for every owned piece (two_shot_parts keeps that within max_grid).
            n.flags |= (parts as u32) << NORM_PARTS_SHIFT;
            tokens.max(tokens.div_ceil(comm.nranks as u64) * parts).min(max_grid)
        }
        Form::ByStores => allreduce_norm_write::grid(comm.nranks, r.tokens, comm.coll.max_grid) as u64,
        Form::TwoKernel => tokens.min(65535),
    };
    let batched = batch_block.is_some();
    let kernel = match form {
        Form::OneShotLl if sends == OneShotSends::SpreadOwnPackets => k.ll_batch_own, // batched only
        Form::OneShotLl if batched => k.ll_batch,
        Form::OneShotLl if sends == OneShotSends::SpreadFenced => k.ll_fenced,
        Form::OneShotLl => k.ll,
        Form::TwoShotLl { .. } if batched => k.ll_two_shot_batch,
        Form::TwoShotLl { .. } => k.ll_two_shot,
        Form::ByStores => k.by_stores,
        Form::TwoKernel if batched => k.add_norm_batch,
        Form::TwoKernel => k.add_norm,
    };
    // The LL forms and the form by stores wait for their stream's previous
    // kernel themselves (ll.cuh, allreduce_norm_write.cu), and so does the
    // batched norm kernel after our all-reduce, having asked for the
    // residual and the weight first (never at one rank: there the previous
    // kernel is the caller's, which may write them).
    let dependent = match form {
        Form::OneShotLl | Form::TwoShotLl { .. } | Form::ByStores => true,
        Form::TwoKernel => batched && comm.nranks > 1,
    } && call.mark_dependent(&mut n.coll);
    if form == Form::ByStores {
        allreduce_norm_write::prepare(&call, &mut n);
    }
    let f = comm.device.module().function(kernel)?;
    let mut params = [(&mut n as *mut NormArgs).cast::<c_void>()];
    let block = batch_block.unwrap_or_else(|| threads_for(block_units));
    let cfg = LaunchConfig { grid: grid as u32, block, shared_mem: 0 };
    launch::launch_as(f, cfg, stream, &mut params, dependent)
}

/// Which form runs a call (each rank chooses the same: nothing here
/// depends on the buffers' kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// One kernel, every rank's rows to every peer as LL packets.
    OneShotLl,
    /// One kernel, the rows to their owners and back as LL packets, in
    /// `parts` pieces a row.
    TwoShotLl { parts: u64 },
    /// One kernel, the rows to their owners and back through scratch
    /// (`normwrite`: allreduce_norm_write.rs).
    ByStores,
    /// The library's all-reduce, then the norm kernel (at one rank the
    /// norm kernel alone).
    TwoKernel,
}

/// What the choice of form depends on: the call's shape, the
/// communicator's slots and scratch, and the algorithm (the same on every
/// rank).
struct FormInputs {
    nranks: usize,
    tokens: usize,
    row_bytes: usize,
    /// The message fits the one-shot LL form (`Call::use_ll`).
    one_shot: bool,
    /// The two-shot LL form may run (`Call::ll_two_shot_allowed`).
    two_shot_allowed: bool,
    spread: bool,
    per_token_scales: bool,
    /// `normwrite`.
    by_stores: bool,
    ll_slot: u64,
    half: u64,
    max_grid: u32,
}

/// The form: the one-shot LL form up to the all-reduce's LL limit; above,
/// the two-shot LL form where allowed and it fits the slots (in pieces a
/// row where they fit, else whole rows); with `normwrite` the form by
/// stores where the scratch holds the message and a row fits its block;
/// else the two kernels.
fn choose_form(f: &FormInputs) -> Form {
    if f.one_shot {
        return Form::OneShotLl;
    }
    let units = (f.row_bytes / 8) as u64;
    let pieces = two_shot_parts(f.spread, f.per_token_scales, f.nranks, f.tokens, units, f.max_grid);
    let fits = |p: &u64| two_shot_fits(f.nranks, f.tokens, f.row_bytes, f.ll_slot, *p);
    if let Some(parts) = [pieces, 1].into_iter().find(fits).filter(|_| f.two_shot_allowed) {
        return Form::TwoShotLl { parts };
    }
    let max_row = (NORM_BATCH_THREADS * NORM_BATCH_UNITS * 8) as usize;
    if f.by_stores && allreduce_norm_write::fits(f.nranks, f.tokens, f.row_bytes, max_row, f.half) {
        return Form::ByStores;
    }
    Form::TwoKernel
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(hidden: usize, dtype: symmDataType_t) -> NormRequest {
        NormRequest {
            input: 0x1000 as *const c_void,
            residual: 0x100000 as *const c_void,
            weight: 0x200000 as *const c_void,
            out: 0x300000 as *mut c_void,
            residual_out: 0x400000 as *mut c_void,
            tokens: 4,
            hidden,
            eps: 1e-6,
            dtype: dtype as RawDataType,
            output: NormOutput::SameType,
        }
    }

    #[test]
    fn two_shot_takes_what_the_slots_hold() {
        let slot = 2 * crate::config::LL_MAX_BYTES_DEFAULT; // as CollState makes it by default
        // 1 MiB of 4096 bf16 rows at 4 ranks: 32 rows a share, twice, fill a slot.
        assert!(two_shot_fits(4, 128, 8192, slot, 1));
        assert!(!two_shot_fits(4, 129, 8192, slot, 1), "33 rows a share overflow");
        assert!(two_shot_fits(8, 256, 8192, slot, 1), "2 MiB at 8 ranks");
        assert!(!two_shot_fits(2, 64, 8192, slot, 1), "two ranks keep the one-shot form");
        assert!(!two_shot_fits(4, 3, 16, slot, 1), "a rank without rows would hear nothing from its peers");
        assert!(two_shot_fits(4, 4, 16, slot, 1));
        assert!(two_shot_fits(8, 65536, 16, slot, 1));
        assert!(!two_shot_fits(8, 65537, 16, slot, 1), "a packet a row in the own slot");
        assert!(two_shot_fits(4, 128, 8192, slot, 4), "1 MiB of hidden 4096 in 4 pieces a row");
        assert!(!two_shot_fits(8, 65536, 16, slot, 2), "a packet a piece in the own slot");
    }

    #[test]
    fn spread_pieces_give_every_owned_piece_a_block() {
        // 1 MiB at 4 ranks on 132 SMs: 32 owned rows of 1024 units, 4 pieces (128 blocks).
        assert_eq!(two_shot_parts(true, false, 4, 128, 1024, 132), 4);
        assert_eq!(two_shot_parts(true, false, 4, 64, 2048, 132), 8, "hidden 8192: 16 owned rows");
        assert_eq!(two_shot_parts(true, false, 4, 16, 1024, 132), 8, "at most 8");
        assert_eq!(two_shot_parts(true, false, 4, 16, 64, 132), 2, "pieces of at least 32 units");
        assert_eq!(two_shot_parts(true, false, 3, 1000, 1024, 132), 1, "more owned rows than blocks");
        assert_eq!(two_shot_parts(false, false, 4, 128, 1024, 132), 1, "only with spread");
        assert_eq!(two_shot_parts(true, true, 4, 128, 1024, 132), 1, "per-token scales need whole rows");
        for (n, tokens, units) in [(3, 131, 512), (4, 128, 1024), (8, 256, 1024), (5, 7, 96)] {
            let parts = two_shot_parts(true, false, n, tokens, units, 132);
            assert!(tokens.div_ceil(n) as u64 * parts <= 132 || parts == 1, "{n} {tokens} {units}");
            assert!(threads_for(units.div_ceil(parts)) as u64 * NORM_MAX_UNITS >= units.div_ceil(parts));
        }
    }

    #[test]
    fn the_one_shot_form_spreads_in_place_only_when_asked_and_then_fences() {
        use OneShotSends::*;
        for batch in [false, true] {
            for lb in [false, true] {
                assert_eq!(one_shot_sends(true, false, false, batch, lb), Spread, "auto's spread out of place");
                assert_eq!(one_shot_sends(true, true, false, batch, lb), Spread, "own packets only in place");
                assert_eq!(one_shot_sends(false, false, true, batch, lb), WholeRows);
                assert_eq!(one_shot_sends(false, true, true, batch, lb), WholeRows);
                assert_eq!(one_shot_sends(false, false, false, batch, lb), WholeRows);
            }
            assert_eq!(one_shot_sends(true, true, true, batch, false), SpreadFenced, "asked in place: behind a fence");
        }
        assert_eq!(one_shot_sends(true, false, true, false, false), WholeRows, "auto in place: a row's sends and writes stay in one block");
        assert_eq!(one_shot_sends(true, false, true, true, false), SpreadFenced, "batched: auto's spread in place too, behind its fence");
        assert_eq!(one_shot_sends(true, true, true, false, true), SpreadFenced, "unbatched: loopback is the batched entry's");
        assert_eq!(one_shot_sends(true, false, true, false, true), WholeRows);
        for asked in [false, true] {
            assert_eq!(one_shot_sends(true, asked, true, true, true), SpreadOwnPackets, "batched with loopback: no fence");
        }
    }

    #[test]
    fn forms_in_order_ll_then_two_shot_ll_then_by_stores() {
        let slot = 2 * crate::config::LL_MAX_BYTES_DEFAULT; // 3+ ranks' default slots
        let half = 16u64 << 20; // the default scratch's quarter
        // 4 ranks, auto: hidden 4096 bf16 (8 KiB rows).
        let base = FormInputs {
            nranks: 4,
            tokens: 128,
            row_bytes: 8192,
            one_shot: false,
            two_shot_allowed: true,
            spread: true,
            per_token_scales: false,
            by_stores: false,
            ll_slot: slot,
            half,
            max_grid: 132,
        };
        let form = |f: FormInputs| choose_form(&f);
        assert_eq!(form(FormInputs { one_shot: true, by_stores: true, ..base }), Form::OneShotLl);
        assert_eq!(form(FormInputs { ..base }), Form::TwoShotLl { parts: 4 }, "1 MiB at 4 ranks: 4 pieces a row");
        assert_eq!(form(FormInputs { by_stores: true, ..base }), Form::TwoShotLl { parts: 4 }, "the LL form first where it fits");
        assert_eq!(form(FormInputs { spread: false, ..base }), Form::TwoShotLl { parts: 1 });
        assert_eq!(form(FormInputs { per_token_scales: true, ..base }), Form::TwoShotLl { parts: 1 }, "fp8 per token: whole rows");
        // 2 MiB (hidden 8192, 16 KiB rows) fits no LL slot.
        let wide = FormInputs { row_bytes: 16384, ..base };
        assert_eq!(form(FormInputs { ..wide }), Form::TwoKernel);
        assert_eq!(form(FormInputs { by_stores: true, ..wide }), Form::ByStores);
        assert_eq!(form(FormInputs { by_stores: true, nranks: 2, two_shot_allowed: false, ..wide }), Form::ByStores);
        assert_eq!(form(FormInputs { by_stores: true, two_shot_allowed: false, ..base }), Form::ByStores, "LL two-shot off");
        assert_eq!(form(FormInputs { by_stores: true, row_bytes: 32768, ..wide }), Form::TwoKernel, "rows over 16 KiB");
        assert_eq!(form(FormInputs { by_stores: true, tokens: 1024, nranks: 2, ..wide }), Form::TwoKernel, "16 MiB overflows a half");
        assert_eq!(form(FormInputs { by_stores: true, nranks: 1, two_shot_allowed: false, ..wide }), Form::TwoKernel, "one rank");
        assert_eq!(form(FormInputs { by_stores: true, tokens: 1, nranks: 8, ..wide }), Form::ByStores, "ranks without rows");
    }

    #[test]
    fn rows_fit_one_block() {
        assert_eq!(batch_threads(1024, 4), Some(256), "hidden 4096 bf16, batch=4");
        assert_eq!(batch_threads(1024, 1), Some(512), "two units a thread where one would take 1,024 threads");
        assert_eq!(batch_threads(2048, 2), Some(512));
        assert_eq!(batch_threads(2048, 4), Some(512), "hidden 8192 bf16");
        assert_eq!(batch_threads(2049, 4), None, "above 16 KiB a row: the one-shot entry");
        assert_eq!(batch_threads(3, 4), Some(32));
        for units in 1..=2048 {
            for per in [1, 2, 4] {
                let t = batch_threads(units, per).unwrap() as u64;
                assert!(t.is_multiple_of(32) && t <= NORM_BATCH_THREADS && t * NORM_BATCH_UNITS >= units, "{units} units, {per}");
            }
        }
        assert_eq!(threads_for(1), 32);
        assert_eq!(threads_for(1024), 1024, "hidden 4096 bf16: one unit a thread");
        assert_eq!(threads_for(2048), 1024, "hidden 8192 bf16: two");
        assert_eq!(threads_for(100), 128);
        for units in [1, 7, 100, 1000, 4096, 8192] {
            let t = threads_for(units) as u64;
            assert!(t.is_multiple_of(32) && t <= NORM_MAX_THREADS && t * NORM_MAX_UNITS >= units, "{units}: {t}");
        }
    }

    #[test]
    fn checks_shapes_types_alignment_and_aliasing() {
        use symmDataType_t::*;
        assert!(check(&req(4096, symmBfloat16)).is_ok());
        assert!(check(&req(4096, symmFloat32)).is_ok());
        assert!(check(&req(4096, symmInt32)).unwrap_err().msg.contains("symmBfloat16"));
        assert!(check(&req(12, symmBfloat16)).unwrap_err().msg.contains("multiple of 8"));
        assert!(check(&req(0, symmFloat16)).is_err());
        let big = check(&req(65536, symmBfloat16)).unwrap_err();
        assert_eq!(big.code, crate::error::symmResult_t::symmNotSupported);
        let mut r = req(4096, symmBfloat16);
        r.eps = f32::NAN;
        assert!(check(&r).unwrap_err().msg.contains("eps"));
        let mut r = req(4096, symmBfloat16);
        r.weight = 0x200008 as *const c_void;
        assert!(check(&r).unwrap_err().msg.contains("16-byte"));
        let mut r = req(4096, symmBfloat16);
        r.out = r.input as *mut c_void;
        r.residual_out = r.residual as *mut c_void;
        assert!(check(&r).is_ok(), "the two aliases it supports");
        let mut r = req(4096, symmBfloat16);
        r.out = r.residual as *mut c_void;
        assert!(check(&r).unwrap_err().msg.contains("overlap"));
        let mut r = req(4096, symmBfloat16);
        r.out = (r.input as usize + 16) as *mut c_void;
        assert!(check(&r).unwrap_err().msg.contains("input and out overlap"));
        let mut r = req(4096, symmBfloat16);
        r.residual = std::ptr::null();
        assert!(check(&r).unwrap_err().msg.contains("residual is NULL"));
    }

    #[test]
    fn fp8_outputs_check_their_scales_and_never_alias_the_input() {
        use symmDataType_t::*;
        let mut r = req(4096, symmBfloat16);
        r.output = NormOutput::Fp8Token(0x500000 as *mut f32);
        assert!(check(&r).is_ok());
        r.output = NormOutput::Fp8Tensor(std::ptr::null_mut());
        assert!(check(&r).unwrap_err().msg.contains("scales is NULL"));
        r.output = NormOutput::Fp8Tensor(0x500002 as *mut f32);
        assert!(check(&r).unwrap_err().msg.contains("4-byte"));
        r.output = NormOutput::Fp8Token(0x500000 as *mut f32);
        r.out = r.input as *mut c_void;
        assert!(check(&r).unwrap_err().msg.contains("input and out overlap"), "an fp8 out cannot be the input");
        let mut r = req(4096, symmBfloat16);
        r.output = NormOutput::Fp8Token(r.residual_out as *mut f32);
        assert!(check(&r).unwrap_err().msg.contains("overlap"), "scales inside residualOut");
    }
}
