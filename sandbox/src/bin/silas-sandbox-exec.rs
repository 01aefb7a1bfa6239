//! Standalone sandbox launcher (the same code `silas __sandbox-exec` runs).
fn main() -> std::process::ExitCode {
    silas_sandbox::launcher::main()
}
