//! cuBLASLt, loaded at run time with `dlopen`, and the GEMMs the fused ops
//! run through it.
//!
//! The library is optional: symmcomm loads and works without it, and the
//! fused calls then fail with `symmNotSupported` naming what was looked
//! for. The loader never panics: every entry point is resolved once, up
//! front, and a missing one is an error. Types and enum values come from
//! cudarc's `cublaslt` bindings (generated from the CUDA 13 header); their
//! functions are not called, since cudarc's loader panics when the library
//! or a symbol is missing.
//!
//! Row-major `C (m x n) = A (m x k) * op(B)` is cuBLASLt's column-major
//! `C^T (n x m) = op(B)^T * A^T`: cuBLASLt's "A" is our B (transposed when
//! B is given as n x k) and its "B" is our A, never transposed. That is the
//! "TN" layout fp8 kernels need, with B given as n x k (transB = 1).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys::CUstream;

use crate::config;
use crate::error::{bail, err, symmResult_t, Error, Result};
use crate::types::symmDataType_t;

type Status = u32;
const SUCCESS: Status = 0;
const NOT_SUPPORTED: Status = 15;
type Handle = *mut c_void;
type Desc = *mut c_void;

/// `cublasLtMatmulHeuristicResult_t`, with the status as a plain number
/// (a value cudarc's enum lacks would be undefined behaviour in Rust).
#[repr(C)]
#[derive(Clone, Copy)]
struct HeuristicResult {
    algo: lt::cublasLtMatmulAlgo_t,
    workspace_size: usize,
    state: u32,
    waves_count: f32,
    reserved: [c_int; 4],
}
const _: () = assert!(std::mem::size_of::<HeuristicResult>() == std::mem::size_of::<lt::cublasLtMatmulHeuristicResult_t>());

/// The entry points the fused ops use.
struct Fns {
    create: unsafe extern "C" fn(*mut Handle) -> Status,
    destroy: unsafe extern "C" fn(Handle) -> Status,
    get_version: unsafe extern "C" fn() -> usize,
    desc_create: unsafe extern "C" fn(*mut Desc, u32, u32) -> Status,
    desc_destroy: unsafe extern "C" fn(Desc) -> Status,
    desc_set: unsafe extern "C" fn(Desc, u32, *const c_void, usize) -> Status,
    layout_create: unsafe extern "C" fn(*mut Desc, u32, u64, u64, i64) -> Status,
    layout_destroy: unsafe extern "C" fn(Desc) -> Status,
    pref_create: unsafe extern "C" fn(*mut Desc) -> Status,
    pref_destroy: unsafe extern "C" fn(Desc) -> Status,
    pref_set: unsafe extern "C" fn(Desc, u32, *const c_void, usize) -> Status,
    #[allow(clippy::type_complexity)]
    heuristic: unsafe extern "C" fn(Handle, Desc, Desc, Desc, Desc, Desc, Desc, c_int, *mut HeuristicResult, *mut c_int) -> Status,
    #[allow(clippy::type_complexity)]
    matmul: unsafe extern "C" fn(
        Handle,
        Desc,
        *const c_void,
        *const c_void,
        Desc,
        *const c_void,
        Desc,
        *const c_void,
        *const c_void,
        Desc,
        *mut c_void,
        Desc,
        *const lt::cublasLtMatmulAlgo_t,
        *mut c_void,
        usize,
        CUstream,
    ) -> Status,
    status_string: Option<unsafe extern "C" fn(Status) -> *const c_char>,
}

/// The loaded library (process-wide, never unloaded).
pub struct Library {
    fns: Fns,
    /// `cublasLtGetVersion()`: major * 10000 + minor * 100 + patch.
    pub version: usize,
    pub path: String,
}

// SAFETY: function pointers into a library that stays loaded.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

