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
        pub fn sql_query(request: *const u8, request_len: usize) -> i32;
        pub fn sql_result_read(ptr: *mut u8, cap: usize) -> i32;
    }
}

// Off wasm (native builds: `cargo test`) the host functions are those of the test host in
// [`testing`], so a handler's unit tests go through the same ABI calls as on the worker.
#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::testing::with_state;
    use std::slice;

    /// Copies up to `cap` bytes of `data` to `ptr` and returns the whole length: the ABI's pull pattern.
    unsafe fn copy_out(data: &[u8], ptr: *mut u8, cap: usize) -> i32 {
        let n = data.len().min(cap);
        if n > 0 {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, n);
        }
        data.len() as i32
    }

    unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
        if len == 0 {
            &[]
        } else {
            slice::from_raw_parts(ptr, len)
        }
    }

    pub unsafe fn input_read(ptr: *mut u8) {
        with_state(|s| copy_out(&s.input, ptr, s.input.len()));
    }
    pub unsafe fn context_read(ptr: *mut u8) {
        with_state(|s| copy_out(&s.context, ptr, s.context.len()));
    }
    pub unsafe fn output_write(ptr: *const u8, len: usize) {
        with_state(|s| s.output = Some(bytes(ptr, len).to_vec()));
    }
    pub unsafe fn error_write(ptr: *const u8, len: usize) {
        with_state(|s| s.error = Some(String::from_utf8_lossy(bytes(ptr, len)).into_owned()));
    }
    pub unsafe fn log(level: i32, ptr: *const u8, len: usize) {
        with_state(|s| s.logs.push((level, String::from_utf8_lossy(bytes(ptr, len)).into_owned())));
    }
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn http_request(
        method: *const u8,
        method_len: usize,
        url: *const u8,
        url_len: usize,
        headers: *const u8,
        headers_len: usize,
        body: *const u8,
        body_len: usize,
    ) -> i32 {
        let text = |p, n| String::from_utf8_lossy(bytes(p, n)).into_owned();
        let req = super::testing::Request {
            method: text(method, method_len),
            url: text(url, url_len),
            headers: super::http::parse_headers(&text(headers, headers_len)),
            body: bytes(body, body_len).to_vec(),
        };
        with_state(|s| s.request(req)).unwrap_or_else(|| super::testing::deny_outside_call())
    }
    pub unsafe fn http_response_read(part: i32, ptr: *mut u8, cap: usize) -> i32 {
        with_state(|s| match &s.response {
            Some(r) if part == 0 => copy_out(super::testing::header_text(&r.headers).as_bytes(), ptr, cap),
            Some(r) => copy_out(&r.body, ptr, cap),
            None => 0,
        })
        .unwrap_or(0)
    }
    pub unsafe fn config_get(name: *const u8, name_len: usize, ptr: *mut u8, cap: usize) -> i32 {
        let name = String::from_utf8_lossy(bytes(name, name_len)).into_owned();
        with_state(|s| match s.config_value(&name) {
            Ok(v) => copy_out(v.as_bytes(), ptr, cap),
            Err(code) => code,
        })
        .unwrap_or_else(|| super::testing::deny_outside_call())
    }
    pub unsafe fn last_error(ptr: *mut u8, cap: usize) -> i32 {
        let msg = with_state(|s| s.last_error.clone()).unwrap_or_else(|| super::testing::NOT_HOSTED.to_string());
        copy_out(msg.as_bytes(), ptr, cap)
    }
    pub unsafe fn sql_query(request: *const u8, request_len: usize) -> i32 {
        let req = String::from_utf8_lossy(bytes(request, request_len)).into_owned();
        with_state(|s| s.sql(req)).unwrap_or_else(|| super::testing::deny_outside_call())
    }
    pub unsafe fn sql_result_read(ptr: *mut u8, cap: usize) -> i32 {
        with_state(|s| copy_out(&s.sql_result, ptr, cap)).unwrap_or(0)
    }
}

