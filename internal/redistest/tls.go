package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLS is what a TLS server of a test was started with: a self-signed
// certificate for 127.0.0.1, made for the test, and the clients' password.
type TLS struct {
	CAFile   string // the certificate, PEM, for clients to trust (SSL_CERT_FILE for a subprocess)
	Password string
	ca       *x509.CertPool
	keyFile  string
}

// ClientConfig trusts the test's certificate.
func (c *TLS) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.ca, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// StartTLS starts a standalone server that takes only TLS, with a password
// and a certificate made by the test, nothing from the machine.
func StartTLS(t T) (*Server, *TLS) {
	t.Helper()
	s := newServer(t)
	must := func(err error) {
		if err != nil {
			t.Fatalf("redistest: making a certificate: %v", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certDER, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	must(err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(err)
	c := &TLS{CAFile: filepath.Join(s.dir, "cert.pem"), keyFile: filepath.Join(s.dir, "cert.key"),
		Password: "test-password", ca: x509.NewCertPool()}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER})
	c.ca.AppendCertsFromPEM(certPEM)
	must(os.WriteFile(c.CAFile, certPEM, 0o600))
	must(os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	s.tls = c
	s.startFresh()
	return s, c
}
