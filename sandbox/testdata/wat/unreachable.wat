;; Bad: writes an error message, then hits unreachable.
(module
  (import "pgflow" "error_write" (func $error_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "about to crash")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $error_write (i32.const 0) (i32.const 14))
    unreachable))
