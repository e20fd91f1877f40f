;; Writes its input to stdout, then acts on the input's first letter after the opening
;; quote: "t..." traps (what a TinyGo panic does after printing to stdout), "e..." returns
;; status 1 without a message, anything else succeeds with the output true.
(module
  (import "pgflow" "input_read" (func $input_read (param i32)))
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "true")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (local $need i32)
    ;; pages needed for 1024 + input bytes
    (local.set $need (i32.add (i32.shr_u (i32.add (local.get $in) (i32.const 1024)) (i32.const 16)) (i32.const 1)))
    (if (i32.gt_u (local.get $need) (memory.size))
      (then (drop (memory.grow (i32.sub (local.get $need) (memory.size))))))
    (call $input_read (i32.const 1024))
    ;; one iovec at 0: the input, written to fd 1
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (local.get $in))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (if (i32.eq (i32.load8_u (i32.const 1025)) (i32.const 116)) (then unreachable)) ;; 't'
    (if (i32.eq (i32.load8_u (i32.const 1025)) (i32.const 101)) (then (return (i32.const 1)))) ;; 'e'
    (call $output_write (i32.const 16) (i32.const 4))
    (i32.const 0)))
