;; A handler error whose message (64 KiB of 'x') is over the error cap: truncated, not an error.
(module
  (import "pgflow" "error_write" (func $error_write (param i32 i32)))
  (memory (export "memory") 2)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (memory.fill (i32.const 0) (i32.const 120) (i32.const 65536))
    (call $error_write (i32.const 0) (i32.const 65536))
    (i32.const 1)))
