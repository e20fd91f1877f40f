;; Bad: unbounded recursion, exhausts the wasm stack.
(module
  (memory (export "memory") 1)
  (func $down (param $n i32) (result i32)
    (i32.add (call $down (i32.add (local.get $n) (i32.const 1))) (i32.const 1)))
  (func (export "pgflow_abi_version") (result i32) (i32.const 1))
  (func (export "pgflow_handle") (param i32 i32) (result i32)
    (call $down (i32.const 0))))
