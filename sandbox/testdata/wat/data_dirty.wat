;; Leaves its memory dirty inside and outside its data segments: a fresh instance must see
;; its data as the module holds it and zero elsewhere, whoever used the memory before (the
;; sandbox reuses linear memories, clearing only what instantiation does not write again).
;; 17 pages: past 1 MiB, where the sandbox's pooled memories are mappings. Answers "ok" (a JSON string).
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 17)
  (data (i32.const 0) "\07\00\00\00")
  (data (i32.const 70000) "\"ok\"")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (if (i32.ne (i32.load (i32.const 0)) (i32.const 7)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 70000)) (i32.const 0x226b6f22)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 4096)) (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 1048000)) (i32.const 0)) (then unreachable))
    (call $output_write (i32.const 70000) (i32.const 4))
    (i32.store (i32.const 0) (i32.const -1))
    (i32.store (i32.const 70000) (i32.const -1))
    (i32.store (i32.const 4096) (i32.const -1))
    (i32.store (i32.const 1048000) (i32.const -1))
    (i32.const 0)))
