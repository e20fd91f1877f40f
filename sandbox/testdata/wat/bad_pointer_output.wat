;; Bad: output_write whose ptr + len wraps around to a small number.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $output_write (i32.const 0xffffff00) (i32.const 0x200))
    (i32.const 0)))
