;; Test component: asks its caller the task text as its question (murmur:capsule/ask) and
;; answers with the answer, exactly as it came. A refusal (nothing was asked) becomes
;; failure.error carrying its text.
(component
  (import "murmur:capsule/ask@0.1.0" (instance $ask
    (export "request-input" (func (param "question" string) (result (result string (error string)))))))

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

  (alias export $ask "request-input" (func $request-input))
  (core func $request-input-core (canon lower (func $request-input) (memory $memory) (realloc $realloc)))
  (core instance $host
    (export "request-input" (func $request-input-core)))

  (core module $logic-module
    (import "mem" "memory" (memory 1))
    (import "host" "request-input" (func $request-input (param i32 i32 i32)))

    (func (export "run") (param $task i32) (param $len i32) (result i32)
      ;; result<string, string> at 16: byte 16 = is-err, 20 = pointer, 24 = length.
      (call $request-input (local.get $task) (local.get $len) (i32.const 16))
      (if (i32.load8_u (i32.const 16))
        (then
          ;; err(failure.error(message)) at 32: 32 = 1, 36 = 0, 40 = pointer, 44 = length.
          (i32.store8 (i32.const 32) (i32.const 1))
          (i32.store8 (i32.const 36) (i32.const 0))
          (i32.store (i32.const 40) (i32.load (i32.const 20)))
          (i32.store (i32.const 44) (i32.load (i32.const 24)))
          (return (i32.const 32))))
      ;; ok(answer) at 32: 32 = 0, 36 = pointer, 40 = length.
      (i32.store8 (i32.const 32) (i32.const 0))
      (i32.store (i32.const 36) (i32.load (i32.const 20)))
      (i32.store (i32.const 40) (i32.load (i32.const 24)))
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
