;; slow: answers every task with exactly its text after counting to 2^26 first (some tens of
;; milliseconds), so a fault lands while tasks run (tests/it/nemesis.rs, the restart nemesis).
;;
;; World murmur:capsule/capsule@0.1.0, export `run: func(task: string) -> result<string, failure>`.
;; One core module holds the memory, a bump allocator (`cabi_realloc`, through which the host
;; copies the task in) and `run`, which points its answer at the task's own bytes.
(component
  (core module $m
    (memory (export "memory") 1)
    ;; Next free byte; 0..1024 is reserved (the return area lives at 16).
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
      (local.get $ptr))

    ;; run(task) -> result<string, failure>, returned through the area at 16:
    ;; byte 16 = 0 (ok), 20 = answer pointer, 24 = answer length.
    (func (export "run") (param $task i32) (param $len i32) (result i32)
      (local $n i32)
      (local.set $n (i32.const 0x4000000))
      (loop $count
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br_if $count (i32.ne (local.get $n) (i32.const 0))))
      (i32.store8 (i32.const 16) (i32.const 0))
      (i32.store (i32.const 20) (local.get $task))
      (i32.store (i32.const 24) (local.get $len))
      (i32.const 16)))

  (core instance $i (instantiate $m))
  (alias core export $i "memory" (core memory $memory))
  (alias core export $i "cabi_realloc" (core func $realloc))
  (alias core export $i "run" (core func $run-core))

  (type $failure-def (variant (case "error" string) (case "no-answer" string)))
  (export $failure "failure" (type $failure-def))
  (type $run-type (func (param "task" string) (result (result string (error $failure)))))
  (func $run (type $run-type) (canon lift (core func $run-core) (memory $memory) (realloc $realloc)))
  (export "run" (func $run)))
