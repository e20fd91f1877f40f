;; Bad: integer division by zero (the divisor is the context length minus itself).
(module
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (i32.div_u (i32.const 1) (i32.sub (local.get $ctx) (local.get $ctx)))))
