//! The matmul descriptor of the C API and the checks every fused call makes
//! before it touches the communicator or the GPU.

use std::ffi::{c_int, c_void};

use super::blaslt::{is_fp8, Scale};
use crate::error::{bail, Result};
use crate::types::{symmDataType_t, RawDataType};

/// How fp8 inputs are scaled (`symmMatmulDesc_t::scaleMode`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum symmScaleMode_t {
    /// No scales (factor 1).
    symmScaleNone = 0,
    /// One float for A and one for B (`scaled_mm` with per-tensor scales).
    symmScaleTensor = 1,
    /// One float per row of A and one per column of C (per-token and
    /// per-channel scales; cuBLASLt's outer-vector mode, Hopper, cuBLASLt
    /// 12.9 or newer).
    symmScaleRowwise = 2,
}

/// As a plain int at the boundary (renamed to symmScaleMode_t in the header).
pub type RawScaleMode = c_int;

/// How a fused call multiplies. Fill it with symmMatmulDescInit, then
/// change what differs. Row-major matrices; leading dimensions in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct symmMatmulDesc_t {
    /// sizeof(symmMatmulDesc_t) as compiled by the caller; later versions
    /// only append fields.
    pub structSize: usize,
    /// A's element type: bf16, fp16, fp32 (multiplied in TF32), fp8 e4m3/e5m2.
    pub aType: RawDataType,
    /// B's element type: aType, or for fp8 the other fp8 type (not e5m2 x e5m2).
    pub bType: RawDataType,
    /// C's element type: aType or fp32 (fp8 inputs: bf16, fp16 or fp32).
    pub cType: RawDataType,
    /// 0: B is k x n; 1: B is n x k (framework weights), C = A * B^T. fp8 needs 1.
    pub transB: c_int,
    /// Leading dimensions in elements; 0 = packed: lda = k, ldb = n (k with
    /// transB), ldc = n.
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    /// C = A * B + beta * C.
    pub beta: f32,
    pub scaleMode: RawScaleMode,
    /// Device pointer: 1 float (tensor) or one per row of this rank's A (row-wise).
    pub aScale: *const f32,
    /// Device pointer: 1 float (tensor) or one per column of C (row-wise).
    pub bScale: *const f32,
    /// symmAllGatherMatmul only: optional output, the gathered A
    /// ((nranks * mShard) x k, ld = k). NULL: the gathered rows live in the
    /// communicator's workspace only.
    pub aGathered: *mut c_void,
    /// Pipeline chunks per rank's shard; 0 = default. With one rank the
    /// shard itself is cut into this many GEMMs.
    pub chunksPerRank: c_int,
}

/// What a fused call is, checked.
#[derive(Clone, Copy, Debug)]
pub struct Matmul {
    pub a_type: symmDataType_t,
    pub b_type: symmDataType_t,
    pub c_type: symmDataType_t,
    pub trans_b: bool,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub beta: f32,
    pub scale: Scale,
    pub a_scale: u64,
    pub b_scale: u64,
    pub a_gathered: u64,
    /// 0: default.
    pub chunks: usize,
}

const GEMM_TYPES: [symmDataType_t; 5] = [
    symmDataType_t::symmBfloat16,
    symmDataType_t::symmFloat16,
    symmDataType_t::symmFloat32,
    symmDataType_t::symmFloat8e4m3,
    symmDataType_t::symmFloat8e5m2,
];

fn gemm_type(raw: RawDataType, what: &str) -> Result<symmDataType_t> {
    let Some(t) = symmDataType_t::from_raw(raw) else {
        bail!(symmInvalidArgument, "desc->{what} {raw} is not a symmDataType_t");
    };
    if !GEMM_TYPES.contains(&t) {
        bail!(symmNotSupported, "desc->{what} {t:?}: the fused matmul ops take bf16, fp16, fp32 and fp8 (e4m3, e5m2)");
    }
    Ok(t)
}

