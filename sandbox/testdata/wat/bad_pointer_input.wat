;; Bad: input_read at an address where ptr + input_len wraps past 2^32.
(module
  (import "pgflow" "input_read" (func $input_read (param i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $input_read (i32.const 0xfffffffe))
    (i32.const 0)))