/// A stand-in for the pgflow-wasm worker in native unit tests (`cargo test`): [`testing::call`]
/// calls the module's `pgflow_handle` export as the worker calls it for one task, serving
/// the ABI's imports from memory, and returns what the handler handed back.
///
/// ```ignore
/// #[test]
/// fn greets() {
///     let got = pgflow::testing::call(crate::pgflow_handle, br#"{"run":{"name":"Ada"}}"#,
///                                     &pgflow::testing::context("hello", "hello"));
///     assert_eq!(got.output_str(), Some(r#"{"greeting":"Hello, Ada!"}"#));
/// }
/// ```
#[cfg(not(target_arch = "wasm32"))]
pub mod testing {
    use super::{http::Response, CapError, Level, ERR_DENIED, ERR_NETWORK};
    use std::cell::RefCell;
    use std::collections::HashMap;

    pub(crate) const NOT_HOSTED: &str = "pgflow: capabilities need a pgflow-wasm host (or pgflow::testing in tests)";

    /// One HTTP request a handler sent.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct Request {
        pub method: String,
        pub url: String,
        pub headers: Vec<(String, String)>,
        pub body: Vec<u8>,
    }

    /// What one call handed back to the host.
    #[derive(Clone, Debug, Default)]
    pub struct Outcome {
        /// What `pgflow_handle` returned: 0 the task completed, 1 it failed.
        pub status: i32,
        /// The last output written, if any.
        pub output: Option<Vec<u8>>,
        /// The last error message written, if any.
        pub error: Option<String>,
        /// Every log line, in order.
        pub logs: Vec<(Level, String)>,
    }

    impl Outcome {
        /// The output as text, if there is one.
        pub fn output_str(&self) -> Option<&str> {
            self.output.as_deref().and_then(|o| std::str::from_utf8(o).ok())
        }
    }

    type Responder = Box<dyn FnMut(&Request) -> Result<Response, CapError>>;
    type SqlResponder = Box<dyn FnMut(&str) -> Result<String, CapError>>;

    /// A host with capabilities: named values and an HTTP responder. `Host::new()` grants
    /// nothing, like a step without `http` and `env` keys in flows.yaml.
    #[derive(Default)]
    pub struct Host {
        config: HashMap<String, String>,
        http: Option<Responder>,
        sql: Option<SqlResponder>,
    }

    impl Host {
        pub fn new() -> Self {
            Self::default()
        }

        /// Grants a named value (a name of the step's `env` list, with its value).
        pub fn config(mut self, name: &str, value: &str) -> Self {
            self.config.insert(name.to_string(), value.to_string());
            self
        }

        /// Grants HTTP: `respond` answers every request (an `Err` refuses it with a code
        /// of the ABI, e.g. `ERR_HOST_NOT_ALLOWED`, and its message).
        pub fn http(mut self, respond: impl FnMut(&Request) -> Result<Response, CapError> + 'static) -> Self {
            self.http = Some(Box::new(respond));
            self
        }

        /// Grants SQL: `respond` answers every statement, given the request JSON the
        /// handler sent (`{"sql": ..., "params": [...]}`), with the result JSON (an `Err`
        /// fails it with a code of the ABI, e.g. `ERR_SQL_FAILED`, and its message).
        pub fn sql(mut self, respond: impl FnMut(&str) -> Result<String, CapError> + 'static) -> Self {
            self.sql = Some(Box::new(respond));
            self
        }

        /// Calls `handle` (the module's `pgflow_handle`) once with input and context.
        pub fn call(self, handle: extern "C" fn(i32, i32) -> i32, input: &[u8], context: &[u8]) -> Outcome {
            let state = State {
                input: input.to_vec(),
                context: context.to_vec(),
                host: self,
                ..State::default()
            };
            STATE.with(|s| *s.borrow_mut() = Some(state));
            // Cleared even when the handler panics, so the next test starts afresh.
            struct Clear;
            impl Drop for Clear {
                fn drop(&mut self) {
                    STATE.with(|s| s.borrow_mut().take());
                }
            }
            let _clear = Clear;
            let status = handle(input.len() as i32, context.len() as i32);
            let s = STATE.with(|s| s.borrow_mut().take()).unwrap_or_default();
            let logs = s.logs.into_iter().map(|(l, m)| (level(l), m)).collect();
            Outcome { status, output: s.output, error: s.error, logs }
        }
    }

    /// Calls `handle` once on a host that grants nothing.
    pub fn call(handle: extern "C" fn(i32, i32) -> i32, input: &[u8], context: &[u8]) -> Outcome {
        Host::new().call(handle, input, context)
    }

    /// A context JSON like the worker's for a task of `step` in `flow`: first attempt,
    /// task 0, fixed ids.
    pub fn context(flow: &str, step: &str) -> String {
        let run_id = "00000000-0000-4000-8000-000000000001";
        format!(
            r#"{{"run_id":"{run_id}","flow_slug":"{flow}","step_slug":"{step}","task_index":0,"attempt":1,"msg_id":1,"flow_input":null,"worker_id":"00000000-0000-4000-8000-000000000002","timeout_ms":60000,"idempotency_key":"{run_id}:{step}:0"}}"#
        )
    }

    fn level(l: i32) -> Level {
        match l {
            0 => Level::Debug,
            1 => Level::Info,
            2 => Level::Warn,
            _ => Level::Error,
        }
    }

    #[derive(Default)]
    pub(crate) struct State {
        pub(crate) input: Vec<u8>,
        pub(crate) context: Vec<u8>,
        pub(crate) output: Option<Vec<u8>>,
        pub(crate) error: Option<String>,
        pub(crate) logs: Vec<(i32, String)>,
        pub(crate) response: Option<Response>,
        pub(crate) sql_result: Vec<u8>,
        pub(crate) last_error: String,
        host: Host,
    }

    impl State {
        pub(crate) fn request(&mut self, req: Request) -> i32 {
            self.response = None;
            let got = match self.host.http.as_mut() {
                None => Err(CapError {
                    code: ERR_DENIED,
                    message: "pgflow test host: HTTP is denied (grant it with Host::new().http(...), as a step's `http` key in flows.yaml does)".into(),
                }),
                Some(respond) => respond(&req),
            };
            match got {
                Ok(r) if (100..=599).contains(&r.status) => {
                    let status = r.status as i32;
                    self.response = Some(r);
                    status
                }
                Ok(r) => self.fail(ERR_NETWORK, format!("pgflow test host: the responder returned status {}", r.status)),
                Err(e) => self.fail(e.code, e.message),
            }
        }

        pub(crate) fn sql(&mut self, request: String) -> i32 {
            self.sql_result.clear();
            let got = match self.host.sql.as_mut() {
                None => Err(CapError {
                    code: ERR_DENIED,
                    message: "pgflow test host: SQL is denied (grant it with Host::new().sql(...), as a step's `sql` key in flows.yaml does)".into(),
                }),
                Some(respond) => respond(&request),
            };
            match got {
                Ok(result) => {
                    self.sql_result = result.into_bytes();
                    self.sql_result.len() as i32
                }
                Err(e) => self.fail(e.code, e.message),
            }
        }

        pub(crate) fn config_value(&mut self, name: &str) -> Result<String, i32> {
            match self.host.config.get(name) {
                Some(v) => Ok(v.clone()),
                None => Err(self.fail(
                    ERR_DENIED,
                    format!("pgflow test host: {name} is not granted (Host::new().config(...); a step reads only the names of its `env` list)"),
                )),
            }
        }

        fn fail(&mut self, code: i32, message: String) -> i32 {
            self.last_error = message;
            code
        }
    }

    thread_local! {
        static STATE: RefCell<Option<State>> = RefCell::new(None);
    }

    /// Runs `f` on the state of the call in progress; `None` outside a call.
    pub(crate) fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
        STATE.with(|s| s.borrow_mut().as_mut().map(f))
    }

    /// What a capability call returns outside [`call`]: denied.
    pub(crate) fn deny_outside_call() -> i32 {
        ERR_DENIED
    }

    pub(crate) fn header_text(headers: &[(String, String)]) -> String {
        headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect()
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

/// Error codes of [`http::request`], [`config`] and [`sql::query`] (see `abi/SPEC.md`).
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
pub const ERR_SQL_REFUSED: i32 = -11;
pub const ERR_SQL_FAILED: i32 = -12;

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

/// SQL as the step's role, as far as its `sql` section in flows.yaml allows.
pub mod sql {
    use super::{cap_error, host, pull, CapError};
    use std::fmt::Write;

    /// A parameter of a statement: `$1`, `$2`, ... Values travel apart from the statement
    /// and are never part of its text.
    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum Param<'a> {
        Null,
        Bool(bool),
        Int(i64),
        /// A finite number (NaN and the infinities have no JSON form: pass them as text).
        Float(f64),
        Text(&'a str),
        /// JSON text already (for json and jsonb).
        Json(&'a str),
    }

    impl From<bool> for Param<'_> {
        fn from(v: bool) -> Self {
            Param::Bool(v)
        }
    }
    impl From<i32> for Param<'_> {
        fn from(v: i32) -> Self {
            Param::Int(v.into())
        }
    }
    impl From<i64> for Param<'_> {
        fn from(v: i64) -> Self {
            Param::Int(v)
        }
    }
    impl From<f64> for Param<'_> {
        fn from(v: f64) -> Self {
            Param::Float(v)
        }
    }
    impl<'a> From<&'a str> for Param<'a> {
        fn from(v: &'a str) -> Self {
            Param::Text(v)
        }
    }
    impl<'a> From<&'a String> for Param<'a> {
        fn from(v: &'a String) -> Self {
            Param::Text(v)
        }
    }
    impl<'a, T: Into<Param<'a>>> From<Option<T>> for Param<'a> {
        fn from(v: Option<T>) -> Self {
            v.map_or(Param::Null, Into::into)
        }
    }

    /// Runs one statement and returns its result JSON:
    /// `{"columns": ["id"], "rows": [[1]], "row_count": 1, "command": "SELECT 1"}` (numbers,
    /// booleans, json and jsonb keep their JSON types; other values are PostgreSQL's text).
    /// A refused or failed statement is an `Err` whose message says why (with its SQLSTATE).
    pub fn query(sql: &str, params: &[Param]) -> Result<String, CapError> {
        let mut req = String::with_capacity(sql.len() + 32);
        req.push_str(r#"{"sql":"#);
        quote(&mut req, sql);
        req.push_str(r#","params":["#);
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                req.push(',');
            }
            match *p {
                Param::Null => req.push_str("null"),
                Param::Bool(b) => req.push_str(if b { "true" } else { "false" }),
                Param::Int(n) => {
                    let _ = write!(req, "{n}");
                }
                Param::Float(f) if f.is_finite() => {
                    let _ = write!(req, "{f:?}");
                }
                Param::Float(_) => {
                    return Err(CapError {
                        code: super::ERR_BAD_REQUEST,
                        message: format!("pgflow: SQL parameter ${}: NaN and infinities have no JSON form: pass them as text", i + 1),
                    })
                }
                Param::Text(s) => quote(&mut req, s),
                Param::Json(j) => req.push_str(j),
            }
        }
        req.push_str("]}");
        request(&req)
    }

    /// Sends a request JSON as it is (`{"sql": ..., "params": [...]}`).
    pub fn request(json: &str) -> Result<String, CapError> {
        let n = unsafe { host::sql_query(json.as_ptr(), json.len()) };
        if n < 0 {
            return Err(cap_error(n));
        }
        let bytes = pull(n, |ptr, cap| unsafe { host::sql_result_read(ptr, cap) });
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Writes s as a JSON string.
    pub(crate) fn quote(out: &mut String, s: &str) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c => out.push(c),
            }
        }
        out.push('"');
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
        #[cfg(not(target_arch = "wasm32"))]
        {
            // In native tests, keep the default report too: a failing assert must still print.
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                set_error(&info.to_string());
                previous(info);
            }));
        }
        #[cfg(target_arch = "wasm32")]
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

    mod through_the_abi {
        use crate::testing::{self, Host, Request};
        use crate::{http, CapError, Level, ERR_HOST_NOT_ALLOWED};

        fn echo(input: &[u8], context: &[u8]) -> Result<Vec<u8>, String> {
            crate::log(Level::Info, "echoing");
            if input.is_empty() {
                return Err("empty input".into());
            }
            let mut out = input.to_vec();
            out.extend_from_slice(&context[..1]);
            Ok(out)
        }
        crate::handler!(echo);

        #[test]
        fn call_records_output_error_and_logs() {
            let got = testing::call(pgflow_handle, b"[1", b"]");
            assert_eq!((got.status, got.output_str(), got.error.as_deref()), (0, Some("[1]"), None));
            assert_eq!(got.logs, vec![(Level::Info, "echoing".to_string())]);
            let got = testing::call(pgflow_handle, b"", b"{}");
            assert_eq!((got.status, got.output, got.error.as_deref()), (1, None, Some("empty input")));
        }

        #[test]
        fn host_grants_config_and_http() {
            let host = Host::new().config("TOKEN", "t0k").http(|req: &Request| {
                if req.url.contains("refused") {
                    return Err(CapError { code: ERR_HOST_NOT_ALLOWED, message: "not in http.allow".into() });
                }
                Ok(http::Response {
                    status: 201,
                    headers: vec![("Content-Type".into(), "text/plain".into())],
                    body: format!("{} {}", req.method, req.headers[0].1).into_bytes(),
                })
            });
            // The host functions are called as a handler would, inside the call.
            fn caps(_: &[u8], _: &[u8]) -> Result<String, CapError> {
                let token = crate::config("TOKEN")?;
                assert_eq!(crate::config("OTHER").unwrap_err().code, crate::ERR_DENIED);
                let r = http::request("POST", "https://api.example/", &[("Authorization", &token)], b"x")?;
                let refused = http::get("https://refused.example/").unwrap_err();
                Ok(format!(
                    "{} {} {} {}",
                    r.status,
                    r.header("content-type").unwrap_or(""),
                    String::from_utf8_lossy(&r.body),
                    refused
                ))
            }
            extern "C" fn handle(i: i32, c: i32) -> i32 {
                crate::run(i, c, caps)
            }
            let got = host.call(handle, b"{}", b"{}");
            assert_eq!(got.output_str(), Some("201 text/plain POST t0k not in http.allow"), "{got:?}");
        }

        #[test]
        fn host_grants_sql() {
            use crate::sql::{self, Param};
            use std::cell::RefCell;
            use std::rc::Rc;
            let seen = Rc::new(RefCell::new(Vec::new()));
            let log = seen.clone();
            let host = Host::new().sql(move |req: &str| {
                log.borrow_mut().push(req.to_string());
                if req.contains("set role") {
                    return Err(CapError { code: crate::ERR_SQL_REFUSED, message: "sql: SET statements are not allowed".into() });
                }
                Ok(r#"{"columns":["n"],"rows":[[7]],"row_count":1,"command":"SELECT 1"}"#.into())
            });
            fn q(_: &[u8], _: &[u8]) -> Result<String, CapError> {
                let name = String::from("it's \"q\"\n");
                let r = sql::query(
                    "select $1::int, $2, $3, $4, $5, $6",
                    &[7.into(), (&name).into(), Param::Null, true.into(), 0.5.into(), Param::Json(r#"{"a":1}"#)],
                )?;
                let refused = sql::query("set role postgres", &[]).unwrap_err();
                assert_eq!(refused.code, crate::ERR_SQL_REFUSED);
                assert_eq!(sql::query("select $1", &[f64::NAN.into()]).unwrap_err().code, crate::ERR_BAD_REQUEST);
                Ok(format!("{r} {refused}"))
            }
            extern "C" fn handle(i: i32, c: i32) -> i32 {
                crate::run(i, c, q)
            }
            let got = host.call(handle, b"{}", b"{}");
            assert_eq!(
                got.output_str(),
                Some(r#"{"columns":["n"],"rows":[[7]],"row_count":1,"command":"SELECT 1"} sql: SET statements are not allowed"#),
                "{got:?}"
            );
            assert_eq!(
                seen.borrow().as_slice(),
                [
                    r#"{"sql":"select $1::int, $2, $3, $4, $5, $6","params":[7,"it's \"q\"\n",null,true,0.5,{"a":1}]}"#,
                    r#"{"sql":"set role postgres","params":[]}"#
                ]
            );
            assert_eq!(crate::sql::query("select 1", &[]).unwrap_err().code, crate::ERR_DENIED);
        }

        #[test]
        fn context_is_json_with_the_step() {
            let c = testing::context("f", "s");
            assert!(c.contains(r#""step_slug":"s""#) && c.contains(r#""idempotency_key":"00000000-0000-4000-8000-000000000001:s:0""#));
        }
    }

    #[test]
    fn level_values_match_the_spec() {
        assert_eq!(
            [Level::Debug, Level::Info, Level::Warn, Level::Error].map(|l| l as i32),
            [0, 1, 2, 3]
        );
    }
}
