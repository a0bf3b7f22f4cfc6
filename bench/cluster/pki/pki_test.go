package pki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
)

func TestIssuedCertificatesVerify(t *testing.T) {
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	for _, tc := range []struct {
		name  string
		req   Request
		usage x509.ExtKeyUsage
		host  string
	}{
		{"server by IP", Request{CommonName: "api", IPs: []net.IP{net.ParseIP("198.19.0.1")}, Server: true}, x509.ExtKeyUsageServerAuth, "198.19.0.1"},
		{"server by name", Request{CommonName: "api", DNSNames: []string{"kubernetes.default"}, Server: true}, x509.ExtKeyUsageServerAuth, "kubernetes.default"},
		{"client", Request{CommonName: "system:node:node-1", Organizations: []string{"system:nodes"}}, x509.ExtKeyUsageClientAuth, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ca.Issue(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			kp, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(kp.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
				t.Errorf("verify: %v", err)
			}
			if cert.Subject.CommonName != tc.req.CommonName {
				t.Errorf("CN = %q, want %q", cert.Subject.CommonName, tc.req.CommonName)
			}
		})
	}
}
