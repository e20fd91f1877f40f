;; Good reactor: returns the context JSON it was given, so tests see exactly what the host passed.
(module
  (import "pgflow" "context_read" (func $context_read (param i32)))
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (call $context_read (i32.const 0))
    (call $output_write (i32.const 0) (local.get $ctx))
    (i32.const 0)))
