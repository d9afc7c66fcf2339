;; nic-limit: limits the number of NICs of a CAPVCD machine. Policy ABI v1, in WebAssembly text.
;;
;; A machine gets 1 + len(machine.extraOvdcNetworks) NICs: NIC 0 on the cluster's primary
;; network, then one per extra network. More than settings.maxNics (default 4) is denied with one
;; TooMany violation at spec.extraOvdcNetworks (spec.template.spec.extraOvdcNetworks for a
;; VCDMachineTemplate). The policy plans no NICs: it only validates.
;;
;; Settings: null, or an object whose only key is maxNics, an integer from 1 to 10 (null there
;; means the default). Anything else is refused by nicpolicy_validate_settings.
;;
;; The JSON input is scanned, not parsed into a tree. The scanner walks the members of one object
;; and skips each value whole (strings with their escapes, nested objects and arrays by bracket
;; depth, without recursion), so a key matches only as a direct member of the object searched:
;; never inside a label, an annotation or oldMachine. Every read is checked against the end of the
;; input, so malformed input gets an error envelope, never a trap. Member names are compared byte
;; for byte, which is exact because the host never escapes plain ASCII letters (docs/abi.md).
;;
;; Build: wasm-tools parse nic-limit.wat -o nic-limit.wasm   (see README.md)
(module
  ;; The one import ABI v1 allows: (level, ptr, len).
  (import "nicpolicy" "log" (func $log (param i32 i32 i32)))

  ;; One page to start; $reserve grows it for the input and the output.
  (memory (export "memory") 1)

  ;; Memory map
  ;;   0 .. 16       unused: 0 is never a valid address (nicpolicy_alloc's failure value)
  ;;   16 .. 48      scratch for formatting numbers
  ;;   1024 .. 5248  static strings, NUL-terminated, one per 128-byte slot
  ;;   8192 ..       heap: the input block, then a 1 KiB output block

  ;; Whole outputs.
  (data (i32.const 1024) "{\"allowed\":true}\00")                                   ;; $S_ALLOWED
  (data (i32.const 1152) "{\"valid\":true}\00")                                     ;; $S_VALID
  ;; Member names and literal tokens looked for in the input.
  (data (i32.const 1280) "machine\00")                                              ;; $K_MACHINE
  (data (i32.const 1408) "extraOvdcNetworks\00")                                    ;; $K_EXTRAS
  (data (i32.const 1536) "kind\00")                                                 ;; $K_KIND
  (data (i32.const 1664) "settings\00")                                             ;; $K_SETTINGS
  (data (i32.const 1792) "maxNics\00")                                              ;; $K_MAXNICS
  (data (i32.const 1920) "\"VCDMachineTemplate\"\00")                               ;; $T_TEMPLATE
  (data (i32.const 2048) "null\00")                                                 ;; $T_NULL
  ;; Pieces of the denial:
  ;;   {"allowed":false,"violations":[{"field":"<spec>.extraOvdcNetworks","reason":"TooMany",
  ;;    "message":"<n> NICs requested (the primary NIC and <m> in extraOvdcNetworks), but this
  ;;    site allows at most <max> (maxNics); remove <n-max> from extraOvdcNetworks"}]}
  (data (i32.const 2176) "{\"allowed\":false,\"violations\":[{\"field\":\"\00")       ;; $D_HEAD
  (data (i32.const 2304) "spec.template.spec\00")                                   ;; $D_SPEC_TEMPLATE
  (data (i32.const 2432) "spec\00")                                                 ;; $D_SPEC
  (data (i32.const 2560) ".extraOvdcNetworks\",\"reason\":\"TooMany\",\"message\":\"\00") ;; $D_REASON
  (data (i32.const 2688) " NICs requested (the primary NIC and \00")                ;; $D_REQUESTED
  (data (i32.const 2816) " in extraOvdcNetworks), but this site allows at most \00") ;; $D_ALLOWS
  (data (i32.const 2944) " (maxNics); remove \00")                                  ;; $D_REMOVE
  (data (i32.const 3072) " from extraOvdcNetworks\"}]}\00")                         ;; $D_TAIL
  ;; Pieces of a settings refusal: {"valid":false,"message":"<reason>"}
  (data (i32.const 3200) "{\"valid\":false,\"message\":\"\00")                      ;; $V_HEAD
  (data (i32.const 3328) "maxNics must be an integer from 1 to 10 (the primary NIC counts), got \00") ;; $V_RANGE
  (data (i32.const 3456) "unknown setting \00")                                     ;; $V_UNKNOWN
  (data (i32.const 3584) ": nic-limit takes only maxNics\00")                       ;; $V_ONLY
  (data (i32.const 3712) "settings must be a JSON object (nic-limit takes maxNics), got \00") ;; $V_OBJECT
  (data (i32.const 3840) "\"}\00")                                                  ;; $V_TAIL
  (data (i32.const 3968) "{\"valid\":false,\"message\":\"settings are not valid JSON\"}\00") ;; $V_NOT_JSON
  (data (i32.const 4096) "{\"valid\":false,\"message\":\"nic-limit: no memory left for the output\"}\00") ;; $V_MEMORY
  ;; Error envelopes: the policy could not decide.
  (data (i32.const 4224) "{\"error\":\"nic-limit: the request is not valid JSON\"}\00") ;; $E_NOT_JSON
  (data (i32.const 4352) "{\"error\":\"nic-limit: the request has no machine object\"}\00") ;; $E_NO_MACHINE
  (data (i32.const 4480) "{\"error\":\"nic-limit: machine.extraOvdcNetworks must be an array of strings\"}\00") ;; $E_EXTRAS
  (data (i32.const 4608) "{\"error\":\"nic-limit: settings.maxNics in the request is not an integer from 1 to 10\"}\00") ;; $E_SETTINGS
  (data (i32.const 4736) "{\"error\":\"nic-limit: no memory left for the output\"}\00") ;; $E_MEMORY
  ;; The log line: nic-limit: <n> NICs requested, maxNics <max>
  (data (i32.const 4864) "nic-limit: \00")                                          ;; $L_HEAD
  (data (i32.const 4992) " NICs requested, maxNics \00")                            ;; $L_MID
  (data (i32.const 5120) "...\00")                                                  ;; $ELLIPSIS

  ;; Addresses of the strings above (WAT has no named data offsets).
  (global $S_ALLOWED i32 (i32.const 1024))
  (global $S_VALID i32 (i32.const 1152))
  (global $K_MACHINE i32 (i32.const 1280))
  (global $K_EXTRAS i32 (i32.const 1408))
  (global $K_KIND i32 (i32.const 1536))
  (global $K_SETTINGS i32 (i32.const 1664))
  (global $K_MAXNICS i32 (i32.const 1792))
  (global $T_TEMPLATE i32 (i32.const 1920))
  (global $T_NULL i32 (i32.const 2048))
  (global $D_HEAD i32 (i32.const 2176))
  (global $D_SPEC_TEMPLATE i32 (i32.const 2304))
  (global $D_SPEC i32 (i32.const 2432))
  (global $D_REASON i32 (i32.const 2560))
  (global $D_REQUESTED i32 (i32.const 2688))
  (global $D_ALLOWS i32 (i32.const 2816))
  (global $D_REMOVE i32 (i32.const 2944))
  (global $D_TAIL i32 (i32.const 3072))
  (global $V_HEAD i32 (i32.const 3200))
  (global $V_RANGE i32 (i32.const 3328))
  (global $V_UNKNOWN i32 (i32.const 3456))
  (global $V_ONLY i32 (i32.const 3584))
  (global $V_OBJECT i32 (i32.const 3712))
  (global $V_TAIL i32 (i32.const 3840))
  (global $V_NOT_JSON i32 (i32.const 3968))
  (global $V_MEMORY i32 (i32.const 4096))
  (global $E_NOT_JSON i32 (i32.const 4224))
  (global $E_NO_MACHINE i32 (i32.const 4352))
  (global $E_EXTRAS i32 (i32.const 4480))
  (global $E_SETTINGS i32 (i32.const 4608))
  (global $E_MEMORY i32 (i32.const 4736))
  (global $L_HEAD i32 (i32.const 4864))
  (global $L_MID i32 (i32.const 4992))
  (global $ELLIPSIS i32 (i32.const 5120))

  ;; Scratch for number formatting.
  (global $SCRATCH i32 (i32.const 16))
  ;; Room for any output: the longest (a settings refusal quoting 48 escaped input bytes) is
  ;; under 500 bytes.
  (global $OUTPUT_SIZE i32 (i32.const 1024))
  ;; Most input bytes quoted in a refusal; longer values are cut and end in "...".
  (global $QUOTE_MAX i32 (i32.const 48))
  ;; maxNics when the settings do not give one.
  (global $DEFAULT_MAX_NICS i32 (i32.const 4))

  ;; Results of the scanner besides positions.
  (global $NOT_FOUND i32 (i32.const -1))
  (global $MALFORMED i32 (i32.const -2))

  ;; Bump pointer: everything from 8192 up is free. A fresh instance per call, so never reset.
  (global $heap (mut i32) (i32.const 8192))
  ;; One past the last input byte: the scanner never reads at or beyond it.
  (global $end (mut i32) (i32.const 0))
  ;; Next byte of the output being built.
  (global $out (mut i32) (i32.const 0))

  ;; ---------------------------------------------------------------------------------------
  ;; Memory and results

  ;; (ptr << 32) | len
  (func $pack (param $ptr i32) (param $len i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))

  ;; Length of the NUL-terminated string at $s.
  (func $strlen (param $s i32) (result i32)
    (local $p i32)
    (local.set $p (local.get $s))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (i32.load8_u (local.get $p))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (i32.sub (local.get $p) (local.get $s)))

  ;; Packed result of a static string, used as the whole output.
  (func $static (param $s i32) (result i64)
    (call $pack (local.get $s) (call $strlen (local.get $s))))

  ;; Reserves $len bytes on the heap, growing the memory when needed; 0 when it cannot grow.
  (func $reserve (param $len i32) (result i32)
    (local $ptr i32)
    (local $stop i64)
    (local.set $ptr (global.get $heap))
    ;; In 64 bits, so a huge $len cannot wrap around.
    (local.set $stop
      (i64.add (i64.extend_i32_u (local.get $ptr)) (i64.extend_i32_u (local.get $len))))
    (if (i64.gt_u (local.get $stop)
                  (i64.shl (i64.extend_i32_u (memory.size)) (i64.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.sub
                  (i32.wrap_i64
                    (i64.shr_u (i64.add (local.get $stop) (i64.const 65535)) (i64.const 16)))
                  (memory.size)))
              (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (i32.wrap_i64 (local.get $stop)))
    (local.get $ptr))

  ;; ---------------------------------------------------------------------------------------
  ;; Scanning the input. Positions are addresses in [input, $end]; -1 is "not found" and -2
  ;; "malformed", which no position can be.

  ;; The byte at $p, or -1 at or past the end of the input.
  (func $peek (param $p i32) (result i32)
    (if (result i32) (i32.lt_u (local.get $p) (global.get $end))
      (then (i32.load8_u (local.get $p)))
      (else (i32.const -1))))

  (func $is_ws (param $c i32) (result i32)
    (i32.or
      (i32.or (i32.eq (local.get $c) (i32.const 0x20)) (i32.eq (local.get $c) (i32.const 0x09)))
      (i32.or (i32.eq (local.get $c) (i32.const 0x0a)) (i32.eq (local.get $c) (i32.const 0x0d)))))

  ;; First position at or after $p that is not JSON white space.
  (func $skip_ws (param $p i32) (result i32)
    (block $done
      (loop $next
        (br_if $done (i32.eqz (call $is_ws (call $peek (local.get $p)))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (local.get $p))

  ;; $p at an opening quote: the position after the closing quote, or -2.
  (func $skip_string (param $p i32) (result i32)
    (local $c i32)
    (if (i32.ne (call $peek (local.get $p)) (i32.const 0x22)) ;; "
      (then (return (global.get $MALFORMED))))
    (local.set $p (i32.add (local.get $p) (i32.const 1)))
    (loop $next
      (local.set $c (call $peek (local.get $p)))
      (if (i32.eq (local.get $c) (i32.const -1))
        (then (return (global.get $MALFORMED))))
      (if (i32.eq (local.get $c) (i32.const 0x22)) ;; "
        (then (return (i32.add (local.get $p) (i32.const 1)))))
      ;; A backslash escapes the next byte, so \" and \\ never end the string. The hex digits of
      ;; \uXXXX are plain bytes and need no care.
      (local.set $p
        (i32.add (local.get $p)
          (select (i32.const 2) (i32.const 1) (i32.eq (local.get $c) (i32.const 0x5c))))) ;; \
      (br $next))
    (unreachable))

  ;; $p at a value: the position just after it, or -2.
  (func $skip_value (param $p i32) (result i32)
    (local $c i32)
    (local $depth i32)
    (local.set $c (call $peek (local.get $p)))
    (if (i32.eq (local.get $c) (i32.const 0x22)) ;; "
      (then (return (call $skip_string (local.get $p)))))
    (if (i32.or (i32.eq (local.get $c) (i32.const 0x7b))   ;; {
                (i32.eq (local.get $c) (i32.const 0x5b)))  ;; [
      (then
        ;; A container: walk to the bracket that closes it, counting depth instead of recursing
        ;; (a deeply nested input cannot exhaust the stack). Strings are skipped whole, so
        ;; brackets inside them do not count.
        (loop $next
          (local.set $c (call $peek (local.get $p)))
          (if (i32.eq (local.get $c) (i32.const -1))
            (then (return (global.get $MALFORMED))))
          (if (i32.eq (local.get $c) (i32.const 0x22)) ;; "
            (then
              (local.set $p (call $skip_string (local.get $p)))
              (if (i32.eq (local.get $p) (global.get $MALFORMED))
                (then (return (global.get $MALFORMED))))
              (br $next)))
          (if (i32.or (i32.eq (local.get $c) (i32.const 0x7b)) (i32.eq (local.get $c) (i32.const 0x5b)))
            (then (local.set $depth (i32.add (local.get $depth) (i32.const 1)))))
          (if (i32.or (i32.eq (local.get $c) (i32.const 0x7d)) (i32.eq (local.get $c) (i32.const 0x5d)))
            (then (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))))
          (local.set $p (i32.add (local.get $p) (i32.const 1)))
          (br_if $next (i32.ne (local.get $depth) (i32.const 0))))
        (return (local.get $p))))
    ;; A scalar (number, true, false, null) runs up to the next delimiter.
    (if (i32.eqz
          (i32.or
            (i32.or (i32.eq (local.get $c) (i32.const 0x2d))                      ;; -
                    (i32.lt_u (i32.sub (local.get $c) (i32.const 0x30)) (i32.const 10))) ;; 0-9
            (i32.or (i32.eq (local.get $c) (i32.const 0x74))                      ;; t
                    (i32.or (i32.eq (local.get $c) (i32.const 0x66))              ;; f
                            (i32.eq (local.get $c) (i32.const 0x6e))))))          ;; n
      (then (return (global.get $MALFORMED))))
    (block $done
      (loop $next
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (local.set $c (call $peek (local.get $p)))
        (br_if $done (i32.eq (local.get $c) (i32.const -1)))
        (br_if $done (call $is_ws (local.get $c)))
        (br_if $done (i32.eq (local.get $c) (i32.const 0x2c)))  ;; ,
        (br_if $done (i32.eq (local.get $c) (i32.const 0x7d)))  ;; }
        (br_if $done (i32.eq (local.get $c) (i32.const 0x5d)))  ;; ]
        (br $next)))
    (local.get $p))

  ;; Whether the $len bytes at $a and $b are equal.
  (func $memeq (param $a i32) (param $b i32) (param $len i32) (result i32)
    (block $differ
      (loop $next
        (if (i32.eqz (local.get $len)) (then (return (i32.const 1))))
        (br_if $differ
          (i32.ne (i32.load8_u (local.get $a)) (i32.load8_u (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 1)))
        (local.set $b (i32.add (local.get $b) (i32.const 1)))
        (local.set $len (i32.sub (local.get $len) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; Whether the input bytes [$start, $stop) are exactly the static string $s.
  (func $bytes_are (param $start i32) (param $stop i32) (param $s i32) (result i32)
    (local $len i32)
    (local.set $len (call $strlen (local.get $s)))
    (if (result i32) (i32.eq (i32.sub (local.get $stop) (local.get $start)) (local.get $len))
      (then (call $memeq (local.get $start) (local.get $s) (local.get $len)))
      (else (i32.const 0))))

  ;; $obj at an object: the position of the value of its direct member named $key (a static
  ;; string), -1 when it has none, -2 when the object is malformed.
  (func $find_key (param $obj i32) (param $key i32) (result i32)
    (local $p i32)
    (local $name i32)
    (local $c i32)
    (local.set $p (call $skip_ws (local.get $obj)))
    (if (i32.ne (call $peek (local.get $p)) (i32.const 0x7b)) ;; {
      (then (return (global.get $MALFORMED))))
    (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
    (if (i32.eq (call $peek (local.get $p)) (i32.const 0x7d)) ;; } (an empty object)
      (then (return (global.get $NOT_FOUND))))
    (loop $member
      ;; "name"
      (local.set $name (local.get $p))
      (local.set $p (call $skip_string (local.get $p)))
      (if (i32.eq (local.get $p) (global.get $MALFORMED))
        (then (return (global.get $MALFORMED))))
      ;; :
      (local.set $c (local.get $p))
      (local.set $p (call $skip_ws (local.get $p)))
      (if (i32.ne (call $peek (local.get $p)) (i32.const 0x3a)) ;; :
        (then (return (global.get $MALFORMED))))
      (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
      ;; The name without its quotes, [$name + 1, $c - 1), against the key.
      (if (call $bytes_are
            (i32.add (local.get $name) (i32.const 1))
            (i32.sub (local.get $c) (i32.const 1))
            (local.get $key))
        (then (return (local.get $p))))
      ;; Not this one: skip the value, then a comma and the next member, or the end.
      (local.set $p (call $skip_value (local.get $p)))
      (if (i32.eq (local.get $p) (global.get $MALFORMED))
        (then (return (global.get $MALFORMED))))
      (local.set $p (call $skip_ws (local.get $p)))
      (local.set $c (call $peek (local.get $p)))
      (if (i32.eq (local.get $c) (i32.const 0x2c)) ;; ,
        (then
          (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
          (br $member)))
      (if (i32.eq (local.get $c) (i32.const 0x7d)) ;; }
        (then (return (global.get $NOT_FOUND)))))
    (global.get $MALFORMED))

  ;; The value at [$start, $stop) as maxNics: 1..10, the default for null, -1 for anything else
  ;; (a fraction, an exponent, a string, a negative or out-of-range number, ...).
  (func $parse_max (param $start i32) (param $stop i32) (result i32)
    (local $p i32)
    (local $c i32)
    (local $value i32)
    (if (call $bytes_are (local.get $start) (local.get $stop) (global.get $T_NULL))
      (then (return (global.get $DEFAULT_MAX_NICS))))
    (local.set $p (local.get $start))
    ;; A minus sign: the number is out of range, but its digits are still checked below.
    (if (i32.eq (call $peek (local.get $p)) (i32.const 0x2d)) ;; -
      (then (local.set $p (i32.add (local.get $p) (i32.const 1)))))
    (if (i32.ge_u (local.get $p) (local.get $stop))
      (then (return (i32.const -1))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $stop)))
        (local.set $c (i32.sub (i32.load8_u (local.get $p)) (i32.const 0x30)))
        (if (i32.ge_u (local.get $c) (i32.const 10))
          (then (return (i32.const -1))))
        ;; Saturate: anything past 1000 is out of range anyway, and i32 must not overflow.
        (if (i32.lt_u (local.get $value) (i32.const 1000))
          (then
            (local.set $value
              (i32.add (i32.mul (local.get $value) (i32.const 10)) (local.get $c)))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (if (i32.eq (i32.load8_u (local.get $start)) (i32.const 0x2d))
      (then (return (i32.const -1))))
    (if (i32.or (i32.lt_u (local.get $value) (i32.const 1))
                (i32.gt_u (local.get $value) (i32.const 10)))
      (then (return (i32.const -1))))
    (local.get $value))

  ;; maxNics from the request's settings member: 1..10, -1 when invalid, -2 when malformed.
  (func $settings_max (param $root i32) (result i32)
    (local $settings i32)
    (local $value i32)
    (local $stop i32)
    (local.set $settings (call $find_key (local.get $root) (global.get $K_SETTINGS)))
    (if (i32.eq (local.get $settings) (global.get $MALFORMED))
      (then (return (global.get $MALFORMED))))
    ;; The host leaves settings out when they are null.
    (if (i32.eq (local.get $settings) (global.get $NOT_FOUND))
      (then (return (global.get $DEFAULT_MAX_NICS))))
    (local.set $stop (call $skip_value (local.get $settings)))
    (if (i32.eq (local.get $stop) (global.get $MALFORMED))
      (then (return (global.get $MALFORMED))))
    (if (call $bytes_are (local.get $settings) (local.get $stop) (global.get $T_NULL))
      (then (return (global.get $DEFAULT_MAX_NICS))))
    (if (i32.ne (call $peek (local.get $settings)) (i32.const 0x7b)) ;; {
      (then (return (i32.const -1))))
    (local.set $value (call $find_key (local.get $settings) (global.get $K_MAXNICS)))
    (if (i32.eq (local.get $value) (global.get $MALFORMED))
      (then (return (global.get $MALFORMED))))
    (if (i32.eq (local.get $value) (global.get $NOT_FOUND))
      (then (return (global.get $DEFAULT_MAX_NICS))))
    (local.set $stop (call $skip_value (local.get $value)))
    (if (i32.eq (local.get $stop) (global.get $MALFORMED))
      (then (return (global.get $MALFORMED))))
    (call $parse_max (local.get $value) (local.get $stop)))

  ;; ---------------------------------------------------------------------------------------
  ;; Building the output at $out

  (func $emit_byte (param $b i32)
    (i32.store8 (global.get $out) (local.get $b))
    (global.set $out (i32.add (global.get $out) (i32.const 1))))

  ;; Appends the static string $s.
  (func $emit (param $s i32)
    (local $len i32)
    (local.set $len (call $strlen (local.get $s)))
    (memory.copy (global.get $out) (local.get $s) (local.get $len))
    (global.set $out (i32.add (global.get $out) (local.get $len))))

  ;; Appends $n in decimal.
  (func $emit_u32 (param $n i32)
    (local $i i32)
    ;; Digits go to the scratch area last first, then are copied out in order.
    (loop $digit
      (i32.store8 (i32.add (global.get $SCRATCH) (local.get $i))
        (i32.add (i32.const 0x30) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $digit (i32.ne (local.get $n) (i32.const 0))))
    (loop $copy
      (local.set $i (i32.sub (local.get $i) (i32.const 1)))
      (call $emit_byte (i32.load8_u (i32.add (global.get $SCRATCH) (local.get $i))))
      (br_if $copy (i32.ne (local.get $i) (i32.const 0)))))

  (func $hex_digit (param $d i32) (result i32)
    (select
      (i32.add (i32.const 0x30) (local.get $d))              ;; 0-9
      (i32.add (i32.const 0x57) (local.get $d))              ;; a-f
      (i32.lt_u (local.get $d) (i32.const 10))))

  ;; Appends input bytes [$start, $stop) inside a JSON string: " and \ are escaped, control
  ;; characters become \u00XX. At most $QUOTE_MAX bytes are quoted, cut before a UTF-8
  ;; continuation byte so the output stays valid UTF-8, and a cut value ends in "...".
  (func $emit_quoted (param $start i32) (param $stop i32)
    (local $cut i32)
    (local $c i32)
    (local.set $cut (local.get $stop))
    (if (i32.gt_u (i32.sub (local.get $stop) (local.get $start)) (global.get $QUOTE_MAX))
      (then
        (local.set $cut (i32.add (local.get $start) (global.get $QUOTE_MAX)))
        (block $boundary
          (loop $back
            (br_if $boundary (i32.le_u (local.get $cut) (local.get $start)))
            ;; 10xxxxxx continues the character before it: cut earlier.
            (br_if $boundary
              (i32.ne (i32.and (i32.load8_u (local.get $cut)) (i32.const 0xc0)) (i32.const 0x80)))
            (local.set $cut (i32.sub (local.get $cut) (i32.const 1)))
            (br $back)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $start) (local.get $cut)))
        (local.set $c (i32.load8_u (local.get $start)))
        (if (i32.or (i32.eq (local.get $c) (i32.const 0x22)) (i32.eq (local.get $c) (i32.const 0x5c)))
          (then
            (call $emit_byte (i32.const 0x5c))
            (call $emit_byte (local.get $c)))
          (else
            (if (i32.lt_u (local.get $c) (i32.const 0x20))
              (then
                (call $emit_byte (i32.const 0x5c))  ;; \
                (call $emit_byte (i32.const 0x75))  ;; u
                (call $emit_byte (i32.const 0x30))  ;; 0
                (call $emit_byte (i32.const 0x30))  ;; 0
                (call $emit_byte (call $hex_digit (i32.shr_u (local.get $c) (i32.const 4))))
                (call $emit_byte (call $hex_digit (i32.and (local.get $c) (i32.const 15)))))
              (else (call $emit_byte (local.get $c))))))
        (local.set $start (i32.add (local.get $start) (i32.const 1)))
        (br $next)))
    (if (i32.lt_u (local.get $cut) (local.get $stop))
      (then (call $emit (global.get $ELLIPSIS)))))

  ;; Packed result of the output built from $start up to $out.
  (func $finish (param $start i32) (result i64)
    (call $pack (local.get $start) (i32.sub (global.get $out) (local.get $start))))

  ;; {"valid":false,"message":"<$text><input [$start, $stop) quoted><$after>"}, $after optional (0).
  (func $refuse (param $output i32) (param $text i32) (param $start i32) (param $stop i32)
                (param $after i32) (result i64)
    (global.set $out (local.get $output))
    (call $emit (global.get $V_HEAD))
    (call $emit (local.get $text))
    (call $emit_quoted (local.get $start) (local.get $stop))
    (if (local.get $after) (then (call $emit (local.get $after))))
    (call $emit (global.get $V_TAIL))
    (call $finish (local.get $output)))

  ;; ---------------------------------------------------------------------------------------
  ;; ABI v1 exports

  (func (export "nicpolicy_abi_version") (result i32)
    (i32.const 1))

  ;; Reserves $len bytes for the input; 0 when the memory cannot grow (the host reports it).
  (func (export "nicpolicy_alloc") (param $len i32) (result i32)
    (call $reserve (local.get $len)))

  (func (export "nicpolicy_evaluate") (param $ptr i32) (param $len i32) (result i64)
    (local $output i32)
    (local $root i32)
    (local $machine i32)
    (local $extras i32)
    (local $p i32)
    (local $c i32)
    (local $count i32)
    (local $kind i32)
    (local $template i32)
    (local $max i32)
    (local $nics i32)
    (global.set $end (i32.add (local.get $ptr) (local.get $len)))
    ;; The output block comes first, so every path below can write to it.
    (local.set $output (call $reserve (global.get $OUTPUT_SIZE)))
    (if (i32.eqz (local.get $output))
      (then (return (call $static (global.get $E_MEMORY)))))

    (local.set $root (call $skip_ws (local.get $ptr)))
    (if (i32.ne (call $peek (local.get $root)) (i32.const 0x7b)) ;; {
      (then (return (call $static (global.get $E_NOT_JSON)))))

    ;; request.machine
    (local.set $machine (call $find_key (local.get $root) (global.get $K_MACHINE)))
    (if (i32.eq (local.get $machine) (global.get $MALFORMED))
      (then (return (call $static (global.get $E_NOT_JSON)))))
    (if (i32.eq (local.get $machine) (global.get $NOT_FOUND))
      (then (return (call $static (global.get $E_NO_MACHINE)))))
    (if (i32.ne (call $peek (local.get $machine)) (i32.const 0x7b)) ;; {
      (then (return (call $static (global.get $E_NO_MACHINE)))))

    ;; request.machine.extraOvdcNetworks: count its strings. The host always sends the member;
    ;; an absent one counts as no extra network.
    (local.set $extras (call $find_key (local.get $machine) (global.get $K_EXTRAS)))
    (if (i32.eq (local.get $extras) (global.get $MALFORMED))
      (then (return (call $static (global.get $E_NOT_JSON)))))
    (if (i32.ne (local.get $extras) (global.get $NOT_FOUND))
      (then
        (if (i32.ne (call $peek (local.get $extras)) (i32.const 0x5b)) ;; [
          (then (return (call $static (global.get $E_EXTRAS)))))
        (local.set $p (call $skip_ws (i32.add (local.get $extras) (i32.const 1))))
        (if (i32.ne (call $peek (local.get $p)) (i32.const 0x5d)) ;; ] (an empty list)
          (then
            (loop $element
              (if (i32.ne (call $peek (local.get $p)) (i32.const 0x22)) ;; "
                (then (return (call $static (global.get $E_EXTRAS)))))
              (local.set $p (call $skip_string (local.get $p)))
              (if (i32.eq (local.get $p) (global.get $MALFORMED))
                (then (return (call $static (global.get $E_NOT_JSON)))))
              (local.set $count (i32.add (local.get $count) (i32.const 1)))
              (local.set $p (call $skip_ws (local.get $p)))
              (local.set $c (call $peek (local.get $p)))
              (if (i32.eq (local.get $c) (i32.const 0x2c)) ;; ,
                (then
                  (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
                  (br $element)))
              (if (i32.ne (local.get $c) (i32.const 0x5d)) ;; ]
                (then (return (call $static (global.get $E_NOT_JSON))))))))))

    ;; request.kind decides the field path.
    (local.set $kind (call $find_key (local.get $root) (global.get $K_KIND)))
    (if (i32.eq (local.get $kind) (global.get $MALFORMED))
      (then (return (call $static (global.get $E_NOT_JSON)))))
    (if (i32.ne (local.get $kind) (global.get $NOT_FOUND))
      (then
        (local.set $template
          (call $bytes_are (local.get $kind) (call $skip_value (local.get $kind))
                (global.get $T_TEMPLATE)))))

    ;; request.settings.maxNics
    (local.set $max (call $settings_max (local.get $root)))
    (if (i32.eq (local.get $max) (global.get $MALFORMED))
      (then (return (call $static (global.get $E_NOT_JSON)))))
    (if (i32.lt_s (local.get $max) (i32.const 0))
      (then (return (call $static (global.get $E_SETTINGS)))))

    (local.set $nics (i32.add (local.get $count) (i32.const 1)))
    ;; One log line per evaluation (nicpolicy eval -v shows it), built in the output block,
    ;; which the decision then overwrites.
    (global.set $out (local.get $output))
    (call $emit (global.get $L_HEAD))
    (call $emit_u32 (local.get $nics))
    (call $emit (global.get $L_MID))
    (call $emit_u32 (local.get $max))
    (call $log (i32.const 1) (local.get $output) (i32.sub (global.get $out) (local.get $output)))

    (if (i32.le_u (local.get $nics) (local.get $max))
      (then (return (call $static (global.get $S_ALLOWED)))))

    (global.set $out (local.get $output))
    (call $emit (global.get $D_HEAD))
    (call $emit (select (global.get $D_SPEC_TEMPLATE) (global.get $D_SPEC) (local.get $template)))
    (call $emit (global.get $D_REASON))
    (call $emit_u32 (local.get $nics))
    (call $emit (global.get $D_REQUESTED))
    (call $emit_u32 (local.get $count))
    (call $emit (global.get $D_ALLOWS))
    (call $emit_u32 (local.get $max))
    (call $emit (global.get $D_REMOVE))
    (call $emit_u32 (i32.sub (local.get $nics) (local.get $max)))
    (call $emit (global.get $D_TAIL))
    (call $finish (local.get $output)))

  (func (export "nicpolicy_validate_settings") (param $ptr i32) (param $len i32) (result i64)
    (local $output i32)
    (local $p i32)
    (local $stop i32)
    (local $name i32)
    (local $name_end i32)
    (local $value i32)
    (local $c i32)
    (global.set $end (i32.add (local.get $ptr) (local.get $len)))
    (local.set $output (call $reserve (global.get $OUTPUT_SIZE)))
    (if (i32.eqz (local.get $output))
      (then (return (call $static (global.get $V_MEMORY)))))

    ;; One JSON value and nothing after it.
    (local.set $p (call $skip_ws (local.get $ptr)))
    (local.set $stop (call $skip_value (local.get $p)))
    (if (i32.eq (local.get $stop) (global.get $MALFORMED))
      (then (return (call $static (global.get $V_NOT_JSON)))))
    (if (i32.ne (call $skip_ws (local.get $stop)) (global.get $end))
      (then (return (call $static (global.get $V_NOT_JSON)))))
    ;; null: no settings, every default.
    (if (call $bytes_are (local.get $p) (local.get $stop) (global.get $T_NULL))
      (then (return (call $static (global.get $S_VALID)))))
    (if (i32.ne (call $peek (local.get $p)) (i32.const 0x7b)) ;; {
      (then
        (return (call $refuse (local.get $output) (global.get $V_OBJECT)
                  (local.get $p) (local.get $stop) (i32.const 0)))))

    ;; Every member must be maxNics with a valid value.
    (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
    (if (i32.eq (call $peek (local.get $p)) (i32.const 0x7d)) ;; } (an empty object)
      (then (return (call $static (global.get $S_VALID)))))
    (loop $member
      (local.set $name (local.get $p))
      (local.set $p (call $skip_string (local.get $p)))
      (if (i32.eq (local.get $p) (global.get $MALFORMED))
        (then (return (call $static (global.get $V_NOT_JSON)))))
      (local.set $name_end (local.get $p))
      (local.set $p (call $skip_ws (local.get $p)))
      (if (i32.ne (call $peek (local.get $p)) (i32.const 0x3a)) ;; :
        (then (return (call $static (global.get $V_NOT_JSON)))))
      (local.set $value (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
      (local.set $p (call $skip_value (local.get $value)))
      (if (i32.eq (local.get $p) (global.get $MALFORMED))
        (then (return (call $static (global.get $V_NOT_JSON)))))
      (if (call $bytes_are
            (i32.add (local.get $name) (i32.const 1))
            (i32.sub (local.get $name_end) (i32.const 1))
            (global.get $K_MAXNICS))
        (then
          (if (i32.lt_s (call $parse_max (local.get $value) (local.get $p)) (i32.const 0))
            (then
              (return (call $refuse (local.get $output) (global.get $V_RANGE)
                        (local.get $value) (local.get $p) (i32.const 0))))))
        (else
          ;; The name is quoted with its quotes: unknown setting "maxNic": ...
          (return (call $refuse (local.get $output) (global.get $V_UNKNOWN)
                    (local.get $name) (local.get $name_end) (global.get $V_ONLY)))))
      (local.set $p (call $skip_ws (local.get $p)))
      (local.set $c (call $peek (local.get $p)))
      (if (i32.eq (local.get $c) (i32.const 0x2c)) ;; ,
        (then
          (local.set $p (call $skip_ws (i32.add (local.get $p) (i32.const 1))))
          (br $member)))
      (if (i32.eq (local.get $c) (i32.const 0x7d)) ;; }
        (then (return (call $static (global.get $S_VALID))))))
    (call $static (global.get $V_NOT_JSON)))

  (@custom "nicpolicy.metadata"
    "{\"name\":\"nic-limit\",\"version\":\"1.0.0\",\"abiVersion\":1,\"description\":\"Limits a machine to maxNics NICs (default 4), the primary included; written in WebAssembly text\"}")
)
