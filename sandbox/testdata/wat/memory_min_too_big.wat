;; Bad with the default 64 MiB limit: a minimum of 2000 pages (125 MiB).
(module
  (memory (export "memory") 2000)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
