package consumertest_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/consumertest"
)

// connectTLS opens a pool as the consumer runtime does (pgxpool.ParseConfig
// of its URL, with the process environment) and says whether the session
// runs over TLS.
func connectTLS(ctx context.Context, conn string) (bool, error) {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return false, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	var ssl bool
	err = pool.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl)
	return ssl, err
}

// TestPostgresWithTLSVerifyFull: a server whose certificate a test CA signed
// is verified with sslmode=verify-full and sslrootcert (the URL form, and
// the PGSSLROOTCERT/PGSSLMODE form the operator's consumer Deployment
// sets); without the CA, or for a host the certificate does not name,
// verification fails.
func TestPostgresWithTLSVerifyFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, []byte(ca.PEM), 0o600); err != nil {
		t.Fatal(err)
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}

	ssl, err := connectTLS(ctx, pg.TLSURL("postgres", "localhost", q("sslmode", "verify-full", "sslrootcert", caFile)))
	if err != nil || !ssl {
		t.Fatalf("verify-full with sslrootcert: ssl %v, err %v", ssl, err)
	}
	// The system roots do not know the test CA.
	if _, err := connectTLS(ctx, pg.TLSURL("postgres", "localhost", q("sslmode", "verify-full"))); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("verify-full without the CA: err %v, want a certificate verification error", err)
	}
	// The certificate names localhost only.
	if _, err := connectTLS(ctx, pg.TLSURL("postgres", "127.0.0.1", q("sslmode", "verify-full", "sslrootcert", caFile))); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("verify-full for a host the certificate does not name: err %v, want a name mismatch", err)
	}
	if ssl, err := connectTLS(ctx, pg.TLSURL("postgres", "127.0.0.1", q("sslmode", "verify-ca", "sslrootcert", caFile))); err != nil || !ssl {
		t.Errorf("verify-ca skips the name check: ssl %v, err %v", ssl, err)
	}

	// The environment the operator sets in the consumer pod, with a URL that
	// names no sslmode: pgx reads them as sslrootcert and sslmode.
	t.Setenv("PGSSLROOTCERT", caFile)
	t.Setenv("PGSSLMODE", "verify-full")
	if ssl, err := connectTLS(ctx, pg.TLSURL("postgres", "localhost", "")); err != nil || !ssl {
		t.Errorf("URL without sslmode, PGSSLROOTCERT and PGSSLMODE set: ssl %v, err %v", ssl, err)
	}
	if _, err := connectTLS(ctx, pg.TLSURL("postgres", "127.0.0.1", "")); err == nil {
		t.Error("PGSSLMODE=verify-full did not check the host name")
	}
}
