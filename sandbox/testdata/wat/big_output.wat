;; Bad: output_write of 8 MiB (memory of 129 pages holds it).
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 129)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $output_write (i32.const 0) (i32.const 8388608))
    (i32.const 0)))
