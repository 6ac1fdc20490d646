package dedup_test

import (
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

// TestValidateRole_RefusesRolesThatAreEveryone: PostgreSQL reads a grant to
// "public" (quoted or not, any case folded by the caller) as a grant to
// every role, "none" is reserved, and the pg_ roles are the server's own
// predefined roles (pg_monitor, pg_read_all_data, ...) held by roles the
// operator does not know: a grant to any of them reaches far more than the
// one service meant.
func TestValidateRole_RefusesRolesThatAreEveryone(t *testing.T) {
	for _, r := range []string{"public", "PUBLIC", "Public", "none", "NONE", "pg_monitor", "pg_read_all_data", "PG_signal_backend"} {
		err := dedup.ValidateRole(r)
		if err == nil || !strings.Contains(err.Error(), r) {
			t.Errorf("ValidateRole(%q) = %v, want a refusal naming it", r, err)
		}
	}
	for _, r := range []string{"orders_emitter", "publisher", "public_api", "nonexistent", "app-pg_1", "Emitter"} {
		if err := dedup.ValidateRole(r); err != nil {
			t.Errorf("ValidateRole(%q) = %v, want nil", r, err)
		}
	}
}
