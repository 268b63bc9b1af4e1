//! Reduction operators a caller creates on a communicator: NCCL's
//! pre-multiplied sum (`ncclRedOpCreatePreMulSum`), the sum over ranks of
//! s_r · x_r with each rank's own scalar s_r. An op is a number past the
//! built-in ones (`symmNumOps + slot`), valid on the communicator that made
//! it until it is destroyed; a destroyed op's number is given out again, as
//! NCCL does. The collectives that use one are in src/coll/premul_sum.rs.

use parking_lot::Mutex;

use crate::error::{bail, Result};
use crate::types::{symmDataType_t, symmNumOps, RawRedOp};

/// Where the scalar is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// Its bytes (one element of the op's type, little-endian in the low
    /// bytes), copied from the host when the op was created.
    Immediate(u64),
    /// The device address of one element, read each time a collective runs.
    Device(u64),
}

/// One pre-multiplied sum: for collectives of `dtype` only, as in NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreMulSum {
    pub dtype: symmDataType_t,
    pub scalar: Scalar,
}

/// Live ops at once per communicator, at most: a bound on what a caller
/// that never destroys its ops can make the table hold.
const MAX_OPS: usize = 1 << 16;

/// A communicator's created ops, by slot.
#[derive(Default)]
pub struct RedOps {
    slots: Mutex<Vec<Option<PreMulSum>>>,
}

impl RedOps {
    /// Keep `op`; its number is the first free slot's.
    pub fn create(&self, op: PreMulSum) -> Result<RawRedOp> {
        let mut slots = self.slots.lock();
        let slot = match slots.iter().position(Option::is_none) {
            Some(free) => free,
            None if slots.len() < MAX_OPS => {
                slots.push(None);
                slots.len() - 1
            }
            None => bail!(symmInvalidUsage, "{MAX_OPS} reduction ops are live on this communicator; destroy some first"),
        };
        slots[slot] = Some(op);
        Ok(symmNumOps + slot as RawRedOp)
    }

    /// Forget `op`: a built-in op, or one not live here, is an error.
    pub fn destroy(&self, op: RawRedOp) -> Result<()> {
        if (0..symmNumOps).contains(&op) {
            bail!(symmInvalidArgument, "op {op} is a built-in op; only ops created on the communicator can be destroyed");
        }
        let mut slots = self.slots.lock();
        match Self::slot(op).and_then(|s| slots.get_mut(s)) {
            Some(live @ Some(_)) => {
                *live = None;
                Ok(())
            }
            _ => bail!(symmInvalidArgument, "op {op} is not a live op created on this communicator"),
        }
    }

    /// The live op numbered `op`, if any.
    pub fn get(&self, op: RawRedOp) -> Option<PreMulSum> {
        let slots = self.slots.lock();
        Self::slot(op).and_then(|s| slots.get(s).copied().flatten())
    }

    fn slot(op: RawRedOp) -> Option<usize> {
        usize::try_from(op.checked_sub(symmNumOps)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HALF: PreMulSum = PreMulSum { dtype: symmDataType_t::symmFloat32, scalar: Scalar::Immediate(0x3f00_0000) };

    #[test]
    fn numbers_follow_the_built_in_ops_and_are_reused() {
        let ops = RedOps::default();
        let a = ops.create(HALF).unwrap();
        let b = ops.create(PreMulSum { scalar: Scalar::Device(0x1000), ..HALF }).unwrap();
        assert_eq!((a, b), (symmNumOps, symmNumOps + 1));
        assert_eq!(ops.get(b).unwrap().scalar, Scalar::Device(0x1000));
        ops.destroy(a).unwrap();
        assert_eq!(ops.get(a), None);
        assert_eq!(ops.create(HALF).unwrap(), a, "the freed number is given out again");
    }

    #[test]
    fn built_in_unknown_and_destroyed_ops_are_refused() {
        let ops = RedOps::default();
        let a = ops.create(HALF).unwrap();
        for bad in [0, symmNumOps - 1, a + 1, -1, RawRedOp::MAX, RawRedOp::MIN] {
            assert!(ops.destroy(bad).is_err(), "destroy({bad})");
            assert_eq!(ops.get(bad), None);
        }
        ops.destroy(a).unwrap();
        assert!(ops.destroy(a).is_err(), "destroyed twice");
    }
}
