package typescriptkafkajs_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/controllers"
)

// envName is the environment variable the example reads a Secret key from:
// DEDUP_ and the key in upper snake case (claimOneFunction:
// DEDUP_CLAIM_ONE_FUNCTION).
func envName(key string) string {
	var b strings.Builder
	b.WriteString("DEDUP_")
	for i, r := range key {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// TestConfigNamesMatchSecretKeys reads the operator's application Secret
// keys and src/config.ts: a claim function the example reads has the
// Secret key's name as its Config field and DEDUP_<KEY> as its variable,
// and the function it expects is the one the Secret holds under that key
// (the per-record function under claimOneFunction, the batch one under
// claimFunction). Before, the field claimFunction and DEDUP_CLAIM_FUNCTION
// took the per-record function, which the Secret holds under
// claimOneFunction; wiring the Secret's claimFunction into it failed at the
// first record with "function ... processed_event_claim(uuid, unknown)
// does not exist".
func TestConfigNamesMatchSecretKeys(t *testing.T) {
	src, err := os.ReadFile("src/config.ts")
	if err != nil {
		t.Fatal(err)
	}
	// "    field: something(required(env, 'ENV'))," in loadConfig.
	bound := regexp.MustCompile(`(?m)^\s+([a-zA-Z]+): [a-zA-Z]+\(required\(env, '([A-Z_]+)'\)\)`)
	fields := map[string]string{} // env -> field
	for _, m := range bound.FindAllStringSubmatch(string(src), -1) {
		fields[m[2]] = m[1]
	}
	tbl := dedup.Table{Schema: "billing"}
	secret := map[string]string{ // key -> the value the operator puts there
		controllers.AppSecretClaimFunction:    tbl.ClaimFunction(),
		controllers.AppSecretClaimOneFunction: tbl.ClaimOneFunction(),
	}
	checked := 0
	for env, field := range fields {
		if !strings.HasPrefix(env, "DEDUP_CLAIM") {
			continue
		}
		checked++
		key := ""
		for k := range secret {
			if envName(k) == env {
				key = k
			}
		}
		if key == "" {
			t.Errorf("src/config.ts reads %s (field %s), which is no application Secret key's variable (%s, %s)", env, field,
				envName(controllers.AppSecretClaimFunction), envName(controllers.AppSecretClaimOneFunction))
			continue
		}
		if field != key {
			t.Errorf("src/config.ts reads %s into field %q; the Secret's key is %q", env, field, key)
		}
	}
	// The per-record consumer reads the per-record function: the Secret's
	// claimOneFunction, whose value ends in _claim_one.
	if got := fields[envName(controllers.AppSecretClaimOneFunction)]; got != controllers.AppSecretClaimOneFunction {
		t.Errorf("src/config.ts does not read %s into %s (it reads %v); the per-record function is the Secret's %s (%s)",
			envName(controllers.AppSecretClaimOneFunction), controllers.AppSecretClaimOneFunction, fields,
			controllers.AppSecretClaimOneFunction, secret[controllers.AppSecretClaimOneFunction])
	}
	if checked == 0 {
		t.Fatalf("found no DEDUP_CLAIM* variable in src/config.ts (%v): the pattern is out of date", fields)
	}
}
