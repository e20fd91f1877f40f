;; The SQL imports at the edges of the ABI. The input's length picks the case:
;;   1 byte  (input 1):   sql_query("{\"sql\":\"select 1\"}"), then sql_result_read with room
;;                        for 3 bytes: it must return the whole length and copy exactly 3;
;;                        outputs those 3 bytes in quotes ("{\"c").
;;   2 bytes (input 12):  sql_query with a request that runs past the end of memory.
;;   3 bytes (input 123): sql_result_read before any call: 0; outputs 0.
;;   4 bytes (input 1234): sql_result_read to a buffer past the end of memory.
(module
  (import "pgflow" "output_write" (func $output_write (param i32 i32)))
  (import "pgflow" "sql_query" (func $sql_query (param i32 i32) (result i32)))
  (import "pgflow" "sql_result_read" (func $sql_result_read (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{\22sql\22:\22select 1\22}")
  ;; The output of case 1 is the 5 bytes at 1023: a quote, 3 copied bytes, a quote; the
  ;; copied bytes are {"c, whose quote must be escaped: the output is the JSON string "{\"c"
  ;; built at 1100.
  (data (i32.const 1100) "\22{\5c\22c\22")
  (data (i32.const 2000) "0")
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param $in i32) (param $ctx i32) (result i32)
    (local $n i32)
    (if (i32.eq (local.get $in) (i32.const 1))
      (then
        (local.set $n (call $sql_query (i32.const 0) (i32.const 18)))
        (if (i32.le_s (local.get $n) (i32.const 3)) (then unreachable))
        (if (i32.ne (call $sql_result_read (i32.const 1024) (i32.const 3)) (local.get $n)) (then unreachable))
        ;; The three bytes copied are {"c: check them, then output the string.
        (if (i32.ne (i32.load8_u (i32.const 1024)) (i32.const 123)) (then unreachable))
        (if (i32.ne (i32.load8_u (i32.const 1025)) (i32.const 34)) (then unreachable))
        (if (i32.ne (i32.load8_u (i32.const 1026)) (i32.const 99)) (then unreachable))
        (if (i32.ne (i32.load8_u (i32.const 1027)) (i32.const 0)) (then unreachable))
        (call $output_write (i32.const 1100) (i32.const 6))
        (return (i32.const 0))))
    (if (i32.eq (local.get $in) (i32.const 2))
      (then (drop (call $sql_query (i32.const 65000) (i32.const 1000)))))
    (if (i32.eq (local.get $in) (i32.const 3))
      (then
        (if (i32.ne (call $sql_result_read (i32.const 0) (i32.const 0)) (i32.const 0)) (then unreachable))
        (call $output_write (i32.const 2000) (i32.const 1))
        (return (i32.const 0))))
    (if (i32.eq (local.get $in) (i32.const 4))
      (then
        (drop (call $sql_query (i32.const 0) (i32.const 18)))
        (drop (call $sql_result_read (i32.const 65530) (i32.const 100)))))
    (i32.const 1)))
