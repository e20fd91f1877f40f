;; Bad: log with a length one byte past the end of memory.
(module
  (import "pgflow" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $log (i32.const 1) (i32.const 0) (i32.const 65537))
    (i32.const 0)))
