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
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DatabaseConn is how the operator reaches one object's database: the URL
// from spec.database.urlSecretRef and, from spec.database.caSecretRef, the
// PEM CA bundle to verify the server with (nil without one).
type DatabaseConn struct {
	URL string
	CA  []byte
}

// DatabaseTLSError is a database URL whose TLS settings contradict
// spec.database.caSecretRef. Like InvalidURLError it never quotes the URL.
type DatabaseTLSError struct {
	// SSLMode is the URL's explicit sslmode (or "ssl=true").
	SSLMode string
	// RootCert is set when the URL names an sslrootcert of its own.
	RootCert bool
}

func (e *DatabaseTLSError) Error() string {
	if e.RootCert {
		return "spec.database.caSecretRef is set but the database URL names an sslrootcert of its own: remove sslrootcert from the URL (the operator cannot read files of the consumer image, and the consumer gets the CA from caSecretRef)"
	}
	return fmt.Sprintf("spec.database.caSecretRef is set but the database URL says sslmode=%s, which would not verify the server with that CA (and the consumer and the operator would disagree): use sslmode=verify-full (or verify-ca), or leave sslmode out of the URL, which then means verify-full", e.SSLMode)
}

// InvalidCAError is a caSecretRef whose value holds no PEM certificate.
type InvalidCAError struct{ Name, Key string }

func (e *InvalidCAError) Error() string {
	return fmt.Sprintf("the PostgreSQL CA bundle in Secret %q key %q holds no PEM certificate", e.Name, e.Key)
}

// explicitSSL returns the sslmode and sslrootcert a connection string sets
// itself ("" for a key it does not set), in either form pgx accepts: a
// postgres:// URI or libpq keyword/value pairs. The URI-only ssl=true is
// reported as the sslmode "ssl=true".
func explicitSSL(conn string) (mode, rootcert string, err error) {
	if rest, ok := cutScheme(conn); ok {
		mode, rootcert, err = uriSSL(rest)
		if err != nil {
			return "", "", &InvalidURLError{}
		}
		return mode, rootcert, nil
	}
	kv, err := keywordValues(conn)
	if err != nil {
		return "", "", &InvalidURLError{}
	}
	return kv["sslmode"], kv["sslrootcert"], nil
}

// cutScheme strips the postgres:// or postgresql:// of a URI.
func cutScheme(conn string) (string, bool) {
	if rest, ok := strings.CutPrefix(conn, "postgresql://"); ok {
		return rest, true
	}
	return strings.CutPrefix(conn, "postgres://")
}

// uriQuery finds the query of a URI (after its scheme) as libpq and pgx
// do, not as net/url would: the userinfo ends at the first '@' before any
// '/' (so an unencoded '?' or '#' in a password stays in it), bracketed
// IPv6 hosts may hold any character, and '#' is no fragment. It returns the
// index of the '?' in p, or -1.
func uriQuery(p string) int {
	start := 0
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		start = i + 1
	}
	for i := start; i < len(p); i++ {
		switch p[i] {
		case '[':
			if j := strings.IndexByte(p[i:], ']'); j >= 0 {
				i += j
			}
		case '/':
			if k := strings.IndexByte(p[i:], '?'); k >= 0 {
				return i + k
			}
			return -1
		case '?':
			return i
		}
	}
	return -1
}

// uriSSL reads sslmode and sslrootcert from a URI (after its scheme) as
// pgx does: each query parameter is key=value with both halves
// percent-decoded and trimmed of spaces, the last occurrence wins, and
// ssl=true after the last sslmode stands for sslmode=require.
func uriSSL(p string) (mode, rootcert string, err error) {
	query := ""
	if i := uriQuery(p); i >= 0 {
		query = p[i+1:]
	}
	decode := func(raw string) (string, error) {
		raw = strings.Trim(raw, " ")
		if strings.Contains(raw, " ") {
			return "", errors.New("space inside a URI component")
		}
		return url.PathUnescape(raw)
	}
	sslTrue, sslLast := false, false
	for query != "" {
		pair, rest, _ := strings.Cut(query, "&")
		query = rest
		rawKey, rawValue, found := strings.Cut(pair, "=")
		if !found || strings.Contains(rawValue, "=") {
			return "", "", errors.New("malformed URI query parameter")
		}
		key, err := decode(rawKey)
		if err != nil {
			return "", "", err
		}
		value, err := decode(rawValue)
		if err != nil {
			return "", "", err
		}
		switch key {
		case "sslmode":
			mode, sslLast = value, false
		case "ssl":
			sslTrue, sslLast = value == "true", true
		case "sslrootcert":
			rootcert = value
		}
	}
	if sslTrue && sslLast {
		mode = "ssl=true"
	}
	return mode, rootcert, nil
}

