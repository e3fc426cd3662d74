;; Test component: writes its task to stdout (wasi:cli/stdout, wasi:io/streams) and answers
;; `ok`, or fails with `write failed` when the stream refuses the bytes.
(component $shout
  (import "wasi:io/error@0.2.0" (instance $io-error
    (export "error" (type (sub resource)))))
  (alias export $io-error "error" (type $error))
  (import "wasi:io/streams@0.2.0" (instance $streams
    (alias outer $shout $error (type $error-outer))
    (export "error" (type $error-t (eq $error-outer)))
    (export "output-stream" (type $output-stream-t (sub resource)))
    (type $stream-error-def (variant (case "last-operation-failed" (own $error-t)) (case "closed")))
    (export "stream-error" (type $stream-error-t (eq $stream-error-def)))
    (export "[method]output-stream.blocking-write-and-flush"
      (func (param "self" (borrow $output-stream-t)) (param "contents" (list u8))
            (result (result (error $stream-error-t)))))))
  (alias export $streams "output-stream" (type $output-stream))
  (import "wasi:cli/stdout@0.2.0" (instance $stdout
    (alias outer $shout $output-stream (type $output-stream-outer))
    (export "output-stream" (type $output-stream-t (eq $output-stream-outer)))
    (export "get-stdout" (func (result (own $output-stream-t))))))

  ;; Memory and allocator first, so the imports can be lowered against them.
  (core module $mem-module
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 1024))

    ;; Canonical-ABI allocator: bump `$heap`, growing memory when the block does not fit.
    (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
      (local $ptr i32) (local $end i32)
      (local.set $ptr
        (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                 (i32.sub (i32.const 0) (local.get $align))))
      (local.set $end (i32.add (local.get $ptr) (local.get $size)))
      (if (i32.lt_u (local.get $end) (local.get $ptr)) (then unreachable))
      (if (i32.gt_u (local.get $end) (i32.shl (memory.size) (i32.const 16)))
        (then
          (if (i32.eq (i32.const -1)
                      (memory.grow (i32.sub (i32.shr_u (i32.add (local.get $end) (i32.const 0xffff)) (i32.const 16))
                                            (memory.size))))
            (then unreachable))))
      (global.set $heap (local.get $end))
      ;; A real reallocation keeps the old bytes.
      (if (local.get $old)
        (then (memory.copy (local.get $ptr) (local.get $old)
                (select (local.get $old_size) (local.get $size) (i32.lt_u (local.get $old_size) (local.get $size))))))
      (local.get $ptr)))
  (core instance $mem (instantiate $mem-module))
  (alias core export $mem "memory" (core memory $memory))
  (alias core export $mem "cabi_realloc" (core func $realloc))


  (alias export $stdout "get-stdout" (func $get-stdout))
  (alias export $streams "[method]output-stream.blocking-write-and-flush" (func $write))
  (core func $get-stdout-core (canon lower (func $get-stdout)))
  (core func $write-core (canon lower (func $write) (memory $memory)))
  (core func $drop-stream-core (canon resource.drop $output-stream))
  (core instance $host
    (export "get-stdout" (func $get-stdout-core))
    (export "write" (func $write-core))
    (export "drop-stream" (func $drop-stream-core)))

  (core module $logic-module
    (import "mem" "memory" (memory 1))
    (import "host" "get-stdout" (func $get-stdout (result i32)))
    ;; (stream handle, bytes pointer, bytes length, result pointer)
    (import "host" "write" (func $write (param i32 i32 i32 i32)))
    (import "host" "drop-stream" (func $drop-stream (param i32)))
    (data (i32.const 100) "okwrite failed")

    (func (export "run") (param $task i32) (param $len i32) (result i32)
      (local $stream i32)
      (local.set $stream (call $get-stdout))
      ;; result<_, stream-error> at 16: byte 16 = is-err.
      (call $write (local.get $stream) (local.get $task) (local.get $len) (i32.const 16))
      (call $drop-stream (local.get $stream))
      (if (i32.load8_u (i32.const 16))
        (then
          ;; err(failure.error("write failed")) at 32.
          (i32.store8 (i32.const 32) (i32.const 1))
          (i32.store8 (i32.const 36) (i32.const 0))
          (i32.store (i32.const 40) (i32.const 102))
          (i32.store (i32.const 44) (i32.const 12))
          (return (i32.const 32))))
      ;; ok("ok") at 32.
      (i32.store8 (i32.const 32) (i32.const 0))
      (i32.store (i32.const 36) (i32.const 100))
      (i32.store (i32.const 40) (i32.const 2))
      (i32.const 32)))
  (core instance $logic (instantiate $logic-module
    (with "mem" (instance $mem))
    (with "host" (instance $host))))
  (alias core export $logic "run" (core func $run-core))
  (type $failure-def (variant (case "error" string) (case "no-answer" string)))
  (export $failure "failure" (type $failure-def))
  (type $run-type (func (param "task" string) (result (result string (error $failure)))))
  (func $run (type $run-type) (canon lift (core func $run-core) (memory $memory) (realloc $realloc)))
  (export "run" (func $run)))
