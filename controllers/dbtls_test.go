/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
	"github.com/idempotency-dev/operator/consumer/consumertest"
	"github.com/idempotency-dev/operator/consumer/dedup"
	"github.com/idempotency-dev/operator/controllers/objects"
)

func TestExplicitSSL(t *testing.T) {
	for _, tc := range []struct {
		conn, mode, rootcert string
	}{
		{"postgres://u:p@h/db", "", ""},
		{"postgres://u:p@h/db?sslmode=verify-full", "verify-full", ""},
		{"postgresql://u:p%40x@h1:5432,h2:5432/db?target_session_attrs=read-write&sslmode=require", "require", ""},
		{"postgres://u:p@h/db?ssl=true", "ssl=true", ""},
		{"postgres://u:p@h/db?sslrootcert=/x/ca.crt", "", "/x/ca.crt"},
		{"postgres://u:p?sslmode=disable@h/db", "", ""},
		{"postgres://u:p@h/db?sslmode=verify-full&ssl=true", "ssl=true", ""},
		{"postgres://u:p@h/db?ssl=true&sslmode=verify-ca", "verify-ca", ""},
		{"postgres://h/db?sslmode=%76erify-full ", "verify-full", ""},
		{"host=h user=u password='a b\\' sslmode=disable' dbname=db", "", ""},
		{"host=h sslmode = verify-ca  sslrootcert='/a b/ca.crt'", "verify-ca", "/a b/ca.crt"},
		{"host=h sslmode=prefer sslmode=verify-full", "verify-full", ""},
		{"  host=h password=a\\ sslmode=disable  ", "", ""},
	} {
		mode, rootcert, err := explicitSSL(tc.conn)
		if err != nil || mode != tc.mode || rootcert != tc.rootcert {
			t.Errorf("explicitSSL(%q) = %q, %q, %v; want %q, %q", tc.conn, mode, rootcert, err, tc.mode, tc.rootcert)
		}
	}
	for _, bad := range []string{"host=h password='open", "host", "postgres://u:p@h/db?sslmode", "postgres://h/db?sslmode=a=b", "postgres://h/?x=%zz"} {
		if _, _, err := explicitSSL(bad); !errors.As(err, new(*InvalidURLError)) {
			t.Errorf("explicitSSL(%q): err %v, want *InvalidURLError", bad, err)
		}
	}
}

func TestWithSSLMode(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://h/db":             "postgres://h/db?sslmode=verify-full",
		"postgres://h/db?x=1":         "postgres://h/db?x=1&sslmode=verify-full",
		"postgres://h/db?":            "postgres://h/db?sslmode=verify-full",
		"host=h dbname=db ":           "dbname='db' host='h' sslmode='verify-full'",
		`host=h password=a\'b\\ x=`:   `host='h' password='a\'b\\' sslmode='verify-full' x=''`,
		"postgresql://h/db?a=b#frag":  "postgresql://h/db?a=b#frag&sslmode=verify-full",
		"postgres://u:p?w#d@h/db":     "postgres://u:p?w#d@h/db?sslmode=verify-full",
		"postgres://u:p@[::1]:5/db?":  "postgres://u:p@[::1]:5/db?sslmode=verify-full",
		"postgres://h?a=b":            "postgres://h?a=b&sslmode=verify-full",
		"postgres://h1,h2/db?a=b&c=d": "postgres://h1,h2/db?a=b&c=d&sslmode=verify-full",
	} {
		if got := withSSLMode(in, "verify-full"); got != want {
			t.Errorf("withSSLMode(%q) = %q, want %q", in, got, want)
		}
	}
}

// connectPool opens the operator's pool configuration for db and says
// whether its session runs over TLS.
func connectPool(ctx context.Context, db DatabaseConn) (bool, error) {
	cfg, err := parsePoolConfig(db)
	if err != nil {
		return false, err
	}
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer pool.Close()
	var ssl bool
	err = pool.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl)
	return ssl, err
}

