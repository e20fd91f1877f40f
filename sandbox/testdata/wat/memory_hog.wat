;; Bad when slow: grows its memory to 60 MiB, writes every page, then loops until its
;; deadline. Many at once show whether the memory of timed-out instances is given back.
(module
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (drop (memory.grow (i32.const 959)))
    (memory.fill (i32.const 0) (i32.const 1) (i32.const 62914560))
    (loop $forever (br $forever))
    (i32.const 0)))
