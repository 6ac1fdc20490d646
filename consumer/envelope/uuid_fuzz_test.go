package envelope

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// FuzzParseV7 checks ParseV7 against an independent oracle written from
// RFC 9562 directly: the canonical 8-4-4-4-12 hex form, version nibble 7,
// variant bits 10. Anything accepted must round-trip to the same text
// (lower-cased) and carry a Reason when rejected.
func FuzzParseV7(f *testing.F) {
	for _, s := range []string{
		v7,
		strings.ToUpper(v7),
		uuid.New().String(),                    // v4
		"0190f0a0-1234-7abc-cdef-0123456789ab", // variant 110
		"0190f0a0-1234-7abc-0def-0123456789ab", // variant 0
		"urn:uuid:0190f0a0-1234-7abc-8def-0123456789ab", // non-canonical
		"{0190f0a0-1234-7abc-8def-0123456789ab}",
		"0190f0a012347abc8def0123456789ab",
		"0190f0a0-1234-7abc-8def-0123456789a",
		"0190f0a0_1234-7abc-8def-0123456789ab",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseV7(s)
		want := oracleV7(s)
		if (err == nil) != want {
			t.Fatalf("ParseV7(%q): err=%v, oracle says valid=%v", s, err, want)
		}
		if err != nil {
			if reasonOf(err) == "" {
				t.Fatalf("ParseV7(%q): error without a reason: %v", s, err)
			}
			return
		}
		if id.String() != strings.ToLower(s) {
			t.Fatalf("ParseV7(%q) = %s: does not round-trip", s, id)
		}
		if Time(id).UnixMilli() < 0 {
			t.Fatalf("negative timestamp from %s", id)
		}
	})
}

func oracleV7(s string) bool {
	if len(s) != 36 {
		return false
	}
	for _, i := range []int{8, 13, 18, 23} {
		if s[i] != '-' {
			return false
		}
	}
	raw, err := hex.DecodeString(s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36])
	if err != nil || len(raw) != 16 {
		return false
	}
	return raw[6]>>4 == 7 && raw[8]>>6 == 0b10
}
