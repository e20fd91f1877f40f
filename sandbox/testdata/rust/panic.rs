// Rust reactor (wasm32-wasi, panic=abort) that panics: std prints the panic message to
// stderr, then the abort traps. The host must report both.
#[no_mangle]
pub extern "C" fn pgflow_abi_version() -> i32 {
    1
}

#[no_mangle]
pub extern "C" fn pgflow_handle(input_len: i32, _context_len: i32) -> i32 {
    if input_len >= 0 {
        panic!("boom from Rust (input was {} bytes)", input_len);
    }
    0
}
