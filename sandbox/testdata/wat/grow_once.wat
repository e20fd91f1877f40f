;; Grows its memory by the number of pages given as the input length, then succeeds
;; (output true) or handles a refused grow itself (status 1, "grow refused").
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "error_write" (func $error_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "true")
  (data (i32.const 16) "grow refused")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param i32) (result i32)
    (if (i32.eq (memory.grow (local.get $in)) (i32.const -1))
      (then
        (call $error_write (i32.const 16) (i32.const 12))
        (return (i32.const 1))))
    (call $output_write (i32.const 0) (i32.const 4))
    (i32.const 0)))
