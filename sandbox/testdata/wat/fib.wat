;; Bad when slow: loop-free recursive fib(n) where n is the input length, so the test picks
;; the cost (fib(40) is about 330 million calls). Output: true.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "true")
  (func $fib (param $n i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $n) (i32.const 2))
      (then (local.get $n))
      (else (i32.add
        (call $fib (i32.sub (local.get $n) (i32.const 1)))
        (call $fib (i32.sub (local.get $n) (i32.const 2)))))))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param i32) (result i32)
    (drop (call $fib (local.get $in)))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.const 0)))
