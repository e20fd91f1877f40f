;; Bad: neither pgflow_handle nor _start.
(module
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1)))
