;; http_start and http_wait at the edges of the ABI. The input is a JSON string, the URL of a
;; server that never answers. Any answer other than the one expected traps (unreachable).
;;   http_wait with no request running: bad_request (-7)
;;   http_start waiting 50 ms: pending (0)
;;   http_start and http_request while it runs: bad_request (-7)
;;   http_wait 50 ms more: pending (0)
;;   http_wait with cancel: canceled (-13); again: bad_request (-7), nothing runs
;;   http_start once more, waiting 500 ms (time to reach the server), left running when the
;;   handler returns: the host must stop it
;; Outputs true.
(module
  (import "pgflow" "input_read" (func $input_read (param i32)))
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "http_request" (func $http_request (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "pgflow" "http_start" (func $http_start (param i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "pgflow" "http_wait" (func $http_wait (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "GET")
  (data (i32.const 32) "true")
  (func $expect (param $got i32) (param $want i32)
    (if (i32.ne (local.get $got) (local.get $want)) (then unreachable)))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (local $url i32) (local $len i32)
    ;; The input "..." at 1024: the URL is what lies between the quotes.
    (call $input_read (i32.const 1024))
    (local.set $url (i32.const 1025))
    (local.set $len (i32.sub (local.get $in) (i32.const 2)))
    (call $expect (call $http_wait (i32.const 0) (i32.const 0)) (i32.const -7))
    (call $expect (call $http_start (i32.const 16) (i32.const 3) (local.get $url) (local.get $len)
                                    (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 50)) (i32.const 0))
    (call $expect (call $http_start (i32.const 16) (i32.const 3) (local.get $url) (local.get $len)
                                    (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)) (i32.const -7))
    (call $expect (call $http_request (i32.const 16) (i32.const 3) (local.get $url) (local.get $len)
                                      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)) (i32.const -7))
    (call $expect (call $http_wait (i32.const 50) (i32.const 0)) (i32.const 0))
    (call $expect (call $http_wait (i32.const 0) (i32.const 1)) (i32.const -13))
    (call $expect (call $http_wait (i32.const 0) (i32.const 1)) (i32.const -7))
    (call $expect (call $http_start (i32.const 16) (i32.const 3) (local.get $url) (local.get $len)
                                    (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 500)) (i32.const 0))
    (call $output_write (i32.const 32) (i32.const 4))
    (i32.const 0)))
