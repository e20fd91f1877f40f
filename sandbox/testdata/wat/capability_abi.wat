;; The capability imports at the edges of the ABI. The input's length picks the case:
;;   1 byte  (input 1):   config_get("TOKEN") with room for 3 bytes: it must return the whole
;;                        length (6 for "abcdef") and copy exactly 3; outputs "abc".
;;   2 bytes (input 12):  http_response_read with a part that does not exist.
;;   3 bytes (input 123): http_request with a URL that runs past the end of memory.
;;   4 bytes (input 1234): last_error and http_response_read before any call: both 0; outputs 0.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "config_get" (func $config_get (param i32 i32 i32 i32) (result i32)))
  (import "pgflow" "http_request" (func $http_request (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "pgflow" "http_response_read" (func $http_response_read (param i32 i32 i32) (result i32)))
  (import "pgflow" "last_error" (func $last_error (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "TOKEN")
  (data (i32.const 16) "GET")
  ;; The output of case 1 is the 5 bytes at 1023: a quote, 3 copied bytes, a quote.
  (data (i32.const 1023) "\22...\22")
  (data (i32.const 2000) "0")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (if (i32.eq (local.get $in) (i32.const 1))
      (then
        (if (i32.ne (call $config_get (i32.const 0) (i32.const 5) (i32.const 1024) (i32.const 3)) (i32.const 6))
          (then unreachable))
        (call $output_write (i32.const 1023) (i32.const 5))
        (return (i32.const 0))))
    (if (i32.eq (local.get $in) (i32.const 2))
      (then (drop (call $http_response_read (i32.const 7) (i32.const 0) (i32.const 0)))))
    (if (i32.eq (local.get $in) (i32.const 3))
      (then (drop (call $http_request (i32.const 16) (i32.const 3) (i32.const 65000) (i32.const 1000)
                                      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)))))
    (if (i32.eq (local.get $in) (i32.const 4))
      (then
        (if (i32.ne (call $last_error (i32.const 0) (i32.const 0)) (i32.const 0)) (then unreachable))
        (if (i32.ne (call $http_response_read (i32.const 1) (i32.const 0) (i32.const 0)) (i32.const 0)) (then unreachable))
        (call $output_write (i32.const 2000) (i32.const 1))
        (return (i32.const 0))))
    (i32.const 1)))
