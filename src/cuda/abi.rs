//! Structures shared with the kernels; mirrors `kernels/abi.cuh`. Both sides
//! assert the same sizes, so a change on one side alone fails to build.

/// Most ranks a communicator may have (one NVLink node).
pub(crate) const MAX_RANKS: usize = 8;

/// Operation ids recorded with a device-side error (`SymmOpId`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpId {
    None = 0,
    Barrier = 1,
    PutSignal = 2,
    WaitSignal = 3,
    WaitValue = 4,
    Collective = 5,
}

impl OpId {
    pub fn from_raw(v: u32) -> Option<OpId> {
        [OpId::None, OpId::Barrier, OpId::PutSignal, OpId::WaitSignal, OpId::WaitValue, OpId::Collective]
            .get(v as usize)
            .copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            OpId::None => "operation",
            OpId::Barrier => "symmBarrier",
            OpId::PutSignal => "symmPutSignal",
            OpId::WaitSignal => "symmWaitSignal",
            OpId::WaitValue => "symmStreamWaitValue32",
            OpId::Collective => "collective",
        }
    }
}

/// `SymmErrorKind`.
pub(crate) const DEV_OK: u32 = 0;
pub(crate) const DEV_TIMEOUT: u32 = 1;
pub(crate) const DEV_ABORTED: u32 = 2;

/// `SymmStatus`: host-pinned, device-mapped; see kernels/abi.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    pub abort: u32,
    pub error: u32,
    pub rank: u32,
    pub op: u32,
    pub peer: u32,
    pub detail: u32,
    pub waited_ns: u64,
}

/// `SymmWaitCtx`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitCtx {
    pub status: u64,
    pub error_guard: u64,
    pub timeout_ns: u64,
    pub rank: u32,
    pub op: u32,
}

/// `SymmFlagArgs`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FlagArgs {
    pub wait: WaitCtx,
    pub local: u64,
    pub remote: [u64; MAX_RANKS],
    pub nranks: u32,
    pub peer: u32,
}

const _: () = assert!(std::mem::size_of::<Status>() == 32);
const _: () = assert!(std::mem::size_of::<WaitCtx>() == 32);
const _: () = assert!(std::mem::size_of::<FlagArgs>() == 32 + 8 + 8 * MAX_RANKS + 8);