/// The library, loaded on first use; `symmNotSupported` with what was
/// tried when it cannot be.
pub fn library() -> Result<&'static Library> {
    static LIB: OnceLock<std::result::Result<Library, Error>> = OnceLock::new();
    LIB.get_or_init(|| {
        let cfg = config::get();
        let lib = load(&candidates(cfg.cublaslt_lib.as_deref(), cfg.cuda_home.as_deref()));
        match &lib {
            Ok(l) => log::info!(target: "symmcomm::fused", "cuBLASLt {} loaded from {}", version_string(l.version), l.path),
            Err(e) => log::info!(target: "symmcomm::fused", "{}", e.msg),
        }
        lib
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn version_string(v: usize) -> String {
    format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
}

/// Where to look: the configured library alone, else the sonames (found
/// through the loader's path, or already loaded, e.g. by PyTorch) and then
/// the CUDA toolkit's library folders.
fn candidates(configured: Option<&str>, cuda_home: Option<&str>) -> Vec<String> {
    if let Some(c) = configured {
        return vec![c.to_string()];
    }
    let names = ["libcublasLt.so.13", "libcublasLt.so.12"];
    let mut dirs: Vec<String> = Vec::new();
    if let Some(h) = cuda_home {
        dirs.push(format!("{h}/lib64"));
        dirs.push(format!("{h}/lib"));
    }
    dirs.extend(["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"].map(String::from));
    let mut out: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    for d in &dirs {
        out.extend(names.iter().map(|n| format!("{d}/{n}")));
    }
    out
}

fn load(candidates: &[String]) -> Result<Library> {
    let mut tried = Vec::new();
    for c in candidates {
        let Ok(name) = CString::new(c.as_str()) else { continue };
        // SAFETY: dlopen of a NUL-terminated path; a library is never closed.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            tried.push(format!("{c} ({})", dl_error()));
            continue;
        }
        return resolve(h, c);
    }
    Err(err!(
        symmNotSupported,
        "the fused matmul ops need cuBLASLt (libcublasLt.so.13 or .12, from the CUDA toolkit or the nvidia-cublas wheel), \
         which could not be loaded; tried: {}. Put it on LD_LIBRARY_PATH or name it in SYMM_CUBLASLT_LIB",
        tried.join("; ")
    ))
}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local string or NULL.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

// Each field's type is the annotation of its transmute.
#[allow(clippy::missing_transmute_annotations)]
fn resolve(h: *mut c_void, path: &str) -> Result<Library> {
    let sym = |name: &str| -> Result<*mut c_void> {
        let c = CString::new(name).expect("symbol names have no NUL");
        // SAFETY: h is a live handle from dlopen.
        let p = unsafe { libc::dlsym(h, c.as_ptr()) };
        if p.is_null() {
            bail!(symmNotSupported, "{path} has no {name}: not a usable cuBLASLt (12.x or 13.x needed)");
        }
        Ok(p)
    };
    macro_rules! f {
        ($name:literal) => {
            // SAFETY: the symbol has the documented cuBLASLt signature this
            // field declares.
            unsafe { std::mem::transmute::<*mut c_void, _>(sym($name)?) }
        };
    }
    let fns = Fns {
        create: f!("cublasLtCreate"),
        destroy: f!("cublasLtDestroy"),
        get_version: f!("cublasLtGetVersion"),
        desc_create: f!("cublasLtMatmulDescCreate"),
        desc_destroy: f!("cublasLtMatmulDescDestroy"),
        desc_set: f!("cublasLtMatmulDescSetAttribute"),
        layout_create: f!("cublasLtMatrixLayoutCreate"),
        layout_destroy: f!("cublasLtMatrixLayoutDestroy"),
        pref_create: f!("cublasLtMatmulPreferenceCreate"),
        pref_destroy: f!("cublasLtMatmulPreferenceDestroy"),
        pref_set: f!("cublasLtMatmulPreferenceSetAttribute"),
        heuristic: f!("cublasLtMatmulAlgoGetHeuristic"),
        matmul: f!("cublasLtMatmul"),
        status_string: sym("cublasLtGetStatusString").ok().map(|p| {
            // SAFETY: as above.
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Status) -> *const c_char>(p) }
        }),
    };
    // SAFETY: resolved above; takes no arguments.
    let version = unsafe { (fns.get_version)() };
    if !(120000..140000).contains(&version) {
        bail!(symmNotSupported, "{path} is cuBLASLt {}; the fused matmul ops need 12.x or 13.x", version_string(version));
    }
    Ok(Library { fns, version, path: path.to_string() })
}

