;; Bad: error_write with a pointer past the end of memory.
(module
  (import "pgflow" "error_write" (func $error_write (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $error_write (i32.const 65536) (i32.const 1))
    (i32.const 1)))
