package consumertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// TestCA is a throwaway certificate authority: it signs server certificates
// for TLS tests that verify the server (sslmode=verify-full), as a private
// CA (RDS, Cloud SQL, CloudNativePG) does in production.
type TestCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded, as a CA file or Secret holds it.
	PEM string
	// Pool holds the CA certificate, for a client's tls.Config RootCAs.
	Pool *x509.CertPool
}

// NewTestCA creates an ECDSA P-256 CA valid for a day around now.
func NewTestCA() (*TestCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "consumertest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &TestCA{cert: cert, key: key, Pool: pool,
		PEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}, nil
}

// IssueServer signs a server certificate for hosts (DNS names or IP
// addresses) and returns it and its private key, PEM-encoded.
func (ca *TestCA) IssueServer(hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n.Add(n, big.NewInt(1))
}

// WithTLS turns ssl on, with a server certificate that ca signed for hosts
// (default "localhost" and "127.0.0.1"). The server still accepts plain
// connections (URL keeps sslmode=disable); TLSURL is for clients that
// verify.
func WithTLS(ca *TestCA, hosts ...string) PostgresOption {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	return func(pg *Postgres) {
		pg.afterInit = append(pg.afterInit, func(pg *Postgres) error {
			certPEM, keyPEM, err := ca.IssueServer(hosts...)
			if err != nil {
				return err
			}
			certFile, keyFile := filepath.Join(pg.dir, "server.crt"), filepath.Join(pg.dir, "server.key")
			// The server refuses a key file others can read.
			for file, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
				if err := os.WriteFile(file, b, 0o600); err != nil {
					return fmt.Errorf("writing %s: %w", file, err)
				}
				if err := pg.chown(file); err != nil {
					return err
				}
			}
			pg.settings = append(pg.settings, "-c", "ssl=on", "-c", "ssl_cert_file="+certFile, "-c", "ssl_key_file="+keyFile)
			return nil
		})
	}
}

// TLSURL is a connection URL for the superuser and database on host (a name
// or address the server certificate names, or not, to test a mismatch),
// with query (e.g. "sslmode=verify-full"; may be empty).
func (pg *Postgres) TLSURL(database, host, query string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", pg.password),
		Host:     net.JoinHostPort(host, strconv.Itoa(pg.port)),
		Path:     "/" + database,
		RawQuery: query,
	}
	return u.String()
}