impl Library {
    fn status_name(&self, s: Status) -> String {
        if let Some(f) = self.fns.status_string {
            // SAFETY: returns a static string for any value.
            let p = unsafe { f(s) };
            if !p.is_null() {
                // SAFETY: non-null, NUL-terminated, static.
                return format!("{} ({s})", unsafe { CStr::from_ptr(p) }.to_string_lossy());
            }
        }
        format!("cuBLAS status {s}")
    }

    fn check(&self, s: Status, what: &str) -> Result<()> {
        if s == SUCCESS {
            return Ok(());
        }
        let code = if s == NOT_SUPPORTED { symmResult_t::symmNotSupported } else { symmResult_t::symmUnhandledCudaError };
        Err(Error::new(code, format!("{what} failed: {}", self.status_name(s))))
    }
}

/// Scale factors of fp8 inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scale {
    None,
    /// One float per operand.
    Tensor,
    /// One float per row of A and one per column of C (cuBLASLt's
    /// outer-vector scales).
    Rowwise,
}

/// What selects a GEMM kernel: types, layout, shape and alignments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmKey {
    pub a_type: symmDataType_t,
    pub b_type: symmDataType_t,
    pub c_type: symmDataType_t,
    pub trans_b: bool,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub lda: u64,
    pub ldb: u64,
    pub ldc: u64,
    pub scale: Scale,
    /// Largest power of two (at most 256) dividing each pointer.
    pub align: [u32; 3],
    /// 0: the whole GPU.
    pub sm_target: u32,
}

/// One GEMM's operands (device addresses).
#[derive(Clone, Copy, Debug)]
pub struct GemmPtrs {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    /// fp8: A's scale (its first row's, for row-wise) and B's.
    pub a_scale: u64,
    pub b_scale: u64,
}

/// The cuBLASLt objects of one `GemmKey`, made once.
struct Plan {
    lib: &'static Library,
    desc: Desc,
    layouts: [Desc; 3], // cuBLASLt's A (our B), B (our A), C = D
    algo: lt::cublasLtMatmulAlgo_t,
    workspace: usize,
}

/// A cuBLASLt handle with its heuristics cache (per communicator).
pub struct Blas {
    lib: &'static Library,
    handle: Handle,
    plans: HashMap<GemmKey, Plan>,
    /// "sm_XY" and the name, for messages.
    device: String,
    workspace_bytes: usize,
}

// SAFETY: the handle and descriptors are used under the owner's lock only.
unsafe impl Send for Blas {}

pub fn pointer_align(p: u64) -> u32 {
    if p == 0 {
        256
    } else {
        (1u64 << p.trailing_zeros().min(8)) as u32
    }
}

fn cuda_type(t: symmDataType_t) -> u32 {
    use symmDataType_t::*;
    (match t {
        symmBfloat16 => lt::cudaDataType_t::CUDA_R_16BF,
        symmFloat16 => lt::cudaDataType_t::CUDA_R_16F,
        symmFloat8e4m3 => lt::cudaDataType_t::CUDA_R_8F_E4M3,
        symmFloat8e5m2 => lt::cudaDataType_t::CUDA_R_8F_E5M2,
        _ => lt::cudaDataType_t::CUDA_R_32F,
    }) as u32
}

impl Blas {
    /// A handle for the current context's device; `workspace_bytes` is what
    /// each GEMM may use (the caller owns the buffers).
    pub fn new(device: String, workspace_bytes: usize) -> Result<Blas> {
        let lib = library()?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: out pointer to a handle.
        lib.check(unsafe { (lib.fns.create)(&mut handle) }, "cublasLtCreate")?;
        Ok(Blas { lib, handle, plans: HashMap::new(), device, workspace_bytes })
    }