// TestOperatorConnectsWithCA: the operator's own connection verifies a
// server whose certificate a private CA signed, with the CA held in memory
// (no file): verify-full when the URL names no sslmode, verify-ca when it
// says so; a wrong CA or host is a DatabaseCertificateRejected condition,
// and a URL whose TLS settings would leave the CA unused is refused.
func TestOperatorConnectsWithCA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ca, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := consumertest.NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	pg, err := consumertest.StartPostgres(consumertest.WithTLS(ca, "localhost"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	caPEM := []byte(ca.PEM)

	for _, tc := range []struct {
		name string
		db   DatabaseConn
	}{
		{"no sslmode means verify-full", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", ""), CA: caPEM}},
		{"explicit verify-full", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "sslmode=verify-full"), CA: caPEM}},
		{"verify-ca skips the name", DatabaseConn{URL: pg.TLSURL("postgres", "127.0.0.1", "sslmode=verify-ca"), CA: caPEM}},
		{"multi-host, read-write", DatabaseConn{URL: strings.Replace(pg.TLSURL("postgres", "localhost", "target_session_attrs=read-write"),
			"@localhost:", fmt.Sprintf("@localhost:%d,localhost:", pg.Port()), 1), CA: caPEM}},
		{"keyword/value form", DatabaseConn{URL: fmt.Sprintf("host=localhost port=%d user=postgres password='%s' dbname=postgres", pg.Port(), pg.Password()), CA: caPEM}},
	} {
		if ssl, err := connectPool(ctx, tc.db); err != nil || !ssl {
			t.Errorf("%s: ssl %v, err %v", tc.name, ssl, err)
		}
	}

	for _, tc := range []struct {
		name   string
		db     DatabaseConn
		reason string
	}{
		{"another CA", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", ""), CA: []byte(other.PEM)}, kafkav1alpha1.ReasonCertificateRejected},
		{"host not in the certificate", DatabaseConn{URL: pg.TLSURL("postgres", "127.0.0.1", ""), CA: caPEM}, kafkav1alpha1.ReasonCertificateRejected},
		{"no CA: system roots", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "sslmode=verify-full")}, kafkav1alpha1.ReasonCertificateRejected},
		{"require with a CA", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "sslmode=require"), CA: caPEM}, kafkav1alpha1.ReasonInvalidURL},
		{"prefer with a CA", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "sslmode=prefer"), CA: caPEM}, kafkav1alpha1.ReasonInvalidURL},
		{"disable with a CA", DatabaseConn{URL: fmt.Sprintf("host=localhost port=%d sslmode=disable", pg.Port()), CA: caPEM}, kafkav1alpha1.ReasonInvalidURL},
		{"ssl=true with a CA", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "ssl=true"), CA: caPEM}, kafkav1alpha1.ReasonInvalidURL},
		{"sslrootcert with a CA", DatabaseConn{URL: pg.TLSURL("postgres", "localhost", "sslrootcert=/etc/ca.crt"), CA: caPEM}, kafkav1alpha1.ReasonInvalidURL},
	} {
		_, err := connectPool(ctx, tc.db)
		if err == nil {
			t.Errorf("%s: connected", tc.name)
			continue
		}
		if reason, _ := classifyDatabaseError(err); reason != tc.reason {
			t.Errorf("%s: reason %s, want %s (err %v)", tc.name, reason, tc.reason, err)
		}
		if strings.Contains(err.Error(), pg.Password()) {
			t.Errorf("%s: the error carries the password: %v", tc.name, err)
		}
	}

	// Through the PoolCache and a dedup.Engine, as a reconcile does.
	cache := NewPoolCache(PoolOptions{})
	defer cache.Close()
	store, err := cache.Open(ctx, DatabaseConn{URL: pg.TLSURL("postgres", "localhost", ""), CA: caPEM},
		dedup.Table{Schema: "public", Name: "processed_event"}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureTable(ctx, "uid-ca-test"); err != nil {
		t.Fatalf("EnsureTable over verify-full: %v", err)
	}
	// The same URL with another CA is another pool (a rotated CA takes effect).
	if _, err := cache.Open(ctx, DatabaseConn{URL: pg.TLSURL("postgres", "localhost", ""), CA: []byte(other.PEM)}, dedup.Table{}.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	if cache.Len() != 2 {
		t.Errorf("%d pools, want one per URL and CA", cache.Len())
	}
}

// TestConsumerEnvVerifiesWithCA: the variables the consumer Deployment
// sets for caSecretRef make pgx, as the consumer runtime calls it
// (pgxpool.ParseConfig of the Secret's URL), verify the server with the
// mounted CA.
func TestConsumerEnvVerifiesWithCA(t *testing.T) {
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

	obj := builtObject()
	obj.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.pem"}
	dep := objects.Deployment(obj, objects.Options{})
	env := envMap(dep.Spec.Template.Spec.Containers[0].Env)
	// The file the pod would see, placed under a temporary root.
	root := t.TempDir()
	file := filepath.Join(root, env[objects.EnvPGSSLRootCert])
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(ca.PEM), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(objects.EnvPGSSLRootCert, file)
	t.Setenv(objects.EnvPGSSLMode, env[objects.EnvPGSSLMode])
	cfg, err := pgxpool.ParseConfig(pg.TLSURL("postgres", "localhost", ""))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var ssl bool
	if err := pool.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
		t.Fatalf("consumer env: ssl %v, err %v", ssl, err)
	}
	// verify-full: a host the certificate does not name is refused.
	cfg, err = pgxpool.ParseConfig(pg.TLSURL("postgres", "127.0.0.1", ""))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := pgxpool.NewWithConfig(ctx, cfg); err == nil {
		if err := p.Ping(ctx); err == nil {
			t.Error("consumer env: connected to a host the certificate does not name")
		}
		p.Close()
	}
}

