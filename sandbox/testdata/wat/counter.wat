;; Counts its calls in a global and in memory: a fresh instance always answers 1,
;; a reused one 1, 2, 3... (proves tasks do not share instances unless asked to).
;; An input of exactly 6 bytes (e.g. "fail") makes it trap after counting.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (global $calls (mut i32) (i32.const 0))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (local $n i32) (local $p i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    ;; also count in memory at address 0, so leftover memory would show too
    (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 1)))
    (if (i32.ne (i32.load (i32.const 0)) (global.get $calls)) (then unreachable))
    (if (i32.eq (local.get $in) (i32.const 6)) (then unreachable))
    ;; decimal digits of $calls, written backwards ending at address 100
    (local.set $n (global.get $calls))
    (local.set $p (i32.const 100))
    (loop $digits
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digits (local.get $n)))
    (call $output_write (local.get $p) (i32.sub (i32.const 100) (local.get $p)))
    (i32.const 0)))