    pub fn version(&self) -> usize {
        self.lib.version
    }

    /// Make (and cache) the plan of `key` without running it.
    pub fn make_plan(&mut self, key: &GemmKey) -> Result<()> {
        if !self.plans.contains_key(key) {
            let plan = self.plan(key)?;
            self.plans.insert(*key, plan);
        }
        Ok(())
    }

    // A CUstream is an opaque driver handle, never dereferenced here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    /// Enqueue `C = A * op(B) + beta * C` (row-major, see the module
    /// comment) on `stream`, with `workspace` (workspace_bytes) for
    /// cuBLASLt. The plan for `key` is made at its first use.
    pub fn gemm(&mut self, key: &GemmKey, p: &GemmPtrs, beta: f32, workspace: u64, stream: CUstream) -> Result<()> {
        self.gemm_rows(key, key.m, p, beta, workspace, stream)
    }

    // As above.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    /// `key`'s GEMM on only its first `rows` rows (of A and C), with the
    /// algorithm chosen for the whole shape: the same kernels, on less
    /// data. State::prime uses it to load a large GEMM's kernels.
    pub fn gemm_rows(&mut self, key: &GemmKey, rows: u64, p: &GemmPtrs, beta: f32, workspace: u64, stream: CUstream) -> Result<()> {
        self.make_plan(key)?;
        let plan = &self.plans[key];
        let f = &self.lib.fns;
        // Fewer rows: A's and C's layouts for them (cuBLASLt's B and C).
        let mut fewer = Layouts { lib: self.lib, raw: [std::ptr::null_mut(); 2] };
        let (b_layout, c_layout) = if rows < key.m {
            // SAFETY: out pointers for two layouts, destroyed by `fewer`.
            unsafe {
                let a = (f.layout_create)(&mut fewer.raw[0], cuda_type(key.a_type), key.k, rows, key.lda as i64);
                self.lib.check(a, "cublasLtMatrixLayoutCreate")?;
                let c = (f.layout_create)(&mut fewer.raw[1], cuda_type(key.c_type), key.n, rows, key.ldc as i64);
                self.lib.check(c, "cublasLtMatrixLayoutCreate")?;
            }
            (fewer.raw[0], fewer.raw[1])
        } else {
            (plan.layouts[1], plan.layouts[2])
        };
        if key.scale != Scale::None {
            // cuBLASLt's A is our B and its B our A.
            for (attr, ptr) in [
                (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.b_scale),
                (lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.a_scale),
            ] {
                // SAFETY: a live descriptor; the attribute takes a device pointer.
                let s = unsafe { (f.desc_set)(plan.desc, attr as u32, (&ptr as *const u64).cast(), 8) };
                self.lib.check(s, "setting the fp8 scale pointers")?;
            }
        }
        let alpha = 1.0f32;
        // SAFETY: descriptors and algo made for this key (or its first
        // rows); device pointers checked by the caller; host scalars live
        // across the call.
        let s = unsafe {
            (f.matmul)(
                self.handle,
                plan.desc,
                (&alpha as *const f32).cast(),
                p.b as *const c_void,
                plan.layouts[0],
                p.a as *const c_void,
                b_layout,
                (&beta as *const f32).cast(),
                p.c as *const c_void,
                c_layout,
                p.c as *mut c_void,
                c_layout,
                &plan.algo,
                workspace as *mut c_void,
                plan.workspace,
                stream,
            )
        };
        self.lib.check(s, "cublasLtMatmul")
    }

