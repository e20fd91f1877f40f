;; Checks that it starts as a new instance would (its mutable global at 7, its data as the
;; module holds it, zero elsewhere, 17 pages of memory), then leaves all of them changed:
;; whatever instance serves the next task must look new again. An input of odd length also
;; grows the memory by a page. 17 pages: past 1 MiB, where pooled memories are mappings.
;; Answers "ok" (a JSON string); any leftover traps.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 17)
  (global $calls (mut i32) (i32.const 7))
  (global $wide (mut i64) (i64.const -3))
  (data (i32.const 0) "\07\00\00\00")
  (data (i32.const 70000) "\"ok\"")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (if (i32.ne (global.get $calls) (i32.const 7)) (then unreachable))
    (if (i64.ne (global.get $wide) (i64.const -3)) (then unreachable))
    (if (i32.ne (memory.size) (i32.const 17)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 0)) (i32.const 7)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 70000)) (i32.const 0x226b6f22)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 4096)) (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 1048000)) (i32.const 0)) (then unreachable))
    (call $output_write (i32.const 70000) (i32.const 4))
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $wide (i64.const 99))
    (i32.store (i32.const 0) (i32.const -1))
    (i32.store (i32.const 70000) (i32.const -1))
    (i32.store (i32.const 4096) (i32.const -1))
    (i32.store (i32.const 1048000) (i32.const -1))
    (if (i32.and (local.get $in) (i32.const 1))
      (then (drop (memory.grow (i32.const 1)))))
    (i32.const 0)))
