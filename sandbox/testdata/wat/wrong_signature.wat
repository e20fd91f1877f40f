;; Bad: pgflow_handle takes one parameter.
(module
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32) (result i32) (i32.const 0)))
