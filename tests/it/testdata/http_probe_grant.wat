(component
  (type $ty-wasi:io/poll@0.2.12 (;0;)
    (instance
      (export (;0;) "pollable" (type (sub resource)))
      (type (;1;) (borrow 0))
      (type (;2;) (func (param "self" 1)))
      (export (;0;) "[method]pollable.block" (func (type 2)))
    )
  )
  (import "wasi:io/poll@0.2.12" (instance $wasi:io/poll@0.2.12 (;0;) (type $ty-wasi:io/poll@0.2.12)))
  (alias export $wasi:io/poll@0.2.12 "pollable" (type $pollable (;1;)))
  (type $ty-wasi:http/types@0.2.12 (;2;)
    (instance
      (export (;0;) "fields" (type (sub resource)))
      (type (;1;) string)
      (export (;2;) "field-key" (type (eq 1)))
      (export (;3;) "field-name" (type (eq 2)))
      (type (;4;) (list u8))
      (export (;5;) "field-value" (type (eq 4)))
      (type (;6;) (variant (case "invalid-syntax") (case "forbidden") (case "immutable")))
      (export (;7;) "header-error" (type (eq 6)))
      (export (;8;) "headers" (type (eq 0)))
      (export (;9;) "outgoing-request" (type (sub resource)))
      (type (;10;) (variant (case "HTTP") (case "HTTPS") (case "other" string)))
      (export (;11;) "scheme" (type (eq 10)))
      (export (;12;) "future-incoming-response" (type (sub resource)))
      (alias outer 1 $pollable (type (;13;)))
      (export (;14;) "pollable" (type (eq 13)))
      (export (;15;) "incoming-response" (type (sub resource)))
      (type (;16;) (option string))
      (type (;17;) (option u16))
      (type (;18;) (record (field "rcode" 16) (field "info-code" 17)))
      (export (;19;) "DNS-error-payload" (type (eq 18)))
      (type (;20;) (option u8))
      (type (;21;) (record (field "alert-id" 20) (field "alert-message" 16)))
      (export (;22;) "TLS-alert-received-payload" (type (eq 21)))
      (type (;23;) (option u32))
      (type (;24;) (record (field "field-name" 16) (field "field-size" 23)))
      (export (;25;) "field-size-payload" (type (eq 24)))
      (type (;26;) (option u64))
      (type (;27;) (option 25))
      (type (;28;) (variant (case "DNS-timeout") (case "DNS-error" 19) (case "destination-not-found") (case "destination-unavailable") (case "destination-IP-prohibited") (case "destination-IP-unroutable") (case "connection-refused") (case "connection-terminated") (case "connection-timeout") (case "connection-read-timeout") (case "connection-write-timeout") (case "connection-limit-reached") (case "TLS-protocol-error") (case "TLS-certificate-error") (case "TLS-alert-received" 22) (case "HTTP-request-denied") (case "HTTP-request-length-required") (case "HTTP-request-body-size" 26) (case "HTTP-request-method-invalid") (case "HTTP-request-URI-invalid") (case "HTTP-request-URI-too-long") (case "HTTP-request-header-section-size" 23) (case "HTTP-request-header-size" 27) (case "HTTP-request-trailer-section-size" 23) (case "HTTP-request-trailer-size" 25) (case "HTTP-response-incomplete") (case "HTTP-response-header-section-size" 23) (case "HTTP-response-header-size" 25) (case "HTTP-response-body-size" 26) (case "HTTP-response-trailer-section-size" 23) (case "HTTP-response-trailer-size" 25) (case "HTTP-response-transfer-coding" 16) (case "HTTP-response-content-coding" 16) (case "HTTP-response-timeout") (case "HTTP-upgrade-failed") (case "HTTP-protocol-error") (case "loop-detected") (case "configuration-error") (case "internal-error" 16)))
      (export (;29;) "error-code" (type (eq 28)))
      (type (;30;) u16)
      (export (;31;) "status-code" (type (eq 30)))
      (export (;32;) "request-options" (type (sub resource)))
      (type (;33;) (own 0))
      (type (;34;) (func (result 33)))
      (export (;0;) "[constructor]fields" (func (type 34)))
      (type (;35;) (borrow 0))
      (type (;36;) (result (error 7)))
      (type (;37;) (func (param "self" 35) (param "name" 3) (param "value" 5) (result 36)))
      (export (;1;) "[method]fields.append" (func (type 37)))
      (type (;38;) (own 8))
      (type (;39;) (own 9))
      (type (;40;) (func (param "headers" 38) (result 39)))
      (export (;2;) "[constructor]outgoing-request" (func (type 40)))
      (type (;41;) (borrow 9))
      (type (;42;) (result))
      (type (;43;) (func (param "self" 41) (param "path-with-query" 16) (result 42)))
      (export (;3;) "[method]outgoing-request.set-path-with-query" (func (type 43)))
      (type (;44;) (option 11))
      (type (;45;) (func (param "self" 41) (param "scheme" 44) (result 42)))
      (export (;4;) "[method]outgoing-request.set-scheme" (func (type 45)))
      (type (;46;) (func (param "self" 41) (param "authority" 16) (result 42)))
      (export (;5;) "[method]outgoing-request.set-authority" (func (type 46)))
      (type (;47;) (borrow 15))
      (type (;48;) (func (param "self" 47) (result 31)))
      (export (;6;) "[method]incoming-response.status" (func (type 48)))
      (type (;49;) (borrow 12))
      (type (;50;) (own 14))
      (type (;51;) (func (param "self" 49) (result 50)))
      (export (;7;) "[method]future-incoming-response.subscribe" (func (type 51)))
      (type (;52;) (own 15))
      (type (;53;) (result 52 (error 29)))
      (type (;54;) (result 53))
      (type (;55;) (option 54))
      (type (;56;) (func (param "self" 49) (result 55)))
      (export (;8;) "[method]future-incoming-response.get" (func (type 56)))
    )
  )
  (import "wasi:http/types@0.2.12" (instance $wasi:http/types@0.2.12 (;1;) (type $ty-wasi:http/types@0.2.12)))
  (alias export $wasi:http/types@0.2.12 "outgoing-request" (type $outgoing-request (;3;)))
  (alias export $wasi:http/types@0.2.12 "request-options" (type $request-options (;4;)))
  (alias export $wasi:http/types@0.2.12 "future-incoming-response" (type $future-incoming-response (;5;)))
  (alias export $wasi:http/types@0.2.12 "error-code" (type $error-code (;6;)))
  (type $ty-wasi:http/outgoing-handler@0.2.12 (;7;)
    (instance
      (alias outer 1 $outgoing-request (type (;0;)))
      (export (;1;) "outgoing-request" (type (eq 0)))
      (alias outer 1 $request-options (type (;2;)))
      (export (;3;) "request-options" (type (eq 2)))
      (alias outer 1 $future-incoming-response (type (;4;)))
      (export (;5;) "future-incoming-response" (type (eq 4)))
      (alias outer 1 $error-code (type (;6;)))
      (export (;7;) "error-code" (type (eq 6)))
      (type (;8;) (own 1))
      (type (;9;) (own 3))
      (type (;10;) (option 9))
      (type (;11;) (own 5))
      (type (;12;) (result 11 (error 7)))
      (type (;13;) (func (param "request" 8) (param "options" 10) (result 12)))
      (export (;0;) "handle" (func (type 13)))
    )
  )
  (import "wasi:http/outgoing-handler@0.2.12" (instance $wasi:http/outgoing-handler@0.2.12 (;2;) (type $ty-wasi:http/outgoing-handler@0.2.12)))
  (type (;8;) (variant (case "error" string) (case "no-answer" string)))
  (import "failure" (type $failure (;9;) (eq 8)))
  (core module $main (;0;)
    (type (;0;) (func (result i32)))
    (type (;1;) (func (param i32 i32 i32 i32 i32 i32)))
    (type (;2;) (func (param i32) (result i32)))
    (type (;3;) (func (param i32 i32 i32 i32 i32) (result i32)))
    (type (;4;) (func (param i32 i32 i32 i32) (result i32)))
    (type (;5;) (func (param i32 i32)))
    (type (;6;) (func (param i32)))
    (type (;7;) (func (param i32 i32 i32 i32)))
    (type (;8;) (func (param i32 i32 i32) (result i32)))
    (type (;9;) (func (param i32 i32) (result i32)))
    (import "wasi:http/types@0.2.12" "[constructor]fields" (func $fields-new (;0;) (type 0)))
    (import "wasi:http/types@0.2.12" "[method]fields.append" (func $fields-append (;1;) (type 1)))
    (import "wasi:http/types@0.2.12" "[constructor]outgoing-request" (func $request-new (;2;) (type 2)))
    (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-scheme" (func $set-scheme (;3;) (type 3)))
    (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-authority" (func $set-authority (;4;) (type 4)))
    (import "wasi:http/types@0.2.12" "[method]outgoing-request.set-path-with-query" (func $set-path (;5;) (type 4)))
    (import "wasi:http/types@0.2.12" "[method]future-incoming-response.subscribe" (func $subscribe (;6;) (type 2)))
    (import "wasi:http/types@0.2.12" "[method]future-incoming-response.get" (func $future-get (;7;) (type 5)))
    (import "wasi:http/types@0.2.12" "[method]incoming-response.status" (func $status (;8;) (type 2)))
    (import "wasi:io/poll@0.2.12" "[method]pollable.block" (func $block (;9;) (type 6)))
    (import "wasi:http/outgoing-handler@0.2.12" "handle" (func $handle (;10;) (type 7)))
    (memory (;0;) 1)
    (global $heap (;0;) (mut i32) i32.const 8192)
    (export "memory" (memory 0))
    (export "cabi_realloc" (func 11))
    (export "run" (func 13))
    (func (;11;) (type 4) (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
      (local $ptr i32) (local $end i32)
      global.get $heap
      local.get $align
      i32.const 1
      i32.sub
      i32.add
      i32.const 0
      local.get $align
      i32.sub
      i32.and
      local.set $ptr
      local.get $ptr
      local.get $size
      i32.add
      local.set $end
      local.get $end
      local.get $ptr
      i32.lt_u
      if ;; label = @1
        unreachable
      end
      local.get $end
      memory.size
      i32.const 16
      i32.shl
      i32.gt_u
      if ;; label = @1
        i32.const -1
        local.get $end
        i32.const 65535
        i32.add
        i32.const 16
        i32.shr_u
        memory.size
        i32.sub
        memory.grow
        i32.eq
        if ;; label = @2
          unreachable
        end
      end
      local.get $end
      global.set $heap
      local.get $old
      if ;; label = @1
        local.get $ptr
        local.get $old
        local.get $old_size
        local.get $size
        local.get $old_size
        local.get $size
        i32.lt_u
        select
        memory.copy
      end
      local.get $ptr
    )
    (func $answer (;12;) (type 8) (param $prefix i32) (param $plen i32) (param $n i32) (result i32)
      (local $len i32) (local $digits i32) (local $i i32)
      i32.const 3000
      local.get $prefix
      local.get $plen
      memory.copy
      i32.const 2920
      local.set $i
      loop $more
        local.get $i
        i32.const 1
        i32.sub
        local.set $i
        local.get $i
        i32.const 48
        local.get $n
        i32.const 10
        i32.rem_u
        i32.add
        i32.store8
        local.get $n
        i32.const 10
        i32.div_u
        local.set $n
        local.get $n
        br_if $more
      end
      i32.const 2920
      local.get $i
      i32.sub
      local.set $digits
      i32.const 3000
      local.get $plen
      i32.add
      local.get $i
      local.get $digits
      memory.copy
      local.get $plen
      local.get $digits
      i32.add
      local.set $len
      i32.const 256
      i32.const 0
      i32.store8
      i32.const 260
      i32.const 3000
      i32.store
      i32.const 264
      local.get $len
      i32.store
      i32.const 256
    )
    (func (;13;) (type 9) (param $task i32) (param $len i32) (result i32)
      (local $fields i32) (local $request i32) (local $future i32)
      call $fields-new
      local.set $fields
      local.get $fields
      i32.const 1024
      i32.const 13
      i32.const 1040
      i32.const 26
      i32.const 64
      call $fields-append
      local.get $fields
      i32.const 1072
      i32.const 19
      i32.const 1096
      i32.const 7
      i32.const 64
      call $fields-append
      local.get $fields
      i32.const 1104
      i32.const 20
      i32.const 1128
      i32.const 5
      i32.const 64
      call $fields-append
      local.get $fields
      i32.const 1136
      i32.const 7
      i32.const 1144
      i32.const 4
      i32.const 64
      call $fields-append
      local.get $fields
      i32.const 1200
      i32.const 14
      i32.const 1216
      i32.const 13
      i32.const 64
      call $fields-append
      local.get $fields
      call $request-new
      local.set $request
      local.get $request
      i32.const 1
      i32.const 0
      i32.const 0
      i32.const 0
      call $set-scheme
      drop
      local.get $request
      i32.const 1
      local.get $task
      local.get $len
      call $set-authority
      drop
      local.get $request
      i32.const 1
      i32.const 1152
      i32.const 10
      call $set-path
      drop
      local.get $request
      i32.const 0
      i32.const 0
      i32.const 64
      call $handle
      i32.const 64
      i32.load8_u
      if ;; label = @1
        i32.const 1176
        i32.const 6
        i32.const 72
        i32.load8_u
        call $answer
        return
      end
      i32.const 72
      i32.load
      local.set $future
      local.get $future
      call $subscribe
      call $block
      local.get $future
      i32.const 128
      call $future-get
      i32.const 128
      i32.load8_u
      i32.eqz
      if ;; label = @1
        unreachable
      end
      i32.const 136
      i32.load8_u
      if ;; label = @1
        unreachable
      end
      i32.const 144
      i32.load8_u
      if ;; label = @1
        i32.const 1176
        i32.const 6
        i32.const 152
        i32.load8_u
        call $answer
        return
      end
      i32.const 1168
      i32.const 7
      i32.const 152
      i32.load
      call $status
      call $answer
    )
    (data (;0;) (i32.const 1024) "authorization")
    (data (;1;) (i32.const 1040) "Bearer forged-by-component")
    (data (;2;) (i32.const 1072) "x-murmur-task-trust")
    (data (;3;) (i32.const 1096) "trusted")
    (data (;4;) (i32.const 1104) "x-murmur-task-origin")
    (data (;5;) (i32.const 1128) "event")
    (data (;6;) (i32.const 1136) "x-probe")
    (data (;7;) (i32.const 1144) "kept")
    (data (;8;) (i32.const 1152) "/probe?x=1")
    (data (;9;) (i32.const 1168) "status ")
    (data (;10;) (i32.const 1176) "error ")
    (data (;11;) (i32.const 1200) "x-murmur-grant")
    (data (;12;) (i32.const 1216) "mgr1.e30.AAAA")
    (@producers
      (processed-by "wit-component" "0.254.2")
    )
  )
  (core module $wit-component-shim-module (;1;)
    (type (;0;) (func (param i32 i32 i32 i32 i32 i32)))
    (type (;1;) (func (param i32 i32 i32 i32 i32) (result i32)))
    (type (;2;) (func (param i32 i32 i32 i32) (result i32)))
    (type (;3;) (func (param i32 i32)))
    (type (;4;) (func (param i32 i32 i32 i32)))
    (table (;0;) 6 6 funcref)
    (export "0" (func 0))
    (export "1" (func 1))
    (export "2" (func 2))
    (export "3" (func 3))
    (export "4" (func 4))
    (export "5" (func 5))
    (export "$imports" (table 0))
    (func (;0;) (type 0) (param i32 i32 i32 i32 i32 i32)
      local.get 0
      local.get 1
      local.get 2
      local.get 3
      local.get 4
      local.get 5
      i32.const 0
      call_indirect (type 0)
    )
    (func (;1;) (type 1) (param i32 i32 i32 i32 i32) (result i32)
      local.get 0
      local.get 1
      local.get 2
      local.get 3
      local.get 4
      i32.const 1
      call_indirect (type 1)
    )
    (func (;2;) (type 2) (param i32 i32 i32 i32) (result i32)
      local.get 0
      local.get 1
      local.get 2
      local.get 3
      i32.const 2
      call_indirect (type 2)
    )
    (func (;3;) (type 2) (param i32 i32 i32 i32) (result i32)
      local.get 0
      local.get 1
      local.get 2
      local.get 3
      i32.const 3
      call_indirect (type 2)
    )
    (func (;4;) (type 3) (param i32 i32)
      local.get 0
      local.get 1
      i32.const 4
      call_indirect (type 3)
    )
    (func (;5;) (type 4) (param i32 i32 i32 i32)
      local.get 0
      local.get 1
      local.get 2
      local.get 3
      i32.const 5
      call_indirect (type 4)
    )
    (@producers
      (processed-by "wit-component" "0.254.2")
    )
  )
  (core module $wit-component-fixup (;2;)
    (type (;0;) (func (param i32 i32 i32 i32 i32 i32)))
    (type (;1;) (func (param i32 i32 i32 i32 i32) (result i32)))
    (type (;2;) (func (param i32 i32 i32 i32) (result i32)))
    (type (;3;) (func (param i32 i32)))
    (type (;4;) (func (param i32 i32 i32 i32)))
    (import "" "0" (func (;0;) (type 0)))
    (import "" "1" (func (;1;) (type 1)))
    (import "" "2" (func (;2;) (type 2)))
    (import "" "3" (func (;3;) (type 2)))
    (import "" "4" (func (;4;) (type 3)))
    (import "" "5" (func (;5;) (type 4)))
    (import "" "$imports" (table (;0;) 6 6 funcref))
    (elem (;0;) (i32.const 0) func 0 1 2 3 4 5)
    (@producers
      (processed-by "wit-component" "0.254.2")
    )
  )
  (core instance $wit-component-shim-instance (;0;) (instantiate $wit-component-shim-module))
  (alias export $wasi:http/types@0.2.12 "[constructor]fields" (func $"[constructor]fields" (;0;)))
  (core func $"[constructor]fields" (;0;) (canon lower (func $"[constructor]fields")))
  (alias core export $wit-component-shim-instance "0" (core func $"indirect-wasi:http/types@0.2.12-[method]fields.append" (;1;)))
  (alias export $wasi:http/types@0.2.12 "[constructor]outgoing-request" (func $"[constructor]outgoing-request" (;1;)))
  (core func $"[constructor]outgoing-request" (;2;) (canon lower (func $"[constructor]outgoing-request")))
  (alias core export $wit-component-shim-instance "1" (core func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-scheme" (;3;)))
  (alias core export $wit-component-shim-instance "2" (core func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-authority" (;4;)))
  (alias core export $wit-component-shim-instance "3" (core func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-path-with-query" (;5;)))
  (alias export $wasi:http/types@0.2.12 "[method]future-incoming-response.subscribe" (func $"[method]future-incoming-response.subscribe" (;2;)))
  (core func $"[method]future-incoming-response.subscribe" (;6;) (canon lower (func $"[method]future-incoming-response.subscribe")))
  (alias core export $wit-component-shim-instance "4" (core func $"indirect-wasi:http/types@0.2.12-[method]future-incoming-response.get" (;7;)))
  (alias export $wasi:http/types@0.2.12 "[method]incoming-response.status" (func $"[method]incoming-response.status" (;3;)))
  (core func $"[method]incoming-response.status" (;8;) (canon lower (func $"[method]incoming-response.status")))
  (core instance $wasi:http/types@0.2.12 (;1;)
    (export "[constructor]fields" (func $"[constructor]fields"))
    (export "[method]fields.append" (func $"indirect-wasi:http/types@0.2.12-[method]fields.append"))
    (export "[constructor]outgoing-request" (func $"[constructor]outgoing-request"))
    (export "[method]outgoing-request.set-scheme" (func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-scheme"))
    (export "[method]outgoing-request.set-authority" (func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-authority"))
    (export "[method]outgoing-request.set-path-with-query" (func $"indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-path-with-query"))
    (export "[method]future-incoming-response.subscribe" (func $"[method]future-incoming-response.subscribe"))
    (export "[method]future-incoming-response.get" (func $"indirect-wasi:http/types@0.2.12-[method]future-incoming-response.get"))
    (export "[method]incoming-response.status" (func $"[method]incoming-response.status"))
  )
  (alias export $wasi:io/poll@0.2.12 "[method]pollable.block" (func $"[method]pollable.block" (;4;)))
  (core func $"[method]pollable.block" (;9;) (canon lower (func $"[method]pollable.block")))
  (core instance $wasi:io/poll@0.2.12 (;2;)
    (export "[method]pollable.block" (func $"[method]pollable.block"))
  )
  (alias core export $wit-component-shim-instance "5" (core func $indirect-wasi:http/outgoing-handler@0.2.12-handle (;10;)))
  (core instance $wasi:http/outgoing-handler@0.2.12 (;3;)
    (export "handle" (func $indirect-wasi:http/outgoing-handler@0.2.12-handle))
  )
  (core instance $main (;4;) (instantiate $main
      (with "wasi:http/types@0.2.12" (instance $wasi:http/types@0.2.12))
      (with "wasi:io/poll@0.2.12" (instance $wasi:io/poll@0.2.12))
      (with "wasi:http/outgoing-handler@0.2.12" (instance $wasi:http/outgoing-handler@0.2.12))
    )
  )
  (alias core export $main "memory" (core memory $memory (;0;)))
  (alias core export $wit-component-shim-instance "$imports" (core table $"shim table" (;0;)))
  (alias export $wasi:http/types@0.2.12 "[method]fields.append" (func $"[method]fields.append" (;5;)))
  (alias core export $main "cabi_realloc" (core func $realloc (;11;)))
  (core func $"#core-func12 indirect-wasi:http/types@0.2.12-[method]fields.append" (@name "indirect-wasi:http/types@0.2.12-[method]fields.append") (;12;) (canon lower (func $"[method]fields.append") (memory $memory) string-encoding=utf8))
  (alias export $wasi:http/types@0.2.12 "[method]outgoing-request.set-scheme" (func $"[method]outgoing-request.set-scheme" (;6;)))
  (core func $"#core-func13 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-scheme" (@name "indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-scheme") (;13;) (canon lower (func $"[method]outgoing-request.set-scheme") (memory $memory) string-encoding=utf8))
  (alias export $wasi:http/types@0.2.12 "[method]outgoing-request.set-authority" (func $"[method]outgoing-request.set-authority" (;7;)))
  (core func $"#core-func14 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-authority" (@name "indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-authority") (;14;) (canon lower (func $"[method]outgoing-request.set-authority") (memory $memory) string-encoding=utf8))
  (alias export $wasi:http/types@0.2.12 "[method]outgoing-request.set-path-with-query" (func $"[method]outgoing-request.set-path-with-query" (;8;)))
  (core func $"#core-func15 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-path-with-query" (@name "indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-path-with-query") (;15;) (canon lower (func $"[method]outgoing-request.set-path-with-query") (memory $memory) string-encoding=utf8))
  (alias export $wasi:http/types@0.2.12 "[method]future-incoming-response.get" (func $"[method]future-incoming-response.get" (;9;)))
  (core func $"#core-func16 indirect-wasi:http/types@0.2.12-[method]future-incoming-response.get" (@name "indirect-wasi:http/types@0.2.12-[method]future-incoming-response.get") (;16;) (canon lower (func $"[method]future-incoming-response.get") (memory $memory) (realloc $realloc) string-encoding=utf8))
  (alias export $wasi:http/outgoing-handler@0.2.12 "handle" (func $handle (;10;)))
  (core func $"#core-func17 indirect-wasi:http/outgoing-handler@0.2.12-handle" (@name "indirect-wasi:http/outgoing-handler@0.2.12-handle") (;17;) (canon lower (func $handle) (memory $memory) (realloc $realloc) string-encoding=utf8))
  (core instance $fixup-args (;5;)
    (export "$imports" (table $"shim table"))
    (export "0" (func $"#core-func12 indirect-wasi:http/types@0.2.12-[method]fields.append"))
    (export "1" (func $"#core-func13 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-scheme"))
    (export "2" (func $"#core-func14 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-authority"))
    (export "3" (func $"#core-func15 indirect-wasi:http/types@0.2.12-[method]outgoing-request.set-path-with-query"))
    (export "4" (func $"#core-func16 indirect-wasi:http/types@0.2.12-[method]future-incoming-response.get"))
    (export "5" (func $"#core-func17 indirect-wasi:http/outgoing-handler@0.2.12-handle"))
  )
  (core instance $fixup (;6;) (instantiate $wit-component-fixup
      (with "" (instance $fixup-args))
    )
  )
  (type (;10;) (result string (error $failure)))
  (type (;11;) (func (param "task" string) (result 10)))
  (alias core export $main "run" (core func $run (;18;)))
  (func $run (;11;) (type 11) (canon lift (core func $run) (memory $memory) (realloc $realloc) string-encoding=utf8))
  (export $"#func12 run" (@name "run") (;12;) "run" (func $run))
  (@producers
    (processed-by "wit-component" "0.254.2")
  )
)
