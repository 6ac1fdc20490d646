package dedup

import (
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// maxUnixMilli is the largest timestamp a UUID v7 can carry (48 bits).
const maxUnixMilli = 1<<48 - 1

// BoundaryUUID returns the smallest UUID v7 whose timestamp is t: the 48-bit
// big-endian Unix millisecond timestamp followed by 80 zero bits. Every UUID
// v7 generated at or after t (to the millisecond) sorts at or above it, every
// one generated before sorts below, so [BoundaryUUID(a), BoundaryUUID(b)) is
// exactly the set of ids stamped in [a, b). Times before 1970 map to the nil
// uuid, times past the 48-bit range to the largest prefix.
func BoundaryUUID(t time.Time) uuid.UUID {
	ms := t.UnixMilli()
	if ms < 0 {
		ms = 0
	}
	if ms > maxUnixMilli {
		ms = maxUnixMilli
	}
	var u uuid.UUID
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ms))
	copy(u[:6], b[2:])
	return u
}

// EventTime returns the producer timestamp carried in the first 48 bits of a
// UUID v7, in UTC, to the millisecond. It does not check the version: the
// dedup window is defined on these bits whatever they hold.
func EventTime(id uuid.UUID) time.Time {
	var b [8]byte
	copy(b[2:], id[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:]))).UTC() //nolint:gosec // G115: 48 bits, always within int64
}

// isBoundary reports whether u is a BoundaryUUID (its low 80 bits are zero).
func isBoundary(u uuid.UUID) bool {
	for _, c := range u[6:] {
		if c != 0 {
			return false
		}
	}
	return true
}
