;; Bad in a reactor: proc_exit(1) from inside pgflow_handle.
(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $exit (i32.const 1))
    (i32.const 0)))
