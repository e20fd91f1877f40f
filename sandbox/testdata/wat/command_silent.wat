;; Bad command: exits 0 without writing anything to stdout.
(module
  (memory (export "memory") 1)
  (func (export "_start")))
