;; Writes its function table: slot 0 holds $one in a new instance, and each call checks that
;; and then puts $two there. An instance whose table a call can change is never reset, so
;; every task must find $one. Answers 1 (JSON); a table left changed traps.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "1")
  (type $answer (func (result i32)))
  (table $t 1 funcref)
  (elem (i32.const 0) $one)
  (elem declare func $two)
  (func $one (result i32) (i32.const 1))
  (func $two (result i32) (i32.const 2))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (if (i32.ne (call_indirect (type $answer) (i32.const 0)) (i32.const 1)) (then unreachable))
    (table.set $t (i32.const 0) (ref.func $two))
    (call $output_write (i32.const 0) (i32.const 1))
    (i32.const 0)))
