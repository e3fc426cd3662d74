;; Test tool (world murmur:tool/tool): `words` counts the whitespace-separated words of its
;; input text. Inputs whose third and fourth bytes are `sp`, `gr`, `tr`, `fa` or `bi` (`{"spin…`,
;; `{"grow…`, `{"trap…`, `{"fail…`, `{"big…`) spin forever, allocate without bound, trap, return an
;; error, or return a 1 MiB result: the faults a tool host must survive.
(component $words
  (core module $mem-module
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 4096))
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
      (local.get $ptr)))
  (core instance $mem (instantiate $mem-module))
  (alias core export $mem "memory" (core memory $memory))
  (alias core export $mem "cabi_realloc" (core func $realloc))

  (core module $logic-module
    (import "mem" "memory" (memory 1))
    (data (i32.const 300) "words")
    (data (i32.const 320) "Counts the words of a text.")
    (data (i32.const 400) "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}")
    (data (i32.const 600) "asked to fail")

    ;; record descriptor at 16: name (300, 5), description, input-schema.
    (func (export "describe") (result i32)
      (i32.store (i32.const 16) (i32.const 300))
      (i32.store (i32.const 20) (i32.const 5))
      (i32.store (i32.const 24) (i32.const 320))
      (i32.store (i32.const 28) (i32.const 27))
      (i32.store (i32.const 32) (i32.const 400))
      (i32.store (i32.const 36) (i32.const 77))
      (i32.const 16))

    ;; result<string, string> at 48: byte 48 is-err, then (ptr, len) at 52.
    (func $answer (param $err i32) (param $ptr i32) (param $len i32) (result i32)
      (i32.store8 (i32.const 48) (local.get $err))
      (i32.store (i32.const 52) (local.get $ptr))
      (i32.store (i32.const 56) (local.get $len))
      (i32.const 48))

    (func (export "call") (param $in i32) (param $len i32) (result i32)
      (local $i i32) (local $words i32) (local $inword i32) (local $b i32) (local $tag i32) (local $p i32)
      (if (i32.ge_u (local.get $len) (i32.const 4))
        (then
          (local.set $tag (i32.load16_u (i32.add (local.get $in) (i32.const 2))))
          ;; "sp": spin
          (if (i32.eq (local.get $tag) (i32.const 0x7073)) (then (loop $forever (br $forever))))
          ;; "gr": grow until refused, then trap
          (if (i32.eq (local.get $tag) (i32.const 0x7267))
            (then (loop $more
              (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
              unreachable))
          ;; "tr": trap
          (if (i32.eq (local.get $tag) (i32.const 0x7274)) (then unreachable))
          ;; "fa": an error result
          (if (i32.eq (local.get $tag) (i32.const 0x6166))
            (then (return (call $answer (i32.const 1) (i32.const 600) (i32.const 13)))))
          ;; "bi": 1 MiB of NULs from offset 0
          (if (i32.eq (local.get $tag) (i32.const 0x6962))
            (then
              (if (i32.lt_u (memory.size) (i32.const 17))
                (then (drop (memory.grow (i32.sub (i32.const 17) (memory.size))))))
              (return (call $answer (i32.const 0) (i32.const 0x10000) (i32.const 0x100000)))))))
      (block $done
        (loop $next
          (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
          (local.set $b (i32.load8_u (i32.add (local.get $in) (local.get $i))))
          (if (i32.le_u (local.get $b) (i32.const 32))
            (then (local.set $inword (i32.const 0)))
            (else
              (if (i32.eqz (local.get $inword))
                (then (local.set $words (i32.add (local.get $words) (i32.const 1)))))
              (local.set $inword (i32.const 1))))
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br $next)))
      ;; Decimal digits, written backwards ending at 1024.
      (local.set $p (i32.const 1024))
      (loop $digit
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $words) (i32.const 10))))
        (local.set $words (i32.div_u (local.get $words) (i32.const 10)))
        (br_if $digit (local.get $words)))
      (call $answer (i32.const 0) (local.get $p) (i32.sub (i32.const 1024) (local.get $p)))))
  (core instance $logic (instantiate $logic-module (with "mem" (instance $mem))))
  (alias core export $logic "describe" (core func $describe-core))
  (alias core export $logic "call" (core func $call-core))
  (type $descriptor-def (record (field "name" string) (field "description" string) (field "input-schema" string)))
  (export $descriptor "descriptor" (type $descriptor-def))
  (type $describe-type (func (result $descriptor)))
  (func $describe (type $describe-type) (canon lift (core func $describe-core) (memory $memory) (realloc $realloc)))
  (export "describe" (func $describe))
  (type $call-type (func (param "input" string) (result (result string (error string)))))
  (func $call (type $call-type) (canon lift (core func $call-core) (memory $memory) (realloc $realloc)))
  (export "call" (func $call)))
