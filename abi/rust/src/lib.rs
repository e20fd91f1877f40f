//! pgflow-wasm guest ABI, version 1 (see `abi/SPEC.md`), for Rust.
//!
//! A handler is one function from the step input and the context (JSON bytes) to the output
//! JSON, or an error message. [`handler!`] exports it as `pgflow_handle` together with
//! `pgflow_abi_version`:
//!
//! ```ignore
//! fn hello(input: &[u8], _context: &[u8]) -> Result<Vec<u8>, String> {
//!     pgflow::log(pgflow::Level::Info, "saying hello");
//!     if input.is_empty() {
//!         return Err("empty input".into());
//!     }
//!     Ok(br#"{"hello":"world"}"#.to_vec())
//! }
//! pgflow::handler!(hello);
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-unknown-unknown` (or `wasm32-wasi`), with
//! `panic = "abort"`: a panic's message reaches the host through `error_write` before the
//! module traps, so the task fails with it.

use std::fmt::Display;
use std::sync::Once;

/// ABI version the handler speaks.
pub const ABI_VERSION: i32 = 1;

/// Value `pgflow_handle` returns when the last output is the result.
pub const STATUS_OK: i32 = 0;
/// Value `pgflow_handle` returns when the task failed with the last error message.
pub const STATUS_HANDLER_ERROR: i32 = 1;

/// Log levels of [`log`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

#[cfg(target_arch = "wasm32")]
mod host {
    #[link(wasm_import_module = "pgflow")]
    extern "C" {
        pub fn input_read(ptr: *mut u8);
        pub fn context_read(ptr: *mut u8);
        pub fn output_write(ptr: *const u8, len: usize);
        pub fn error_write(ptr: *const u8, len: usize);
        pub fn log(level: i32, ptr: *const u8, len: usize);
    }
}

// Off wasm (unit tests, docs) the host functions do nothing, so the crate still compiles.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    pub unsafe fn input_read(_: *mut u8) {}
    pub unsafe fn context_read(_: *mut u8) {}
    pub unsafe fn output_write(_: *const u8, _: usize) {}
    pub unsafe fn error_write(_: *const u8, _: usize) {}
    pub unsafe fn log(_: i32, _: *const u8, _: usize) {}
}

/// Writes one log line for the current task.
pub fn log(level: Level, message: &str) {
    unsafe { host::log(level as i32, message.as_ptr(), message.len()) }
}

/// Sets the task's error message (the last call wins). [`run`] calls it for a handler's `Err`.
pub fn set_error(message: &str) {
    unsafe { host::error_write(message.as_ptr(), message.len()) }
}

/// Sets the task output (the last call wins). [`run`] calls it for a handler's `Ok`.
pub fn set_output(json: &[u8]) {
    unsafe { host::output_write(json.as_ptr(), json.len()) }
}

/// Copies `len` bytes from the host with `read`.
fn fetch(len: i32, read: impl FnOnce(*mut u8)) -> Vec<u8> {
    let len = len.max(0) as usize;
    let mut buf = Vec::with_capacity(len);
    if len > 0 {
        read(buf.as_mut_ptr());
        // The host wrote exactly len bytes at the pointer.
        unsafe { buf.set_len(len) };
    }
    buf
}

static PANIC_HOOK: Once = Once::new();

/// Routes panic messages to `error_write`: with `panic = "abort"` the module traps right
/// after the hook, and the host reports the message as the reason the task failed.
fn install_panic_hook() {
    PANIC_HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| set_error(&info.to_string())));
    });
}

/// Runs one task: the body of `pgflow_handle`. [`handler!`] calls it; call it yourself only
/// when writing the export by hand.
pub fn run<F, O, E>(input_len: i32, context_len: i32, handler: F) -> i32
where
    F: FnOnce(&[u8], &[u8]) -> Result<O, E>,
    O: AsRef<[u8]>,
    E: Display,
{
    install_panic_hook();
    let input = fetch(input_len, |ptr| unsafe { host::input_read(ptr) });
    let context = fetch(context_len, |ptr| unsafe { host::context_read(ptr) });
    match handler(&input, &context) {
        Ok(output) => {
            set_output(output.as_ref());
            STATUS_OK
        }
        Err(err) => {
            set_error(&err.to_string());
            STATUS_HANDLER_ERROR
        }
    }
}

/// Exports `pgflow_abi_version` and `pgflow_handle` for a handler
/// `fn(input: &[u8], context: &[u8]) -> Result<impl AsRef<[u8]>, impl Display>`.
/// Use it once per module.
#[macro_export]
macro_rules! handler {
    ($handler:path) => {
        #[no_mangle]
        pub extern "C" fn pgflow_abi_version() -> i32 {
            $crate::ABI_VERSION
        }

        #[no_mangle]
        pub extern "C" fn pgflow_handle(input_len: i32, context_len: i32) -> i32 {
            $crate::run(input_len, context_len, $handler)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upper(input: &[u8], _: &[u8]) -> Result<Vec<u8>, String> {
        Ok(input.to_ascii_uppercase())
    }

    fn refuse(_: &[u8], _: &[u8]) -> Result<&'static str, &'static str> {
        Err("no")
    }

    #[test]
    fn statuses_follow_the_handler_result() {
        assert_eq!(run(0, 0, upper), STATUS_OK);
        assert_eq!(run(0, 0, refuse), STATUS_HANDLER_ERROR);
    }

    #[test]
    fn level_values_match_the_spec() {
        assert_eq!(
            [Level::Debug, Level::Info, Level::Warn, Level::Error].map(|l| l as i32),
            [0, 1, 2, 3]
        );
    }
}
