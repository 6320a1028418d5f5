// Package auth holds the route phases that authenticate requests before
// they go upstream: Basic, HTTP basic authentication against an htpasswd
// file of bcrypt hashes, and Forward, which asks an authentication service
// about each request (nginx's auth_request, Traefik's ForwardAuth).
package auth

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// MaxCost is the highest bcrypt cost Users accepts: each step doubles the
// time a check takes, and 14 already takes most of a second of a CPU for
// every request whose credentials are not cached.
const MaxCost = 14

// maxUserLen bounds a user name, as Apache's htpasswd does.
const maxUserLen = 255

// maxLine bounds a line of an htpasswd file.
const maxLine = 4 << 10

// LineError is a line of an htpasswd file that cannot be used.
type LineError struct {
	Line int    // 1-based
	User string // the user the line is for, when it names one
	Msg  string
}

func (e *LineError) Error() string {
	if e.User != "" {
		return fmt.Sprintf("line %d: user %q: %s", e.Line, e.User, e.Msg)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// Users are the users of an htpasswd file, each with a bcrypt hash of its
// password. It is made by ParseHtpasswd, read-only, and safe for
// concurrent use.
type Users struct {
	hashes map[string][]byte
	// dummy is a hash of a random password at the highest cost of the
	// file, checked against when the user is unknown, so that a wrong
	// user takes as long to refuse as a wrong password.
	dummy []byte

	// The credentials that passed, as HMACs under a key of this Users's
	// own, so that a browser sending them with each request costs one
	// bcrypt check, not one per request.
	key    [32]byte
	mu     sync.Mutex
	passed map[[sha256.Size]byte]struct{}
}

// compare is bcrypt's check; tests count its calls.
var compare = bcrypt.CompareHashAndPassword

// maxPassed bounds the credentials Users remembers; it forgets them all
// when full.
const maxPassed = 4096

// ParseHtpasswd reads an htpasswd file: one "user:hash" per line, as
// Apache's htpasswd -B writes it, blank lines and lines starting with "#"
// ignored, a final CR on a line (a file written on Windows) too. Every
// hash must be bcrypt ($2a$, $2b$ or $2y$, cost 4 to MaxCost): a line with
// another kind of hash (Apache's MD5, SHA-1, crypt, plain text) is a
// *LineError saying which, and so is a user given twice, an empty user or
// one longer than 255 bytes. The first problem found is returned.
func ParseHtpasswd(r io.Reader) (*Users, error) {
	u := &Users{hashes: map[string][]byte{}, passed: map[[sha256.Size]byte]struct{}{}}
	first := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxLine)
	cost := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' {
			continue
		}
		user, hash, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, &LineError{Line: n, Msg: `not "user:hash"`}
		}
		switch {
		case len(user) == 0:
			return nil, &LineError{Line: n, Msg: "no user name before the colon"}
		case len(user) > maxUserLen:
			return nil, &LineError{Line: n, Msg: fmt.Sprintf("a user name of %d bytes; at most %d", len(user), maxUserLen)}
		case bytes.ContainsFunc(user, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return nil, &LineError{Line: n, Msg: "a control character in the user name"}
		}
		name := string(user)
		if f, dup := first[name]; dup {
			return nil, &LineError{Line: n, User: name, Msg: fmt.Sprintf("given twice (first at line %d)", f)}
		}
		c, err := checkHash(hash)
		if err != nil {
			return nil, &LineError{Line: n, User: name, Msg: err.Error()}
		}
		first[name] = n
		u.hashes[name] = bytes.Clone(hash)
		cost = max(cost, c)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		return nil, err
	}
	if len(u.hashes) == 0 {
		return nil, errors.New("no users")
	}
	var pw [16]byte
	rand.Read(pw[:])
	rand.Read(u.key[:])
	dummy, err := bcrypt.GenerateFromPassword(pw[:], cost)
	if err != nil {
		return nil, err
	}
	u.dummy = dummy
	return u, nil
}

