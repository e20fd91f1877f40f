;; Bad: _initialize runs loop-free exponential recursion (fib(60)): loading must stop it at
;; the load timeout, and so must a task's fresh instance at the task's deadline.
(module
  (memory (export "memory") 1)
  (func $fib (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (local.get $n))
      (else (i32.add
        (call $fib (i32.sub (local.get $n) (i32.const 1)))
        (call $fib (i32.sub (local.get $n) (i32.const 2)))))))
  (func (export "_initialize") (drop (call $fib (i32.const 60))))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32) (i32.const 0)))
