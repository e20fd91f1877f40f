;; Bad: a reactor without pgflow_abi_version.
(module
  (memory (export "memory") 1)
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