// checkHash checks that h is a bcrypt hash sluice can check against, and
// returns its cost; otherwise it says what h is, if it can tell.
func checkHash(h []byte) (int, error) {
	const only = "only bcrypt hashes are accepted (htpasswd -B)"
	switch {
	case bytes.HasPrefix(h, []byte("$2a$")), bytes.HasPrefix(h, []byte("$2b$")), bytes.HasPrefix(h, []byte("$2y$")):
		cost, err := bcrypt.Cost(h)
		if err != nil || len(h) != 60 || !bcryptTail(h[7:]) {
			return 0, fmt.Errorf("not a well-formed bcrypt hash (60 characters, $2y$CC$ then 53 of ./A-Za-z0-9)")
		}
		if cost > MaxCost {
			return 0, fmt.Errorf("bcrypt cost %d: at most %d (each step doubles the time of a check, and %d already takes most of a second); make it again with htpasswd -B -C 10", cost, MaxCost, MaxCost)
		}
		return cost, nil
	case bytes.HasPrefix(h, []byte("$2x$")):
		return 0, errors.New("a $2x$ hash is from the broken crypt_blowfish of before 2011; " + only)
	case bytes.HasPrefix(h, []byte("$apr1$")):
		return 0, errors.New("an Apache MD5 hash ($apr1$, htpasswd -m, its default before 2.4); " + only)
	case bytes.HasPrefix(h, []byte("$1$")):
		return 0, errors.New("an MD5-crypt hash ($1$); " + only)
	case bytes.HasPrefix(h, []byte("$5$")), bytes.HasPrefix(h, []byte("$6$")):
		return 0, errors.New("a SHA-crypt hash ($5$ or $6$, htpasswd -2 or -5); " + only)
	case bytes.HasPrefix(h, []byte("{SHA}")):
		return 0, errors.New("a SHA-1 hash ({SHA}, htpasswd -s); " + only)
	case bytes.HasPrefix(h, []byte("$argon2")), bytes.HasPrefix(h, []byte("$scrypt$")), bytes.HasPrefix(h, []byte("$7$")):
		return 0, errors.New("an argon2 or scrypt hash; " + only)
	case len(h) == 13 && cryptTail(h):
		return 0, errors.New("a DES crypt hash (htpasswd -d), which holds 8 characters of a password; " + only)
	case len(h) == 0:
		return 0, errors.New("no hash after the colon; " + only)
	}
	return 0, errors.New("not a hash sluice knows (plain text, htpasswd -p?); " + only)
}

// bcryptTail reports whether s, after "$2y$CC$", is bcrypt's 53
// characters: salt and hash, in bcrypt's base64 alphabet.
func bcryptTail(s []byte) bool {
	if len(s) != 53 {
		return false
	}
	return cryptTail(s)
}

// cryptTail reports whether s is made of crypt's base64 alphabet.
func cryptTail(s []byte) bool {
	for _, c := range s {
		if !(c == '.' || c == '/' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// Len returns the number of users.
func (u *Users) Len() int { return len(u.hashes) }

// Check reports whether password is user's. A user the file does not
// list takes a bcrypt check all the same (against a hash at the file's
// highest cost), so that how long a refusal takes does not tell whether
// the user exists. Credentials that passed are remembered (as keyed
// hashes, never in the clear), so that a client sending them with every
// request pays for one bcrypt check.
func (u *Users) Check(user, password []byte) bool {
	mac := hmac.New(sha256.New, u.key[:])
	mac.Write([]byte(strconv.Itoa(len(user))))
	mac.Write([]byte{':'})
	mac.Write(user)
	mac.Write(password)
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	u.mu.Lock()
	_, ok := u.passed[sum]
	u.mu.Unlock()
	if ok {
		return true
	}
	hash, known := u.hashes[string(user)]
	if !known {
		hash = u.dummy
	}
	if compare(hash, password) != nil || !known {
		return false
	}
	u.mu.Lock()
	if len(u.passed) >= maxPassed {
		clear(u.passed)
	}
	u.passed[sum] = struct{}{}
	u.mu.Unlock()
	return true
}