// keywordValues splits a libpq keyword/value connection string: keyword =
// value pairs separated by whitespace, a value optionally in single quotes,
// with backslash escaping the next character. A repeated keyword keeps its
// last value, as in libpq.
func keywordValues(s string) (map[string]string, error) {
	const space = " \t\n\r\v\f"
	out := map[string]string{}
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New("keyword without '='")
		}
		key := strings.TrimRight(s[:eq], space)
		if key == "" || strings.ContainsAny(key, space) {
			return nil, errors.New("malformed keyword")
		}
		s = strings.TrimLeft(s[eq+1:], space)
		var val strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		i := 0
		closed := false
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\\' {
				if i+1 < len(s) {
					i++
					val.WriteByte(s[i])
				}
				continue
			}
			if quoted && c == '\'' {
				closed = true
				i++
				break
			}
			if !quoted && strings.IndexByte(space, c) >= 0 {
				break
			}
			val.WriteByte(c)
		}
		if quoted && !closed {
			return nil, errors.New("unterminated quoted value")
		}
		out[key] = val.String()
		s = strings.TrimLeft(s[i:], space)
	}
	return out, nil
}

// withSSLMode returns conn with sslmode=mode added; conn sets no sslmode.
func withSSLMode(conn, mode string) string {
	if rest, ok := cutScheme(conn); ok {
		i := uriQuery(rest)
		switch {
		case i < 0:
			return conn + "?sslmode=" + mode
		case i == len(rest)-1 || strings.HasSuffix(rest, "&"):
			return conn + "sslmode=" + mode
		}
		return conn + "&sslmode=" + mode
	}
	// Written again from its parsed form rather than appended to: a
	// trailing "key=" or backslash would swallow an appended pair.
	kv, err := keywordValues(conn)
	if err != nil {
		return conn // parsePoolConfig reports it
	}
	kv["sslmode"] = mode
	keys := slices.Sorted(maps.Keys(kv))
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"='"+quote.Replace(kv[k])+"'")
	}
	return strings.Join(parts, " ")
}

// parsePoolConfig parses a database connection into a pool configuration.
// With a CA, the URL must say verify-full or verify-ca, or nothing (which
// becomes verify-full), and every host's TLS configuration verifies the
// server with the CA, held in memory.
func parsePoolConfig(dc DatabaseConn) (*pgxpool.Config, error) {
	conn := dc.URL
	var pool *x509.CertPool
	if dc.CA != nil {
		mode, rootcert, err := explicitSSL(conn)
		if err != nil {
			return nil, err
		}
		switch {
		case rootcert != "":
			return nil, &DatabaseTLSError{RootCert: true}
		case mode == "":
			conn = withSSLMode(conn, "verify-full")
		case mode != "verify-full" && mode != "verify-ca":
			return nil, &DatabaseTLSError{SSLMode: mode}
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(dc.CA) {
			return nil, errors.New("no PEM certificate in the CA bundle") // callers check the CA first
		}
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		// pgx redacts the password, but the rest of the URL (user, host) is
		// still not ours to print: report the problem only.
		return nil, &InvalidURLError{}
	}
	if pool != nil {
		// verify-ca's VerifyPeerCertificate reads RootCAs of this very
		// tls.Config when called, so setting it here covers both modes.
		setRoots := func(t *tls.Config) {
			if t != nil {
				t.RootCAs = pool
			}
		}
		setRoots(cfg.ConnConfig.TLSConfig)
		for _, fb := range cfg.ConnConfig.Fallbacks {
			setRoots(fb.TLSConfig)
		}
	}
	return cfg, nil
}
