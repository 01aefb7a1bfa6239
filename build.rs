//! Link flags of the `silas` binaries (issue #19 item 4, footprint).
//!
//! - `-z pack-relative-relocs` stores the position-independent executable's
//!   relative relocations as RELR (a bitmap) instead of 24-byte RELA entries:
//!   ≈ 1.5 MB less on disk and fewer pages read by the loader at start, with
//!   the binary still position-independent (ASLR kept). GNU ld (≥ 2.38) packs
//!   only when the C library supports RELR (`GLIBC_ABI_DT_RELR`, glibc ≥ 2.36)
//!   and older linkers ignore the option with a warning, so it is safe to ask
//!   for everywhere the daemon builds (Linux only).
//! - Release binaries are stripped here (`--strip-all`) rather than by the
//!   profile's `strip`, because the profile is part of every crate's symbol
//!   hashes: `SILAS_KEEP_SYMBOLS=1` builds the very same symbols, unstripped,
//!   for `scripts/order-file.py` to profile.
//! - `link/silas.order` (written by that script) lists the functions a start,
//!   an idle spell and a few turns run, in that order; the linker places them
//!   together at the front of `.text`. Without it they are spread over all
//!   15 MB of text, and since the kernel maps a faulting page's neighbours
//!   too, most of the text ends up resident although start-up runs 3 MB of it.
//!   Only rust-lld (rustc's default linker for this target since 1.90) takes
//!   the file; names it no longer finds (another toolchain, renamed code) are
//!   skipped, so a stale file costs memory, never a broken link.
//! - `--icf=all` (rust-lld only) folds functions whose machine code came out
//!   identical — monomorphisations over types of the same layout, mostly:
//!   −0.19 MB. Rust promises no distinct addresses for distinct functions,
//!   and nothing here compares function pointers.

use std::path::Path;
use std::process::Command;

const ORDER: &str = "link/silas.order";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-env-changed=SILAS_KEEP_SYMBOLS");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    if std::env::var_os("SILAS_KEEP_SYMBOLS").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,--strip-all");
    }
    if !links_with_rust_lld() {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    let order = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join(ORDER);
    if order.is_file() {
        println!(
            "cargo:rustc-link-arg-bin=silas=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bin=silas=-Wl,--no-warn-symbol-ordering");
    }
}

/// rustc links `x86_64-unknown-linux-gnu` with its own rust-lld since 1.90,
/// unless the build names another linker (config `linker`, `-C linker`, or
/// linker features in the flags); GNU ld would reject the ordering option.
fn links_with_rust_lld() -> bool {
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || std::env::var_os("RUSTC_LINKER").is_some()
        || std::env::var("CARGO_ENCODED_RUSTFLAGS").is_ok_and(|f| f.contains("link"))
    {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let mut parts = version
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    major > 1 || (major == 1 && minor >= 90)
}
