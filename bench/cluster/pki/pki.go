// Package pki issues the certificates of a throwaway local cluster: one CA
// signs every server and client certificate, and the PEM files are written
// where the components read them.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// validity is long enough for any local cluster; nothing here is rotated.
const validity = 365 * 24 * time.Hour

// CA signs the cluster's certificates.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	key     crypto.Signer
}

// Pair is a certificate and its key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// Request describes a certificate to issue.
type Request struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Server        bool // server authentication; otherwise client authentication
}

// NewCA makes a self-signed CA.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

// KeyPEM returns the CA's private key (the controller manager signs with it).
func (ca *CA) KeyPEM() ([]byte, error) {
	return encodeKey(ca.key)
}

// Issue signs a new key pair for req.
func (ca *CA) Issue(req Request) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("generating a key for %s: %w", req.CommonName, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return Pair{}, err
	}
	usage := x509.ExtKeyUsageClientAuth
	if req.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.CommonName, Organization: req.Organizations},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     req.DNSNames,
		IPAddresses:  req.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("signing the certificate of %s: %w", req.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: keyPEM}, nil
}

// Write writes the pair as base.crt and base.key in dir.
func (p Pair) Write(dir, base string) (certFile, keyFile string, err error) {
	certFile = filepath.Join(dir, base+".crt")
	keyFile = filepath.Join(dir, base+".key")
	if err := os.WriteFile(certFile, p.CertPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", certFile, err)
	}
	if err := os.WriteFile(keyFile, p.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing %s: %w", keyFile, err)
	}
	return certFile, keyFile, nil
}

// ServiceAccountKeys returns an RSA key pair for service-account tokens
// (private key, public key), PEM-encoded.
func ServiceAccountKeys() (private, public []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the service-account public key: %w", err)
	}
	return pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), pemBlock("PUBLIC KEY", pub), nil
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("unexpected key type %T", key)
	}
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		return nil, fmt.Errorf("encoding a key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("drawing a serial number: %w", err)
	}
	return n, nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
