;; Bad: imports a pgflow function that ABI v1 does not have.
(module
  (import "pgflow" "http_get" (func $get (param i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
