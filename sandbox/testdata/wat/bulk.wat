;; Bulk memory in chunks: the sandbox's instrumentation replaces memory.fill and
;; memory.copy with functions that work 1 MiB at a time. This handler exercises both past
;; that size, overlapping both ways, and reports a checksum, which must not depend on the
;; instrumentation. The input's length picks a case: 2 bytes ("") all of the above, 3 a
;; fill out of bounds, 4 a copy out of bounds, 5 a fill whose end wraps past 4 GiB.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 64) ;; 4 MiB
  (func $sum (param $from i32) (param $to i32) (result i32)
    (local $acc i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $from) (local.get $to)))
        (local.set $acc (i32.add (i32.mul (local.get $acc) (i32.const 31)) (i32.load8_u (local.get $from))))
        (local.set $from (i32.add (local.get $from) (i32.const 4093)))
        (br $next)))
    (local.get $acc))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $n i32) (param i32) (result i32)
    (local $i i32)
    (if (i32.eq (local.get $n) (i32.const 3))
      (then (memory.fill (i32.const 1048576) (i32.const 9) (i32.const 3145729))))
    (if (i32.eq (local.get $n) (i32.const 4))
      (then (memory.copy (i32.const 16) (i32.const 1048576) (i32.const 3145729))))
    (if (i32.eq (local.get $n) (i32.const 5))
      (then (memory.fill (i32.const 4294967000) (i32.const 9) (i32.const 2000000))))
    ;; a pattern: byte i = i * 7 (mod 256), written through stores in the first 64 KiB
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (i32.const 65536)))
        (i32.store8 (local.get $i) (i32.mul (local.get $i) (i32.const 7)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (memory.fill (i32.const 65536) (i32.const 170) (i32.const 2500000))     ;; 2.4 MiB of 0xaa
    (memory.copy (i32.const 100000) (i32.const 0) (i32.const 65536))        ;; pattern into the fill
    (memory.copy (i32.const 1000) (i32.const 0) (i32.const 2600000))        ;; overlapping, forward
    (memory.copy (i32.const 1500000) (i32.const 1400000) (i32.const 2500000)) ;; overlapping, backward
    (memory.fill (i32.const 4000000) (i32.const 1) (i32.const 194304))      ;; to the last byte
    (memory.copy (i32.const 4194000) (i32.const 4194000) (i32.const 304))   ;; onto itself, small
    (i32.store (i32.const 0) (call $sum (i32.const 0) (i32.const 4194304)))
    ;; output: the checksum as 8 hex digits in quotes
    (i32.store8 (i32.const 100) (i32.const 34))
    (local.set $i (i32.const 0))
    (block $done
      (loop $hex
        (br_if $done (i32.ge_u (local.get $i) (i32.const 8)))
        (i32.store8 (i32.add (i32.const 101) (local.get $i))
          (i32.add (i32.const 97) (i32.and (i32.shr_u (i32.load (i32.const 0)) (i32.mul (local.get $i) (i32.const 4))) (i32.const 15))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $hex)))
    (i32.store8 (i32.const 109) (i32.const 34))
    (call $output_write (i32.const 100) (i32.const 10))
    (i32.const 0)))