/// The defaults of symmMatmulDescInit.
pub fn init(dtype: RawDataType) -> Result<symmMatmulDesc_t> {
    let t = gemm_type(dtype, "dtype")?;
    // fp8 results are not offered: fp8 inputs default to a bf16 C.
    let c = if is_fp8(t) { symmDataType_t::symmBfloat16 } else { t };
    Ok(symmMatmulDesc_t {
        structSize: std::mem::size_of::<symmMatmulDesc_t>(),
        aType: t as RawDataType,
        bType: t as RawDataType,
        cType: c as RawDataType,
        transB: 0,
        lda: 0,
        ldb: 0,
        ldc: 0,
        beta: 0.0,
        scaleMode: symmScaleMode_t::symmScaleNone as RawScaleMode,
        aScale: std::ptr::null(),
        bScale: std::ptr::null(),
        aGathered: std::ptr::null_mut(),
        chunksPerRank: 0,
    })
}

/// Check a descriptor for a multiply with inner dimension `k` and `n`
/// columns of C (per rank: k is kShard for reduce-scatter).
pub fn check(d: &symmMatmulDesc_t, n: usize, k: usize, all_gather: bool) -> Result<Matmul> {
    let size = std::mem::size_of::<symmMatmulDesc_t>();
    if d.structSize < size {
        bail!(
            symmInvalidArgument,
            "desc->structSize is {} but sizeof(symmMatmulDesc_t) is {size}; fill the descriptor with symmMatmulDescInit",
            d.structSize
        );
    }
    if d.structSize > size {
        bail!(
            symmNotSupported,
            "desc->structSize is {}, larger than this library's symmMatmulDesc_t ({size} bytes): the caller was built \
             against a newer symmcomm",
            d.structSize
        );
    }
    let a_type = gemm_type(d.aType, "aType")?;
    let b_type = gemm_type(d.bType, "bType")?;
    let c_type = gemm_type(d.cType, "cType")?;
    let fp8 = is_fp8(a_type);
    if fp8 != is_fp8(b_type) || (!fp8 && a_type != b_type) {
        bail!(symmInvalidArgument, "desc->aType {a_type:?} and bType {b_type:?} differ; only the two fp8 types mix");
    }
    if fp8 && a_type == symmDataType_t::symmFloat8e5m2 && b_type == symmDataType_t::symmFloat8e5m2 {
        bail!(symmNotSupported, "fp8 e5m2 x e5m2 has no cuBLASLt kernel; make A or B e4m3");
    }
    if is_fp8(c_type) || (!fp8 && c_type != a_type && c_type != symmDataType_t::symmFloat32) {
        bail!(
            symmNotSupported,
            "desc->cType {c_type:?} with {a_type:?} inputs: C is {}",
            if fp8 { "bf16, fp16 or fp32 for fp8 inputs" } else { "the input type or fp32" }
        );
    }
    let trans_b = match d.transB {
        0 => false,
        1 => true,
        t => bail!(symmInvalidArgument, "desc->transB is {t}; pass 0 (B is k x n) or 1 (B is n x k)"),
    };
    if fp8 && !trans_b {
        bail!(
            symmNotSupported,
            "fp8 inputs need desc->transB = 1 (B given as n x k, as framework weights are): cuBLASLt's fp8 kernels \
             only take that layout; transpose B once ahead of time"
        );
    }
    let lda = if d.lda == 0 { k } else { d.lda };
    let (b_cols, b_name) = if trans_b { (k, "k (B is n x k)") } else { (n, "n (B is k x n)") };
    let ldb = if d.ldb == 0 { b_cols } else { d.ldb };
    let ldc = if d.ldc == 0 { n } else { d.ldc };
    if lda < k {
        bail!(symmInvalidArgument, "desc->lda {lda} is smaller than k {k}");
    }
    if ldb < b_cols {
        bail!(symmInvalidArgument, "desc->ldb {ldb} is smaller than {b_name}");
    }
    if ldc < n {
        bail!(symmInvalidArgument, "desc->ldc {ldc} is smaller than n {n}");
    }
    if !d.beta.is_finite() {
        bail!(symmInvalidArgument, "desc->beta is {}", d.beta);
    }
    let scale = match d.scaleMode {
        0 => Scale::None,
        1 => Scale::Tensor,
        2 => Scale::Rowwise,
        m => bail!(symmInvalidArgument, "desc->scaleMode {m} is not a symmScaleMode_t (0..2)"),
    };
    if scale != Scale::None {
        if !fp8 {
            bail!(symmNotSupported, "desc->scaleMode {scale:?} applies to fp8 inputs; {a_type:?} inputs take no scales");
        }
        if d.aScale.is_null() || d.bScale.is_null() {
            bail!(symmInvalidArgument, "desc->scaleMode {scale:?} needs desc->aScale and desc->bScale (device pointers); one is NULL");
        }
    }
    if !all_gather && !d.aGathered.is_null() {
        bail!(symmInvalidArgument, "desc->aGathered is an output of symmAllGatherMatmul only; pass NULL");
    }
    if d.chunksPerRank < 0 {
        bail!(symmInvalidArgument, "desc->chunksPerRank is {}; pass 0 (default) or a positive count", d.chunksPerRank);
    }
    Ok(Matmul {
        a_type,
        b_type,
        c_type,
        trans_b,
        lda,
        ldb,
        ldc,
        beta: d.beta,
        scale,
        a_scale: d.aScale as u64,
        b_scale: d.bScale as u64,
        a_gathered: d.aGathered as u64,
        chunks: d.chunksPerRank as usize,
    })
}

