;; Good reactor: logs one line and returns its input as output, growing memory to fit it.
(module
  (import "pgflow" "input_read" (func $input_read (param i32)))
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "echo called")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (local $need i32)
    ;; pages needed for 1024 + input bytes
    (local.set $need (i32.add (i32.shr_u (i32.add (local.get $in) (i32.const 1024)) (i32.const 16)) (i32.const 1)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (drop (memory.grow (i32.sub (local.get $need) (memory.size))))))
    (call $log (i32.const 1) (i32.const 0) (i32.const 11))
    (call $input_read (i32.const 1024))
    (call $output_write (i32.const 1024) (local.get $in))
    (i32.const 0)))
