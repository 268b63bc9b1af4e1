//! Compiles `kernels/*.cu` into one fatbin (sm_80 + sm_90 machine code and
//! compute_90 PTX) that src/cuda/module.rs embeds, and sets the shared
//! library's soname and export list.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GENCODE: &[&str] = &[
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
];

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let kernels = root.join("kernels");

    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=src/exports.map");
    for var in ["CUDA_HOME", "CUDA_PATH", "PATH", "NVCC_CCBIN"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    // Shared-library identity: soname for versioned installs, and a version
    // script so only symm* symbols are exported.
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsymmcomm.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", root.join("src/exports.map").display());

    let sources = kernel_sources(&kernels);
    if sources.is_empty() {
        panic!("no kernels/*.cu sources found in {}", kernels.display());
    }
    // One translation unit: a single fatbin holds every kernel.
    let unity = out.join("symmcomm_kernels.cu");
    let body: String = sources.iter().map(|s| format!("#include \"{}\"\n", s.display())).collect();
    std::fs::write(&unity, body).expect("write unity kernel source");

    let nvcc = find_nvcc(&root).unwrap_or_else(|| {
        panic!(
            "\n\nsymmcomm: nvcc (the CUDA compiler) was not found.\n\
             It is needed to build the kernels in kernels/*.cu.\n\
             Either set CUDA_HOME to a CUDA 12.x/13.x toolkit, put nvcc on PATH,\n\
             or run ./scripts/setup, which installs the pinned toolchain from PyPI into .toolchain/.\n\n"
        )
    });
    let fatbin = out.join("symmcomm_kernels.fatbin");
    let mut cmd = Command::new(&nvcc);
    cmd.arg("-fatbin")
        .args(GENCODE)
        .args(["-O3", "-std=c++17", "--threads", "0", "-Werror", "all-warnings"])
        .arg(format!("-I{}", kernels.display()))
        .arg("-o")
        .arg(&fatbin)
        .arg(&unity);
    if let Ok(ccbin) = env::var("NVCC_CCBIN") {
        cmd.arg(format!("-ccbin={ccbin}"));
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("failed to run {}: {e}", nvcc.display()));
    if !status.success() {
        panic!("nvcc failed ({status}) compiling kernels/*.cu; command: {cmd:?}");
    }
}

fn kernel_sources(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "cu"));
    v.sort();
    v
}

/// nvcc from CUDA_HOME/CUDA_PATH, then PATH, then the toolchain that
/// scripts/setup installs into .toolchain/.
fn find_nvcc(root: &Path) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(home) = env::var(var) {
            candidates.push(PathBuf::from(home).join("bin/nvcc"));
        }
    }
    if let Ok(path) = env::var("PATH") {
        candidates.extend(env::split_paths(&path).map(|p| p.join("nvcc")));
    }
    candidates.push(root.join(".toolchain/nvidia/cu13/bin/nvcc"));
    candidates.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
    candidates.into_iter().find(|p| p.is_file())
}
