;; Bad: imports its memory.
(module
  (import "env" "memory" (memory 1))
  (export "memory" (memory 0))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
