package tlsterm

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// FileError is a certificate or key file that cannot be used, and why.
type FileError struct {
	Path string
	// Key is set when the file is the private key, clear when it holds
	// certificates.
	Key bool
	Err error
}

func (e *FileError) Error() string { return e.Path + ": " + e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }

// readFile reads path, its error without the path repeated.
func readFile(path string, key bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, &FileError{Path: path, Key: key, Err: err}
	}
	return b, nil
}

// LoadPair reads a certificate chain (PEM CERTIFICATE blocks, the leaf
// first, then the intermediates the clients need) and its private key (a
// PEM PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY block, not
// encrypted). Every failure is a *FileError naming the file at fault: one
// that cannot be read, holds no such block or one that does not parse, a
// key and certificate swapped, an encrypted key, or a key that is not the
// certificate's. The certificate's dates are not checked: an expired one
// loads (the caller may warn), as it does in nginx.
func LoadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := readFile(certFile, false)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile(keyFile, true)
	if err != nil {
		return nil, err
	}
	chain, err := parseChain(certPEM)
	if err != nil {
		return nil, &FileError{Path: certFile, Err: err}
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, &FileError{Path: certFile, Err: err}
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, &FileError{Path: keyFile, Key: true, Err: err}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, &FileError{Path: keyFile, Key: true,
			Err: fmt.Errorf("not the private key of the certificate in %s", certFile)}
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// parseChain returns the DER of every CERTIFICATE block in b, each
// checked to parse.
func parseChain(b []byte) ([][]byte, error) {
	var chain [][]byte
	var other string
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			other = block.Type
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(chain)+1, err)
		}
		chain = append(chain, block.Bytes)
	}
	switch {
	case len(chain) > 0:
		return chain, nil
	case isKeyBlock(other):
		return nil, errors.New("holds a private key, not a certificate (are cert and key swapped?)")
	case other != "":
		return nil, fmt.Errorf("no PEM CERTIFICATE block, only %s", other)
	}
	return nil, errors.New("no PEM CERTIFICATE block")
}

func isKeyBlock(t string) bool {
	switch t {
	case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
		return true
	}
	return false
}

// parseKey returns the private key of the first key block in b.
func parseKey(b []byte) (crypto.Signer, error) {
	sawCert := false
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		var key any
		var err error
		switch block.Type {
		case "CERTIFICATE":
			sawCert = true
			continue
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("an encrypted key; sluice needs it decrypted (openssl pkey -in KEY -out KEY.plain)")
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			if _, enc := block.Headers["Proc-Type"]; enc {
				return nil, errors.New("an encrypted key; sluice needs it decrypted (openssl pkey -in KEY -out KEY.plain)")
			}
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		switch k := key.(type) {
		case *ecdsa.PrivateKey, *rsa.PrivateKey, ed25519.PrivateKey:
			return k.(crypto.Signer), nil
		}
		return nil, fmt.Errorf("a %T, which TLS cannot use", key)
	}
	if sawCert {
		return nil, errors.New("holds a certificate, not a private key (are cert and key swapped?)")
	}
	return nil, errors.New("no PEM private key block")
}

// LoadCAs reads the CA certificates that client certificates are checked
// against (PEM CERTIFICATE blocks). A file that cannot be read, or holds no
// certificate, or one that does not parse, is a *FileError.
func LoadCAs(file string) (*x509.CertPool, error) {
	b, err := readFile(file, false)
	if err != nil {
		return nil, err
	}
	chain, err := parseChain(b)
	if err != nil {
		return nil, &FileError{Path: file, Err: err}
	}
	pool := x509.NewCertPool()
	for _, der := range chain {
		c, _ := x509.ParseCertificate(der) // parsed once already
		pool.AddCert(c)
	}
	return pool, nil
}
