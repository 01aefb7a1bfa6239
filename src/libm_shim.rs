//! The four C math functions the binary calls — `pow`, `log2`, `log2f`,
//! `logf` (the secret detector's entropy, the memory index's scoring, float
//! formatting in dependencies) — defined here in Rust, from the `libm` crate
//! (a port of musl's libm), so that the linker (`--as-needed`) drops
//! `libm.so.6` from the executable's needs: the loader then maps no libm and
//! runs none of its IFUNC resolvers, which kept 0.55 MiB of it resident in
//! an idle daemon (issue #19 item 4; BENCHMARKS.md "Footprint, third pass").
//! A call resolves to these definitions, the executable's own, before any
//! shared library. Accuracy: within an ulp or two of glibc (tested below
//! against the system's libm, loaded for the test).

#![allow(unsafe_code)] // `no_mangle` exports C symbols; no unsafe operation.

/// `double pow(double, double)`.
#[unsafe(no_mangle)]
pub extern "C" fn pow(x: f64, y: f64) -> f64 {
    libm::pow(x, y)
}

/// `double log2(double)`.
#[unsafe(no_mangle)]
pub extern "C" fn log2(x: f64) -> f64 {
    libm::log2(x)
}

/// `float log2f(float)`.
#[unsafe(no_mangle)]
pub extern "C" fn log2f(x: f32) -> f32 {
    libm::log2f(x)
}

/// `float logf(float)`.
#[unsafe(no_mangle)]
pub extern "C" fn logf(x: f32) -> f32 {
    libm::logf(x)
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use std::ffi::{CStr, c_void};

    /// A function of the system's libm by name, loaded for the comparison
    /// (inside this test binary `pow` etc. resolve to the shims above).
    fn system<F: Copy>(name: &CStr) -> F {
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
        // SAFETY: dlopen/dlsym with NUL-terminated names; the library stays
        // loaded for the process (never dlclosed), and `F` is the function
        // pointer type of the C prototype of `name`.
        unsafe {
            let lib = libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!lib.is_null(), "libm.so.6 not loadable");
            let f = libc::dlsym(lib, name.as_ptr());
            assert!(!f.is_null(), "{name:?} not in libm.so.6");
            std::mem::transmute_copy(&f)
        }
    }

    fn ulps64(a: f64, b: f64) -> u64 {
        if a == b || (a.is_nan() && b.is_nan()) {
            return 0;
        }
        (a.to_bits() as i64).abs_diff(b.to_bits() as i64)
    }

    fn ulps32(a: f32, b: f32) -> u32 {
        if a == b || (a.is_nan() && b.is_nan()) {
            return 0;
        }
        (a.to_bits() as i32).abs_diff(b.to_bits() as i32)
    }

    /// Deterministic spread of inputs: tiny to huge, with the edge cases.
    fn inputs() -> Vec<f64> {
        let mut v = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            2.0,
            0.5,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        v.extend([f64::NAN, f64::MIN_POSITIVE, f64::MAX, f64::EPSILON, 1e-310]);
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Exponent between about 2^-40 and 2^40, either sign now and then.
            let mant = (x >> 12) as f64 / (1u64 << 52) as f64 + 1.0;
            let exp = ((x >> 3) % 81) as i32 - 40;
            let sign = if x.is_multiple_of(7) { -1.0 } else { 1.0 };
            v.push(sign * mant * 2f64.powi(exp));
        }
        v
    }

    #[test]
    fn the_shims_agree_with_the_system_libm() {
        let c_pow: extern "C" fn(f64, f64) -> f64 = system(c"pow");
        let c_log2: extern "C" fn(f64) -> f64 = system(c"log2");
        let c_log2f: extern "C" fn(f32) -> f32 = system(c"log2f");
        let c_logf: extern "C" fn(f32) -> f32 = system(c"logf");
        let xs = inputs();
        let (mut worst_pow, mut worst_log2, mut worst_log2f, mut worst_logf) = (0, 0, 0, 0);
        for (i, &x) in xs.iter().enumerate() {
            worst_log2 = worst_log2.max(ulps64(super::log2(x), c_log2(x)));
            let xf = x as f32;
            worst_log2f = worst_log2f.max(ulps32(super::log2f(xf), c_log2f(xf)));
            worst_logf = worst_logf.max(ulps32(super::logf(xf), c_logf(xf)));
            // Exponents small enough that most results stay finite.
            let y = xs[(i * 7919) % xs.len()].clamp(-8.0, 8.0);
            let b = x.abs().min(1e6);
            worst_pow = worst_pow.max(ulps64(super::pow(b, y), c_pow(b, y)));
        }
        assert!(worst_log2 <= 1, "log2 off by {worst_log2} ulp");
        assert!(worst_log2f <= 1, "log2f off by {worst_log2f} ulp");
        assert!(worst_logf <= 1, "logf off by {worst_logf} ulp");
        assert!(worst_pow <= 1, "pow off by {worst_pow} ulp");
    }
}