    fn plan(&self, key: &GemmKey) -> Result<Plan> {
        let f = &self.lib.fns;
        let lib = self.lib;
        let fp8 = is_fp8(key.a_type);
        let compute = if key.a_type == symmDataType_t::symmFloat32 {
            // Documented: fp32 inputs multiply in TF32 on the tensor cores.
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        // Dropped (objects destroyed) on any error below.
        let mut plan = Plan {
            lib,
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspace: 0,
        };
        let mut pref = Pref { lib, raw: std::ptr::null_mut() };
        // SAFETY (this block): cuBLASLt constructors and setters with out
        // pointers and attribute values of the documented types.
        unsafe {
            lib.check((f.desc_create)(&mut plan.desc, compute as u32, lt::cudaDataType_t::CUDA_R_32F as u32), "cublasLtMatmulDescCreate")?;
            let desc = plan.desc;
            let set = |attr: lt::cublasLtMatmulDescAttributes_t, v: *const c_void, n: usize| -> Result<()> {
                lib.check((f.desc_set)(desc, attr as u32, v, n), "cublasLtMatmulDescSetAttribute")
            };
            let op_t = 1i32; // CUBLAS_OP_T
            if key.trans_b {
                set(lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, (&op_t as *const i32).cast(), 4)?;
            }
            if key.sm_target > 0 {
                let t = key.sm_target as i32;
                set(lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, (&t as *const i32).cast(), 4)?;
            }
            if key.scale == Scale::Rowwise {
                let mode = lt::cublasLtMatmulMatrixScale_t::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F as u32;
                for attr in [
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                ] {
                    set(attr, (&mode as *const u32).cast(), 4).map_err(|e| self.no_kernel(key, &e.msg))?;
                }
            }
            // Column-major views (see the module comment).
            let (xr, xc) = if key.trans_b { (key.k, key.n) } else { (key.n, key.k) };
            let shapes = [
                (cuda_type(key.b_type), xr, xc, key.ldb),
                (cuda_type(key.a_type), key.k, key.m, key.lda),
                (cuda_type(key.c_type), key.n, key.m, key.ldc),
            ];
            for (i, (t, r, c, ld)) in shapes.into_iter().enumerate() {
                lib.check((f.layout_create)(&mut plan.layouts[i], t, r, c, ld as i64), "cublasLtMatrixLayoutCreate")?;
            }
            lib.check((f.pref_create)(&mut pref.raw), "cublasLtMatmulPreferenceCreate")?;
            let pset = |attr: lt::cublasLtMatmulPreferenceAttributes_t, v: *const c_void, n: usize| -> Result<()> {
                lib.check((f.pref_set)(pref.raw, attr as u32, v, n), "cublasLtMatmulPreferenceSetAttribute")
            };
            let ws = self.workspace_bytes as u64;
            pset(lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, (&ws as *const u64).cast(), 8)?;
            // cuBLASLt's A is our B, its B our A.
            for (attr, a) in [
                (lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align[1]),
                (lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align[0]),
                (lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align[2]),
                (lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align[2]),
            ] {
                pset(attr, (&a as *const u32).cast(), 4)?;
            }
            let mut result = [HeuristicResult {
                algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
                workspace_size: 0,
                state: 0,
                waves_count: 0.0,
                reserved: [0; 4],
            }];
            let mut found: c_int = 0;
            let s = (f.heuristic)(
                self.handle,
                plan.desc,
                plan.layouts[0],
                plan.layouts[1],
                plan.layouts[2],
                plan.layouts[2],
                pref.raw,
                1,
                result.as_mut_ptr(),
                &mut found,
            );
            if s == NOT_SUPPORTED || (s == SUCCESS && found == 0) {
                return Err(self.no_kernel(key, if fp8 { "no fp8 algorithm" } else { "no algorithm for these types and alignments" }));
            }
            if s != SUCCESS && key.scale == Scale::Rowwise {
                // cuBLASLt builds without outer-vector kernels for this GPU
                // refuse the scale mode as an invalid value (seen: 13.1 on
                // an H100 answers status 7).
                return Err(self.no_kernel(key, &format!("the heuristic refused row-wise scales with status {s}")));
            }
            lib.check(s, "cublasLtMatmulAlgoGetHeuristic")?;
            plan.algo = result[0].algo;
            plan.workspace = result[0].workspace_size.min(self.workspace_bytes);
        }
        log::debug!(target: "symmcomm::fused", "cuBLASLt plan for {key:?}");
        Ok(plan)
    }

    fn no_kernel(&self, key: &GemmKey, why: &str) -> Error {
        let mut hints = String::new();
        if is_fp8(key.a_type) {
            hints += "; fp8 needs an sm_89 or newer GPU, 16-byte aligned operands and leading dimensions that are multiples of 16";
        }
        if key.scale == Scale::Rowwise {
            hints += "; row-wise (outer-vector) fp8 scales need cuBLASLt 12.9 or newer on a Hopper (sm_90) GPU";
        }
        err!(
            symmNotSupported,
            "cuBLASLt {} has no GEMM for {:?} x {:?} -> {:?} (transB={}, scales {:?}, m={} n={} k={}, lda={} ldb={} ldc={}, \
             alignments A {} B {} C {} bytes) on {} ({why}){hints}",
            version_string(self.lib.version),
            key.a_type,
            key.b_type,
            key.c_type,
            key.trans_b as u8,
            key.scale,
            key.m,
            key.n,
            key.k,
            key.lda,
            key.ldb,
            key.ldc,
            key.align[0],
            key.align[1],
            key.align[2],
            self.device
        )
    }
}

/// A matmul preference, destroyed when the plan is made (or fails).
struct Pref {
    lib: &'static Library,
    raw: Desc,
}

impl Drop for Pref {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: made by cublasLtMatmulPreferenceCreate, unused now.
            unsafe { (self.lib.fns.pref_destroy)(self.raw) };
        }
    }
}

