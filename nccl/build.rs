//! The shared library's identity: soname `libnccl.so.2` (so that programs
//! linked against NCCL load it), and a version script exporting only NCCL's
//! API (`nccl*`, `pnccl*`); symmcomm's own `symm*` symbols stay local.

fn main() {
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    println!("cargo:rerun-if-changed=exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnccl.so.2");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", root.join("exports.map").display());
    // rustc lists every #[no_mangle] symbol of the linked crates as global,
    // symmcomm's symm* included; keep those (which live in the symmcomm
    // rlib, an archive) private, and bind our own calls to our own code so
    // a libsymmcomm.so loaded in the same process never interposes.
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
