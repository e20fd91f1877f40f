;; Bad: doubles its memory until memory.grow fails, then traps: the failure happens with
;; memory well below the cap, as with allocators that double their heap.
(module
  (memory (export "memory") 1)
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (memory.size)) (i32.const -1))))
    unreachable))
