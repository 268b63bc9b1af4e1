//! One error type for the whole crate: a fixed result code plus a message.
//!
//! `symmResult_t` is part of the C ABI. Its numbers are fixed forever: add new
//! codes at the end, never renumber or reuse one.

use std::fmt;

/// Result codes returned by every `symm*` function. Numbers 0-6 match NCCL's
/// `ncclResult_t`; the values are part of the ABI and never change.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum symmResult_t {
    symmSuccess = 0,
    /// A CUDA driver call failed (or no usable CUDA driver/device was found).
    symmUnhandledCudaError = 1,
    /// A system call failed (sockets, file descriptors, memory).
    symmSystemError = 2,
    /// A bug in symmcomm (including a caught panic).
    symmInternalError = 3,
    /// A bad argument: null pointer, value out of range, unknown enum value.
    symmInvalidArgument = 4,
    /// Arguments are fine but the call does not fit the state (mismatched
    /// ranks, duplicate rank, wrong call order, destroyed communicator).
    symmInvalidUsage = 5,
    /// A peer rank failed or went away.
    symmRemoteError = 6,
    /// The operation has not completed yet.
    symmInProgress = 7,
    /// A bounded wait expired (bootstrap or device-side).
    symmTimeout = 8,
    /// The requested feature or path is not implemented or not available here.
    symmNotSupported = 9,
}

/// Number of result codes; one past the highest valid value.
pub const SYMM_NUM_RESULTS: i32 = 10;

impl symmResult_t {
    /// All codes, in numeric order.
    pub(crate) const ALL: [symmResult_t; SYMM_NUM_RESULTS as usize] = [
        symmResult_t::symmSuccess,
        symmResult_t::symmUnhandledCudaError,
        symmResult_t::symmSystemError,
        symmResult_t::symmInternalError,
        symmResult_t::symmInvalidArgument,
        symmResult_t::symmInvalidUsage,
        symmResult_t::symmRemoteError,
        symmResult_t::symmInProgress,
        symmResult_t::symmTimeout,
        symmResult_t::symmNotSupported,
    ];

    pub fn from_raw(raw: i32) -> Option<Self> {
        Self::ALL.get(usize::try_from(raw).ok()?).copied()
    }

    /// Static, NUL-terminated description (for `symmGetErrorString`).
    pub fn description(self) -> &'static str {
        match self {
            Self::symmSuccess => "no error\0",
            Self::symmUnhandledCudaError => "unhandled cuda error (symmGetLastError has details)\0",
            Self::symmSystemError => "unhandled system error (symmGetLastError has details)\0",
            Self::symmInternalError => "internal error - please report this issue to the symmcomm developers\0",
            Self::symmInvalidArgument => "invalid argument (symmGetLastError has details)\0",
            Self::symmInvalidUsage => "invalid usage (symmGetLastError has details)\0",
            Self::symmRemoteError => "remote process exited or there was a network error\0",
            Self::symmInProgress => "operation in progress\0",
            Self::symmTimeout => "operation timed out\0",
            Self::symmNotSupported => "operation not supported\0",
        }
    }
}

/// The crate's error: a code for C callers and a message for `symmGetLastError`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub code: symmResult_t,
    pub msg: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(code: symmResult_t, msg: impl Into<String>) -> Self {
        Error { code, msg: msg.into() }
    }

    /// Prefix the message with context ("while doing X: ...").
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    /// A system error from the current `errno`.
    pub fn last_os(what: impl fmt::Display) -> Self {
        Self::from_io(what, std::io::Error::last_os_error())
    }

    /// A system error from an `io::Error`; timeouts keep their meaning.
    pub fn from_io(what: impl fmt::Display, e: std::io::Error) -> Self {
        let code = match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => symmResult_t::symmTimeout,
            _ => symmResult_t::symmSystemError,
        };
        Error::new(code, format!("{what}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.msg)
    }
}

impl std::error::Error for Error {}

/// `return Err(...)` shorthands, one per code that callers build by hand.
macro_rules! bail {
    ($code:ident, $($fmt:tt)+) => {
        return Err($crate::error::Error::new($crate::error::symmResult_t::$code, format!($($fmt)+)))
    };
}
macro_rules! err {
    ($code:ident, $($fmt:tt)+) => {
        $crate::error::Error::new($crate::error::symmResult_t::$code, format!($($fmt)+))
    };
}
pub(crate) use bail;
pub(crate) use err;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_fixed() {
        for (i, c) in symmResult_t::ALL.iter().enumerate() {
            assert_eq!(*c as i32, i as i32);
            assert_eq!(symmResult_t::from_raw(i as i32), Some(*c));
            assert!(c.description().ends_with('\0'));
            assert!(c.description().len() > 1);
        }
        assert_eq!(symmResult_t::from_raw(SYMM_NUM_RESULTS), None);
        assert_eq!(symmResult_t::from_raw(-1), None);
        // ABI pins: these numbers must never change.
        assert_eq!(symmResult_t::symmInvalidArgument as i32, 4);
        assert_eq!(symmResult_t::symmTimeout as i32, 8);
        assert_eq!(symmResult_t::symmNotSupported as i32, 9);
    }

    #[test]
    fn io_timeouts_map_to_timeout() {
        let e = Error::from_io("recv", std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(e.code, symmResult_t::symmTimeout);
        let e = Error::from_io("recv", std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(e.code, symmResult_t::symmSystemError);
    }
}