/// Matrix layouts made for one enqueue (Blas::gemm_rows), destroyed after.
struct Layouts {
    lib: &'static Library,
    raw: [Desc; 2],
}

impl Drop for Layouts {
    fn drop(&mut self) {
        for l in self.raw {
            if !l.is_null() {
                // SAFETY: made by cublasLtMatrixLayoutCreate; cuBLASLt has
                // read it when cublasLtMatmul returned.
                unsafe { (self.lib.fns.layout_destroy)(l) };
            }
        }
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each non-null object was made by its constructor and is
        // not used after the plan goes.
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    (self.lib.fns.layout_destroy)(l);
                }
            }
            if !self.desc.is_null() {
                (self.lib.fns.desc_destroy)(self.desc);
            }
        }
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        self.plans.clear();
        // SAFETY: made by cublasLtCreate; its plans are gone.
        unsafe { (self.lib.fns.destroy)(self.handle) };
    }
}

pub fn is_fp8(t: symmDataType_t) -> bool {
    matches!(t, symmDataType_t::symmFloat8e4m3 | symmDataType_t::symmFloat8e5m2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_not_supported_with_the_names_tried() {
        let e = load(&candidates(Some("/nonexistent/libcublasLt.so.13"), None)).err().expect("cannot load a missing file");
        assert_eq!(e.code, symmResult_t::symmNotSupported);
        assert!(e.msg.contains("/nonexistent/libcublasLt.so.13") && e.msg.contains("SYMM_CUBLASLT_LIB"), "{}", e.msg);
    }

    #[test]
    fn a_library_without_cublaslt_symbols_is_refused() {
        // libc is loadable but is no cuBLASLt.
        let e = load(&["libc.so.6".to_string()]).err().expect("libc is not cuBLASLt");
        assert_eq!(e.code, symmResult_t::symmNotSupported);
        assert!(e.msg.contains("cublasLtCreate"), "{}", e.msg);
    }

    #[test]
    fn search_order() {
        let c = candidates(None, Some("/opt/cuda"));
        assert_eq!(c[0], "libcublasLt.so.13");
        assert_eq!(c[1], "libcublasLt.so.12");
        assert!(c.contains(&"/opt/cuda/lib64/libcublasLt.so.13".to_string()));
        assert!(c.contains(&"/usr/local/cuda/lib64/libcublasLt.so.12".to_string()));
        assert_eq!(candidates(Some("x.so"), Some("/opt/cuda")), vec!["x.so".to_string()]);
    }

    #[test]
    fn alignment() {
        assert_eq!(pointer_align(0x1000), 256);
        assert_eq!(pointer_align(0x1010), 16);
        assert_eq!(pointer_align(0x1002), 2);
    }
}
