;; data_dirty.wat without data: its memory must read zero where data_dirty's data and
;; writes were, whichever module used the memory before. Answers "ok" (a JSON string).
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 17)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (if (i32.ne (i32.load (i32.const 0)) (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 70000)) (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 4096)) (i32.const 0)) (then unreachable))
    (if (i32.ne (i32.load (i32.const 1048000)) (i32.const 0)) (then unreachable))
    (i32.store (i32.const 0) (i32.const 0x226b6f22))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.store (i32.const 70000) (i32.const -1))
    (i32.store (i32.const 4096) (i32.const -1))
    (i32.store (i32.const 1048000) (i32.const -1))
    (i32.const 0)))
