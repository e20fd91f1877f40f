;; Bad: valid JSON that PostgreSQL jsonb refuses ("\u0000").
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\"a\\u0000b\"")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $output_write (i32.const 0) (i32.const 10))
    (i32.const 0)))
