;; Logs one line per level -1, 0, 1, 2, 3, 9 (out-of-range levels are clamped), then
;; returns null: the output "null" must stay null.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "null")
  (data (i32.const 16) "d\c3\a9j\c3\a0 vu \ff")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $log (i32.const -1) (i32.const 16) (i32.const 1))
    (call $log (i32.const 0) (i32.const 16) (i32.const 1))
    (call $log (i32.const 1) (i32.const 16) (i32.const 1))
    (call $log (i32.const 2) (i32.const 16) (i32.const 1))
    (call $log (i32.const 3) (i32.const 16) (i32.const 1))
    (call $log (i32.const 9) (i32.const 16) (i32.const 11))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.const 0)))
