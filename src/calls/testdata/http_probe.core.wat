;; Test capsule (core module): sends one wasi:http request with forged credentials and answers
;; with what came of it. The task text is the authority to ask (e.g. `coder.formation.invalid`);
;; the request is `GET http://<task>/probe?x=1` with the headers
;;   authorization: Bearer forged-by-component
;;   x-murmur-task-trust: trusted
;;   x-murmur-task-origin: event
;;   x-probe: kept
;; The answer is `status <code>` for a response, or `error <n>` where n is the wasi:http
;; error-code case (15 = HTTP-request-denied).
;;
;; `http_probe.wat` is this module made a component for the world in `http_probe.wit` with
;; wit-component 0.254 (embed the world's metadata, `ComponentEncoder`, print with wasmprinter);
;; regenerate it when this file changes. Canonical-ABI layouts used below:
;; - handle → result<own<future-incoming-response>, error-code>: tag @0, payload @8.
;; - future.get → option<result<result<own<incoming-response>, error-code>>>: tags @0, @8, @16,
;;   payload @24.
;; - run → result<string, failure>: tag @0, string @4/@8 (ok) or failure tag @4, string @8/@12.
(module
  (import "wasi:http/types@0.2.12" "[constructor]fields" (func $fields-new (result i32)))
  (import "wasi:http/types@0.2.12" "[method]fields.append"
    (func $fields-append (param i32 i32 i32 i32 i32 i32)))
  (import "wasi:http/types@0.2.12" "[constructor]outgoing-request"
    (func $request-new (param i32) (result i32)))
  (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-scheme"
    (func $set-scheme (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-authority"
    (func $set-authority (param i32 i32 i32 i32) (result i32)))
  (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-path-with-query"
    (func $set-path (param i32 i32 i32 i32) (result i32)))
  (import "wasi:http/types@0.2.12" "[method]future-incoming-response.subscribe"
    (func $subscribe (param i32) (result i32)))
  (import "wasi:http/types@0.2.12" "[method]future-incoming-response.get"
    (func $future-get (param i32 i32)))
  (import "wasi:http/types@0.2.12" "[method]incoming-response.status"
    (func $status (param i32) (result i32)))
  (import "wasi:io/poll@0.2.12" "[method]pollable.block" (func $block (param i32)))
  (import "wasi:http/outgoing-handler@0.2.12" "handle" (func $handle (param i32 i32 i32 i32)))

  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 8192))

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
    (if (local.get $old)
      (then (memory.copy (local.get $ptr) (local.get $old)
              (select (local.get $old_size) (local.get $size) (i32.lt_u (local.get $old_size) (local.get $size))))))
    (local.get $ptr))

  (data (i32.const 1024) "authorization")
  (data (i32.const 1040) "Bearer forged-by-component")
  (data (i32.const 1072) "x-murmur-task-trust")
  (data (i32.const 1096) "trusted")
  (data (i32.const 1104) "x-murmur-task-origin")
  (data (i32.const 1128) "event")
  (data (i32.const 1136) "x-probe")
  (data (i32.const 1144) "kept")
  (data (i32.const 1152) "/probe?x=1")
  (data (i32.const 1168) "status ")
  (data (i32.const 1176) "error ")

  ;; ok(<prefix><n in decimal>) as the run result at 256; the text is built at 3000.
  (func $answer (param $prefix i32) (param $plen i32) (param $n i32) (result i32)
    (local $len i32) (local $digits i32) (local $i i32)
    (memory.copy (i32.const 3000) (local.get $prefix) (local.get $plen))
    ;; Digits backwards into 2900..2920, then forwards after the prefix.
    (local.set $i (i32.const 2920))
    (loop $more
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (i32.store8 (local.get $i) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $more (local.get $n)))
    (local.set $digits (i32.sub (i32.const 2920) (local.get $i)))
    (memory.copy (i32.add (i32.const 3000) (local.get $plen)) (local.get $i) (local.get $digits))
    (local.set $len (i32.add (local.get $plen) (local.get $digits)))
    (i32.store8 (i32.const 256) (i32.const 0))
    (i32.store (i32.const 260) (i32.const 3000))
    (i32.store (i32.const 264) (local.get $len))
    (i32.const 256))

  (func (export "run") (param $task i32) (param $len i32) (result i32)
    (local $fields i32) (local $request i32) (local $future i32)
    (local.set $fields (call $fields-new))
    (call $fields-append (local.get $fields) (i32.const 1024) (i32.const 13) (i32.const 1040) (i32.const 26) (i32.const 64))
    (call $fields-append (local.get $fields) (i32.const 1072) (i32.const 19) (i32.const 1096) (i32.const 7) (i32.const 64))
    (call $fields-append (local.get $fields) (i32.const 1104) (i32.const 20) (i32.const 1128) (i32.const 5) (i32.const 64))
    (call $fields-append (local.get $fields) (i32.const 1136) (i32.const 7) (i32.const 1144) (i32.const 4) (i32.const 64))
    (local.set $request (call $request-new (local.get $fields)))
    ;; some(HTTP), some(<task>), some("/probe?x=1")
    (drop (call $set-scheme (local.get $request) (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 0)))
    (drop (call $set-authority (local.get $request) (i32.const 1) (local.get $task) (local.get $len)))
    (drop (call $set-path (local.get $request) (i32.const 1) (i32.const 1152) (i32.const 10)))
    (call $handle (local.get $request) (i32.const 0) (i32.const 0) (i32.const 64))
    (if (i32.load8_u (i32.const 64))
      (then (return (call $answer (i32.const 1176) (i32.const 6) (i32.load8_u (i32.const 72))))))
    (local.set $future (i32.load (i32.const 72)))
    (call $block (call $subscribe (local.get $future)))
    (call $future-get (local.get $future) (i32.const 128))
    (if (i32.eqz (i32.load8_u (i32.const 128))) (then unreachable))
    (if (i32.load8_u (i32.const 136)) (then unreachable))
    (if (i32.load8_u (i32.const 144))
      (then (return (call $answer (i32.const 1176) (i32.const 6) (i32.load8_u (i32.const 152))))))
    (call $answer (i32.const 1168) (i32.const 7) (call $status (i32.load (i32.const 152))))))
