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

// TLS is what a TLS server of a test was started with: a certificate
// authority made for the test, the server's certificate (for 127.0.0.1)
// signed by it, and the password clients must give.
type TLS struct {
	CAFile   string // PEM, for clients to trust (SSL_CERT_FILE for a subprocess)
	Password string
	ca       *x509.CertPool

	certFile, keyFile string
}

// ClientConfig trusts the test's certificate authority.
func (c *TLS) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.ca, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// StartTLS starts a standalone server that accepts only TLS connections
// and requires a password: certificates made by the test, nothing from the
// machine.
func StartTLS(t T) (*Server, *TLS) {
	t.Helper()
	s := newServer(t)
	must := func(err error) {
		if err != nil {
			t.Fatalf("redistest: making certificates: %v", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	must(err)
	caCert, err := x509.ParseCertificate(caDER)
	must(err)
	serverKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	serverDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, caCert, &serverKey.PublicKey, caKey)
	must(err)
	keyDER, err := x509.MarshalECPrivateKey(serverKey)
	must(err)
	c := &TLS{
		CAFile: filepath.Join(s.dir, "ca.pem"), certFile: filepath.Join(s.dir, "server.pem"),
		keyFile: filepath.Join(s.dir, "server.key"), Password: "test-password", ca: x509.NewCertPool(),
	}
	c.ca.AddCert(caCert)
	for file, block := range map[string]*pem.Block{
		c.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		c.certFile: {Type: "CERTIFICATE", Bytes: serverDER},
		c.keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		must(os.WriteFile(file, pem.EncodeToMemory(block), 0o600))
	}
	s.tls = c
	s.startFresh()
	return s, c
}
