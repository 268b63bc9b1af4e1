//! symmcomm: an NCCL-style communicator built on CUDA symmetric memory.
//!
//! Map of the crate (each folder does one job):
//! - [`ffi`]: the C boundary only. Every exported `symm*` function lives
//!   there, one file per API group, and goes through one boundary helper.
//! - [`comm`]: communicator lifecycle (init, destroy, abort, queries).
//! - [`split`]: communicators made from another's ranks (split, shrink).
//! - [`bootstrap`]: host-side rendezvous, byte-blob collectives among ranks,
//!   and file-descriptor passing between local processes.
//! - [`cuda`]: driver-API wrappers (error mapping, contexts, module loading,
//!   kernel launch). Nothing else calls the CUDA driver directly.
//! - [`devcomm`]: device communicators for users' own kernels (the host
//!   half of `include/symmcomm_device.cuh`).
//! - [`types`]: element types and reduction ops (the core's; `ffi`
//!   re-exports them for the header).
//! - [`fused`]: all-gather-matmul and matmul-reduce-scatter (cuBLASLt GEMMs
//!   pipelined with copy-engine transfers).
//! - [`config`]: every `SYMM_*` environment variable, read once.
//! - [`debug`]: `SYMM_DEBUG` / `SYMM_DEBUG_SUBSYS` logging set-up.
//! - [`error`]: the result codes and the crate's error type.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

pub mod error;
mod fnv;
pub mod types;
pub mod config;
pub mod debug;
pub mod bootstrap;
pub mod cuda;
pub mod comm;
pub mod split;
pub mod memory;
pub mod coll;
pub mod group;
pub mod prims;
pub mod fused;
pub mod devcomm;
pub mod ffi;

pub use error::{symmResult_t, Error, Result};
