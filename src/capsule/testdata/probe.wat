;; Test component: answers with what the host tells it about itself, as
;; `formation=<id|-> member=<name|-> env=<K=V;…>`.
;; Imports murmur:capsule/identity and wasi:cli/environment.
(component
  (import "murmur:capsule/identity@0.1.0" (instance $identity
    (export "formation-id" (func (result (option string))))
    (export "member-name" (func (result (option string))))))
  (import "wasi:cli/environment@0.2.0" (instance $environment
    (export "get-environment" (func (result (list (tuple string string)))))))

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

  (alias export $identity "formation-id" (func $formation-id))
  (alias export $identity "member-name" (func $member-name))
  (alias export $environment "get-environment" (func $get-environment))
  (core func $formation-id-core (canon lower (func $formation-id) (memory $memory) (realloc $realloc)))
  (core func $member-name-core (canon lower (func $member-name) (memory $memory) (realloc $realloc)))
  (core func $get-environment-core (canon lower (func $get-environment) (memory $memory) (realloc $realloc)))
  (core instance $host
    (export "formation-id" (func $formation-id-core))
    (export "member-name" (func $member-name-core))
    (export "get-environment" (func $get-environment-core)))

  (core module $logic-module
    (import "mem" "memory" (memory 1))
    (import "mem" "cabi_realloc" (func $realloc (param i32 i32 i32 i32) (result i32)))
    ;; Each lowered import writes its result at the pointer it is given.
    (import "host" "formation-id" (func $formation-id (param i32)))
    (import "host" "member-name" (func $member-name (param i32)))
    (import "host" "get-environment" (func $get-environment (param i32)))

    (data (i32.const 100) "formation=")
    (data (i32.const 120) " member=")
    (data (i32.const 140) " env=")
    (data (i32.const 150) "-;=")

    ;; The answer is built in a 64 KiB buffer taken from the allocator.
    (global $out (mut i32) (i32.const 0))
    (global $out-len (mut i32) (i32.const 0))
    (func $append (param $ptr i32) (param $len i32)
      (memory.copy (i32.add (global.get $out) (global.get $out-len)) (local.get $ptr) (local.get $len))
      (global.set $out-len (i32.add (global.get $out-len) (local.get $len))))

    ;; option<string> at 16: byte 16 = is-some, 20 = pointer, 24 = length; "-" when none.
    (func $append-option
      (if (i32.load8_u (i32.const 16))
        (then (call $append (i32.load (i32.const 20)) (i32.load (i32.const 24))))
        (else (call $append (i32.const 150) (i32.const 1)))))

    (func (export "run") (param $task i32) (param $len i32) (result i32)
      (local $list i32) (local $count i32) (local $i i32) (local $entry i32)
      (global.set $out (call $realloc (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 65536)))
      (call $append (i32.const 100) (i32.const 10))
      (call $formation-id (i32.const 16))
      (call $append-option)
      (call $append (i32.const 120) (i32.const 8))
      (call $member-name (i32.const 16))
      (call $append-option)
      (call $append (i32.const 140) (i32.const 5))
      ;; list<tuple<string, string>> at 16: pointer, count; each entry is 16 bytes.
      (call $get-environment (i32.const 16))
      (local.set $list (i32.load (i32.const 16)))
      (local.set $count (i32.load (i32.const 20)))
      (block $done
        (loop $next
          (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
          (if (local.get $i) (then (call $append (i32.const 151) (i32.const 1))))
          (local.set $entry (i32.add (local.get $list) (i32.shl (local.get $i) (i32.const 4))))
          (call $append (i32.load (local.get $entry)) (i32.load offset=4 (local.get $entry)))
          (call $append (i32.const 152) (i32.const 1))
          (call $append (i32.load offset=8 (local.get $entry)) (i32.load offset=12 (local.get $entry)))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next)))
      ;; ok(answer) at 32.
      (i32.store8 (i32.const 32) (i32.const 0))
      (i32.store (i32.const 36) (global.get $out))
      (i32.store (i32.const 40) (global.get $out-len))
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
