// Rust reactor (wasm32-wasi) that grows a Vec until the allocator fails: std reports
// "memory allocation of N bytes failed" on stderr and aborts.
#[no_mangle]
pub extern "C" fn pgflow_abi_version() -> i32 {
    1
}

#[no_mangle]
pub extern "C" fn pgflow_handle(_input_len: i32, _context_len: i32) -> i32 {
    let mut hog: Vec<Vec<u8>> = Vec::new();
    loop {
        hog.push(vec![1u8; 1 << 20]);
        if hog.len() == usize::MAX {
            return 0;
        }
    }
}
