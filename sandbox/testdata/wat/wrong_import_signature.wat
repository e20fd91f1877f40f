;; Bad: imports pgflow.log with the wrong signature.
(module
  (import "pgflow" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
