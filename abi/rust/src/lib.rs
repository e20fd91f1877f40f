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
        #[allow(clippy::too_many_arguments)]
        pub fn http_request(
            method: *const u8,
            method_len: usize,
            url: *const u8,
            url_len: usize,
            headers: *const u8,
            headers_len: usize,
            body: *const u8,
            body_len: usize,
        ) -> i32;
        pub fn http_response_read(part: i32, ptr: *mut u8, cap: usize) -> i32;
        pub fn config_get(name: *const u8, name_len: usize, ptr: *mut u8, cap: usize) -> i32;
        pub fn last_error(ptr: *mut u8, cap: usize) -> i32;
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
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn http_request(
        _: *const u8,
        _: usize,
        _: *const u8,
        _: usize,
        _: *const u8,
        _: usize,
        _: *const u8,
        _: usize,
    ) -> i32 {
        super::ERR_DENIED
    }
    pub unsafe fn http_response_read(_: i32, _: *mut u8, _: usize) -> i32 {
        0
    }
    pub unsafe fn config_get(_: *const u8, _: usize, _: *mut u8, _: usize) -> i32 {
        super::ERR_DENIED
    }
    pub unsafe fn last_error(_: *mut u8, _: usize) -> i32 {
        0
    }
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

/// Error codes of [`http::request`] and [`config`] (see `abi/SPEC.md`).
pub const ERR_DENIED: i32 = -1;
pub const ERR_HOST_NOT_ALLOWED: i32 = -2;
pub const ERR_ADDRESS_REFUSED: i32 = -3;
pub const ERR_TOO_MANY_REQUESTS: i32 = -4;
pub const ERR_RESPONSE_TOO_LARGE: i32 = -5;
pub const ERR_REQUEST_TOO_LARGE: i32 = -6;
pub const ERR_BAD_REQUEST: i32 = -7;
pub const ERR_NETWORK: i32 = -8;
pub const ERR_TOO_MANY_REDIRECTS: i32 = -9;
pub const ERR_NOT_SET: i32 = -10;

/// A refused or failed capability call: `code` is one of the `ERR_*` constants, `message`
/// the host's explanation (which flows.yaml key to change). Display shows the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapError {
    pub code: i32,
    pub message: String,
}

impl Display for CapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CapError {}

/// Pulls a value of `n` bytes with `read(ptr, cap)` (the host returns the whole length).
fn pull(n: i32, read: impl FnOnce(*mut u8, usize) -> i32) -> Vec<u8> {
    fetch(n, |ptr| {
        read(ptr, n as usize);
    })
}

fn cap_error(code: i32) -> CapError {
    let n = unsafe { host::last_error(std::ptr::null_mut(), 0) };
    let message = pull(n, |ptr, cap| unsafe { host::last_error(ptr, cap) });
    CapError { code, message: String::from_utf8_lossy(&message).into_owned() }
}

/// Reads a named value the step may see: a name of its `env` list in flows.yaml, with the
/// worker's value.
pub fn config(name: &str) -> Result<String, CapError> {
    let n = unsafe { host::config_get(name.as_ptr(), name.len(), std::ptr::null_mut(), 0) };
    if n < 0 {
        return Err(cap_error(n));
    }
    let value = pull(n, |ptr, cap| unsafe { host::config_get(name.as_ptr(), name.len(), ptr, cap) });
    Ok(String::from_utf8_lossy(&value).into_owned())
}

/// Outbound HTTP, as far as the step's `http` section in flows.yaml allows.
pub mod http {
    use super::{cap_error, host, pull, CapError};

    /// A response. An error status (404, 500) is a response like any other.
    #[derive(Clone, Debug)]
    pub struct Response {
        pub status: u16,
        /// (name, value) pairs, names in canonical form (`Content-Type`), sorted by name.
        pub headers: Vec<(String, String)>,
        pub body: Vec<u8>,
    }

    impl Response {
        /// The first value of a header, by name in any case.
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
        }
    }

    /// GET url.
    pub fn get(url: &str) -> Result<Response, CapError> {
        request("GET", url, &[], &[])
    }

    /// Sends a request: method, an absolute http(s) URL, headers as (name, value) pairs
    /// and a body. Redirects are followed (each hop must be allowed too).
    pub fn request(method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Response, CapError> {
        let mut lines = String::new();
        for (name, value) in headers {
            lines.push_str(name);
            lines.push_str(": ");
            lines.push_str(value);
            lines.push('\n');
        }
        let status = unsafe {
            host::http_request(
                method.as_ptr(),
                method.len(),
                url.as_ptr(),
                url.len(),
                lines.as_ptr(),
                lines.len(),
                body.as_ptr(),
                body.len(),
            )
        };
        if status < 0 {
            return Err(cap_error(status));
        }
        let part = |p: i32| {
            let n = unsafe { host::http_response_read(p, std::ptr::null_mut(), 0) };
            pull(n, |ptr, cap| unsafe { host::http_response_read(p, ptr, cap) })
        };
        let headers = parse_headers(&String::from_utf8_lossy(&part(0)));
        Ok(Response { status: status as u16, headers, body: part(1) })
    }

    /// Reads "Name: value\n" lines.
    pub(crate) fn parse_headers(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|line| line.split_once(": "))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }
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
    fn headers_parse_as_the_host_writes_them() {
        let h = http::parse_headers("Content-Type: application/json\nX-Multi: a\nX-Multi: b\n");
        assert_eq!(h.len(), 3);
        let r = http::Response { status: 200, headers: h, body: vec![] };
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("x-multi"), Some("a"));
        assert_eq!(r.header("missing"), None);
    }

    #[test]
    fn calls_off_wasm_are_denied() {
        assert_eq!(config("X").unwrap_err().code, ERR_DENIED);
        assert_eq!(http::get("http://example.com/").unwrap_err().code, ERR_DENIED);
    }

    #[test]
    fn level_values_match_the_spec() {
        assert_eq!(
            [Level::Debug, Level::Info, Level::Warn, Level::Error].map(|l| l as i32),
            [0, 1, 2, 3]
        );
    }
}