// TestBuildDeploymentDatabaseCA: caSecretRef becomes a read-only Secret
// volume with the one key, and PGSSLROOTCERT pointing at the mounted file;
// the CA is part of the config hash inputs, so a rotated CA rolls the pods.
func TestBuildDeploymentDatabaseCA(t *testing.T) {
	obj := builtObject()
	if dep := objects.Deployment(obj, objects.Options{}); envMap(dep.Spec.Template.Spec.Containers[0].Env)[objects.EnvPGSSLRootCert] != "" {
		t.Fatal("PGSSLROOTCERT set without caSecretRef")
	}
	obj.Spec.Database.CASecretRef = &kafkav1alpha1.SecretKeyRef{Name: "pg-ca", Key: "ca.pem"}
	dep := objects.Deployment(obj, objects.Options{})
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	env := envMap(c.Env)
	if env[objects.EnvPGSSLRootCert] != "/etc/idempotency/postgres-tls/ca.crt" || env[objects.EnvPGSSLMode] != "verify-full" {
		t.Errorf("PGSSLROOTCERT %q PGSSLMODE %q", env[objects.EnvPGSSLRootCert], env[objects.EnvPGSSLMode])
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		if m.Name == objects.PGCAVolume {
			mounted = m.MountPath == filepath.Dir(env[objects.EnvPGSSLRootCert]) && m.ReadOnly
		}
	}
	var vol bool
	for _, v := range pod.Volumes {
		if v.Name == objects.PGCAVolume && v.Secret != nil {
			vol = v.Secret.SecretName == "pg-ca" && len(v.Secret.Items) == 1 &&
				v.Secret.Items[0].Key == "ca.pem" && v.Secret.Items[0].Path == filepath.Base(env[objects.EnvPGSSLRootCert])
		}
	}
	if !mounted || !vol {
		t.Errorf("CA volume %v mount %v: volumes %+v mounts %+v", vol, mounted, pod.Volumes, c.VolumeMounts)
	}
	refs := secretRefs(obj)
	if len(refs) < 2 || refs[1] != *obj.Spec.Database.CASecretRef {
		t.Errorf("secretRefs %v: the CA must be watched and hashed", refs)
	}
	assertRestricted(t, pod)
}

// FuzzExplicitSSL: wherever pgx parses a connection string, explicitSSL
// parses it too and reads the sslmode pgx applies (checked through the
// shape of pgx's TLS configuration), so a CA is never paired with a mode
// the operator misread.
func FuzzExplicitSSL(f *testing.F) {
	for _, s := range []string{
		"host=h sslmode=disable", "host=h sslmode='verify-full'", "host=h password='a\\'b sslmode=disable' sslmode=require",
		"host=h sslmode=prefer sslmode=verify-full", "postgres://u:p@h/db?sslmode=verify-ca", "postgres://h/db",
		"host=h\tsslmode=allow", "host = h sslmode = verify-full ", "host=h password=a\\ b",
		"postgres://u:p?w#d@h/db", "postgres://h?a=b", "postgres://u@[::1]:5/db?", "postgres://h/db?x=1&", "host=h dbname=db\\",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Contains(s, "sslrootcert") || strings.Contains(s, "service") || strings.Contains(s, "passfile") ||
			strings.Contains(s, "sslcert") || strings.Contains(s, "sslkey") || strings.Contains(s, "sslnegotiation") {
			return // file reads and modes that rewrite sslmode
		}
		cfg, err := pgconn.ParseConfig(s)
		if err != nil || strings.HasPrefix(cfg.Host, "/") {
			return // a Unix socket never uses TLS
		}
		mode, _, err := explicitSSL(s)
		if err != nil {
			t.Fatalf("pgx parses %q, explicitSSL does not: %v", s, err)
		}
		tlsc := cfg.TLSConfig
		var shape string
		switch {
		case tlsc == nil && len(cfg.Fallbacks) > 0 && cfg.Fallbacks[0].TLSConfig != nil:
			shape = "allow"
		case tlsc == nil:
			shape = "disable"
		case !tlsc.InsecureSkipVerify:
			shape = "verify-full"
		case tlsc.VerifyPeerCertificate != nil:
			shape = "verify-ca"
		case len(cfg.Fallbacks) > 0 && cfg.Fallbacks[0].TLSConfig == nil:
			shape = "prefer"
		default:
			shape = "require"
		}
		want := mode
		switch mode {
		case "":
			want = "prefer"
		case "ssl=true":
			want = "require"
		}
		if shape != want && !(shape == "disable" && want == "allow") {
			t.Fatalf("%q: explicitSSL read sslmode %q, pgx applies %s", s, mode, shape)
		}
		if mode != "" {
			return
		}
		// withSSLMode adds verify-full and changes nothing else.
		s2 := withSSLMode(s, "verify-full")
		cfg2, err := pgconn.ParseConfig(s2)
		if err != nil {
			t.Fatalf("%q parses, %q does not: %v", s, s2, err)
		}
		if cfg2.TLSConfig == nil || cfg2.TLSConfig.InsecureSkipVerify || cfg2.Host != cfg.Host || cfg2.Port != cfg.Port ||
			cfg2.Database != cfg.Database || cfg2.User != cfg.User || cfg2.Password != cfg.Password || len(cfg2.RuntimeParams) != len(cfg.RuntimeParams) {
			t.Fatalf("%q became %q: host %q/%q db %q/%q user %q/%q params %v/%v", s, s2, cfg.Host, cfg2.Host, cfg.Database, cfg2.Database, cfg.User, cfg2.User, cfg.RuntimeParams, cfg2.RuntimeParams)
		}
	})
}
