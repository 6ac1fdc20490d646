package consumertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// SelfSigned is a throwaway certificate for a test server on 127.0.0.1 and
// localhost (e.g. kfake.TLS), with what a client needs to trust it.
type SelfSigned struct {
	Certificate tls.Certificate // for the server's tls.Config
	Pool        *x509.CertPool  // for the client's RootCAs
	PEM         string          // the certificate, PEM-encoded, as a CA file or Secret holds it
}

// NewSelfSigned creates a self-signed ECDSA P-256 certificate valid for an
// hour around now.
func NewSelfSigned() (SelfSigned, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("generating a key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "consumertest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return SelfSigned{}, fmt.Errorf("creating a certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return SelfSigned{}, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return SelfSigned{
		Certificate: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		Pool:        pool,
		PEM:         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
	}, nil
}
