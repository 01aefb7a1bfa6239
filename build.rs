//! Link flags of the `silas` binaries (issue #19 item 4, footprint).
//!
//! `-z pack-relative-relocs` stores the position-independent executable's
//! relative relocations as RELR (a bitmap) instead of 24-byte RELA entries:
//! ≈ 1.5 MB less on disk and fewer pages read by the loader at start, with
//! the binary still position-independent (ASLR kept). GNU ld (≥ 2.38) packs
//! only when the C library supports RELR (`GLIBC_ABI_DT_RELR`, glibc ≥ 2.36)
//! and older linkers ignore the option with a warning, so it is safe to ask
//! for everywhere the daemon builds (Linux only).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
