;; Log spam: 100000 lines of 100 bytes, then a valid output. Must not fail the task.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "true")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (local $i i32)
    (loop $spam
      (call $log (i32.const 1) (i32.const 100) (i32.const 100))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $spam (i32.lt_u (local.get $i) (i32.const 100000))))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.const 0)))
