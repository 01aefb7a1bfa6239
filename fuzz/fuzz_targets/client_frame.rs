//! Client → server WebSocket frames from arbitrary bytes: a typed frame or
//! an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = serde_json::from_slice::<silas_web::protocol::ClientFrame>(data) {
        let _ = f.request_id();
        let _ = f.is_workspace_op();
    }
});
