;; A counted loop: sums 0..n-1 where n is the input length, so a test picks the work done.
;; The work per iteration is fixed, so the fuel a task uses is a known function of n.
;; Output: true.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "true")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $n i32) (param i32) (result i32)
    (local $i i32) (local $sum i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $sum (i32.add (local.get $sum) (local.get $i)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.store (i32.const 16) (local.get $sum))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.const 0)))
