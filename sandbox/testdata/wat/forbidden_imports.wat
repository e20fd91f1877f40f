;; Bad: what an AssemblyScript handler imports when it uses Math.random, Date.now and
;; console.log, plus a pgflow name outside the ABI. All of them must be named at once.
(module
  (import "env" "seed" (func (result f64)))
  (import "env" "Date.now" (func (result f64)))
  (import "env" "console.log" (func (param i32)))
  (import "pgflow" "http_get" (func (param i32 i32) (result i32)))
  (import "pgflow" "log" (func (param i32 i32 i32)))
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