impl Matmul {
    /// Bytes an `rows x cols` matrix with leading dimension `ld` spans.
    pub fn extent(rows: usize, cols: usize, ld: usize, elem: usize) -> Result<usize> {
        if rows == 0 || cols == 0 {
            return Ok(0);
        }
        (rows - 1)
            .checked_mul(ld)
            .and_then(|x| x.checked_add(cols))
            .and_then(|x| x.checked_mul(elem))
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| crate::error::err!(symmInvalidArgument, "a {rows} x {cols} matrix with ld {ld} overflows the address space"))
    }

    /// Bytes of A (`rows` x k), B and C (`c_rows` x n).
    pub fn extents(&self, rows: usize, c_rows: usize, n: usize, k: usize) -> Result<[usize; 3]> {
        let b = if self.trans_b { Self::extent(n, k, self.ldb, self.b_type.size())? } else { Self::extent(k, n, self.ldb, self.b_type.size())? };
        Ok([Self::extent(rows, k, self.lda, self.a_type.size())?, b, Self::extent(c_rows, n, self.ldc, self.c_type.size())?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::symmResult_t::*;

    fn bf16() -> symmMatmulDesc_t {
        init(symmDataType_t::symmBfloat16 as i32).unwrap()
    }

    #[test]
    fn layout_is_the_contract() {
        assert_eq!(std::mem::size_of::<symmMatmulDesc_t>(), 88);
        assert_eq!(std::mem::offset_of!(symmMatmulDesc_t, beta), 48);
        assert_eq!(std::mem::offset_of!(symmMatmulDesc_t, chunksPerRank), 80);
    }

    #[test]
    fn defaults_are_packed_and_valid() {
        let m = check(&bf16(), 64, 32, true).unwrap();
        assert_eq!((m.lda, m.ldb, m.ldc), (32, 64, 64));
        let mut d = bf16();
        d.transB = 1;
        assert_eq!(check(&d, 64, 32, true).unwrap().ldb, 32);
        let f8 = init(symmDataType_t::symmFloat8e4m3 as i32).unwrap();
        assert_eq!(f8.cType, symmDataType_t::symmBfloat16 as i32);
        assert_eq!(init(symmDataType_t::symmInt32 as i32).unwrap_err().code, symmNotSupported);
        assert_eq!(init(99).unwrap_err().code, symmInvalidArgument);
    }

    /// A descriptor's mutation, the result it must give, words of its message.
    type BadCase = (Box<dyn Fn(&mut symmMatmulDesc_t)>, crate::error::symmResult_t, &'static str);

    #[test]
    fn bad_descriptors() {
        let cases: Vec<BadCase> = vec![
            (Box::new(|d| d.structSize = 8), symmInvalidArgument, "structSize"),
            (Box::new(|d| d.structSize = 4096), symmNotSupported, "newer"),
            (Box::new(|d| d.aType = 42), symmInvalidArgument, "aType"),
            (Box::new(|d| d.bType = symmDataType_t::symmFloat16 as i32), symmInvalidArgument, "differ"),
            (Box::new(|d| d.cType = symmDataType_t::symmFloat16 as i32), symmNotSupported, "cType"),
            (Box::new(|d| d.transB = 2), symmInvalidArgument, "transB"),
            (Box::new(|d| d.lda = 31), symmInvalidArgument, "lda"),
            (Box::new(|d| d.ldb = 63), symmInvalidArgument, "ldb"),
            (Box::new(|d| d.ldc = 1), symmInvalidArgument, "ldc"),
            (Box::new(|d| d.beta = f32::NAN), symmInvalidArgument, "beta"),
            (Box::new(|d| d.scaleMode = 7), symmInvalidArgument, "scaleMode"),
            (Box::new(|d| d.scaleMode = 1), symmNotSupported, "fp8"),
            (Box::new(|d| d.chunksPerRank = -1), symmInvalidArgument, "chunksPerRank"),
        ];
        for (edit, code, word) in cases {
            let mut d = bf16();
            edit(&mut d);
            let e = check(&d, 64, 32, true).unwrap_err();
            assert_eq!(e.code, code, "{word}: {}", e.msg);
            assert!(e.msg.contains(word), "{word}: {}", e.msg);
        }
        let mut d = bf16();
        d.aGathered = 16 as *mut c_void;
        assert!(check(&d, 64, 32, false).unwrap_err().msg.contains("aGathered"));
    }

    #[test]
    fn fp8_rules() {
        let mut d = init(symmDataType_t::symmFloat8e4m3 as i32).unwrap();
        assert!(check(&d, 64, 32, true).unwrap_err().msg.contains("transB = 1"));
        d.transB = 1;
        check(&d, 64, 32, true).unwrap();
        d.scaleMode = 2;
        assert_eq!(check(&d, 64, 32, true).unwrap_err().code, symmInvalidArgument);
        d.aScale = 256 as *const f32;
        d.bScale = 512 as *const f32;
        assert_eq!(check(&d, 64, 32, true).unwrap().scale, Scale::Rowwise);
        d.bType = symmDataType_t::symmFloat8e5m2 as i32;
        check(&d, 64, 32, true).unwrap();
        d.aType = symmDataType_t::symmFloat8e5m2 as i32;
        assert!(check(&d, 64, 32, true).unwrap_err().msg.contains("e5m2 x e5m2"));
        d.aType = symmDataType_t::symmFloat8e4m3 as i32;
        d.cType = symmDataType_t::symmFloat8e4m3 as i32;
        assert_eq!(check(&d, 64, 32, true).unwrap_err().code, symmNotSupported);
    }

    #[test]
    fn extents() {
        assert_eq!(Matmul::extent(3, 4, 10, 2).unwrap(), (2 * 10 + 4) * 2);
        assert_eq!(Matmul::extent(0, 4, 10, 2).unwrap(), 0);
        assert!(Matmul::extent(usize::MAX / 2, 4, 10, 2).is_err());
    }
}
