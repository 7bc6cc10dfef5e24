package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are PEM files in a directory of the test's: a CA, a server
// certificate it signed for 127.0.0.1 and localhost, and a client
// certificate it signed.
type TLSFiles struct {
	CA, Cert, Key, ClientCert, ClientKey string
}

// NewTLSFiles makes a CA and the two certificates (ECDSA P-256, valid for
// an hour).
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentd test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, certFile, keyFile string) (string, string) {
		t.Helper()
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(certFile, "CERTIFICATE", der), write(keyFile, "EC PRIVATE KEY", kder)
	}
	f := TLSFiles{CA: write("ca.pem", "CERTIFICATE", caDER)}
	f.Cert, f.Key = leaf(2, "redis", x509.ExtKeyUsageServerAuth, "server.pem", "server-key.pem")
	f.ClientCert, f.ClientKey = leaf(3, "agentd", x509.ExtKeyUsageClientAuth, "client.pem", "client-key.pem")
	return f
}

// StartTLS starts a redis-server that also listens with TLS, on a port of
// its own, with f's server certificate; with authClients, a TLS client
// must present a certificate f's CA signed. It returns the server (its
// Addr is the plain port, for the test's own probes) and the TLS address.
func StartTLS(t testing.TB, f TLSFiles, authClients bool, args ...string) (*Server, string) {
	t.Helper()
	s := New(t)
	port := freePort(t)
	auth := "no"
	if authClients {
		auth = "yes"
	}
	s.args = append([]string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", auth}, args...)
	s.Start()
	return s, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// useTLS gives s a TLS port besides its plain one, with f's server
// certificate, and has it replicate (and, in a Cluster, speak to the other
// nodes) over TLS with f's client certificate; clients need none. The test's own probes keep
// the plain port.
func (s *Server) useTLS(f TLSFiles) {
	s.tlsPort = freePort(s.t)
	s.args = append(s.args, "--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", f.Cert, "--tls-key-file", f.Key,
		"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "no", "--tls-replication", "yes",
		// A node is a client of the others (its replication, the Cluster's
		// bus, which always asks for a client's certificate).
		"--tls-client-cert-file", f.ClientCert, "--tls-client-key-file", f.ClientKey)
}
