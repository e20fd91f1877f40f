;; Bad: a JSON string holding an invalid UTF-8 byte.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\"\ff\"")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $output_write (i32.const 0) (i32.const 3))
    (i32.const 0)))
