//! The committed C header must equal what cbindgen generates from the Rust
//! source. `SYMM_BLESS=1 cargo test --test header` (scripts/gen-header)
//! rewrites it.

use std::path::PathBuf;

#[test]
fn header_matches_rust_source() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("read cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&root)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = root.join("include/symmcomm.h");
    if std::env::var_os("SYMM_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/symmcomm.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/symmcomm.h is out of date with the Rust source: run scripts/gen-header and commit it"
    );
}

#[test]
fn header_declares_every_export() {
    if std::env::var_os("SYMM_BLESS").is_some() {
        return; // the header is being rewritten concurrently
    }
    // Every #[no_mangle] function in src/ffi must be declared in the header.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let header = std::fs::read_to_string(root.join("include/symmcomm.h")).unwrap();
    for entry in std::fs::read_dir(root.join("src/ffi")).unwrap() {
        let src = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in src.lines().filter(|l| l.contains("pub extern \"C\" fn ")) {
            let name = line.split("fn ").nth(1).unwrap().split('(').next().unwrap().trim();
            assert!(name.starts_with("symm"), "exported function {name} lacks the symm prefix");
            assert!(header.contains(&format!("{name}(")), "{name} is missing from include/symmcomm.h");
        }
    }
}
