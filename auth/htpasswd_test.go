package auth

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// hash returns a bcrypt hash of password at cost 4 (the fastest), with
// the $2y$ prefix htpasswd -B writes.
func hash(t testing.TB, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return "$2y$" + string(h[4:])
}

func TestParseHtpasswd(t *testing.T) {
	file := "# staff\n\nalice:" + hash(t, "wonderland") + "\r\nbob:" + hash(t, "builder") + "\n  \n"
	u, err := ParseHtpasswd(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if u.Len() != 2 {
		t.Errorf("%d users", u.Len())
	}
	for _, tt := range []struct {
		user, password string
		ok             bool
	}{
		{"alice", "wonderland", true},
		{"alice", "wonderland", true}, // remembered
		{"bob", "builder", true},
		{"alice", "builder", false},
		{"alice", "", false},
		{"carol", "wonderland", false},
		{"", "", false},
		{"Alice", "wonderland", false},
	} {
		if got := u.Check([]byte(tt.user), []byte(tt.password)); got != tt.ok {
			t.Errorf("Check(%q, %q) = %v, want %v", tt.user, tt.password, got, tt.ok)
		}
	}
}

func TestParseHtpasswdProblems(t *testing.T) {
	good := hash(t, "x")
	tests := []struct {
		file string
		line int
		msg  string
	}{
		{"alice\n", 1, `line 1: not "user:hash"`},
		{"# c\n:" + good + "\n", 2, "no user name"},
		{"alice:" + good + "\nalice:" + good + "\n", 2, `user "alice": given twice (first at line 1)`},
		{"alice:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\n", 1, `user "alice": an Apache MD5 hash ($apr1$, htpasswd -m, its default before 2.4); only bcrypt hashes are accepted (htpasswd -B)`},
		{"a:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", 1, "a SHA-1 hash ({SHA}, htpasswd -s)"},
		{"a:$1$abc$def\n", 1, "MD5-crypt"},
		{"a:$6$abc$def\n", 1, "SHA-crypt"},
		{"a:$5$abc$def\n", 1, "SHA-crypt"},
		{"a:rl0J3Ezf3K3.E\n", 1, "a DES crypt hash (htpasswd -d)"},
		{"a:secret\n", 1, "not a hash sluice knows (plain text, htpasswd -p?)"},
		{"a:\n", 1, "no hash after the colon"},
		{"a:$argon2id$v=19$m=65536,t=3,p=4$c2FsdA$aGFzaA\n", 1, "argon2"},
		{"a:$2x$" + good[4:] + "\n", 1, "broken crypt_blowfish"},
		{"a:$2y$10$short\n", 1, "not a well-formed bcrypt hash"},
		{"a:" + good + "x\n", 1, "not a well-formed bcrypt hash"},
		{"a:$2y$15$" + good[7:] + "\n", 1, "bcrypt cost 15: at most 14"},
		{"a:$2y$03$" + good[7:] + "\n", 1, "not a well-formed bcrypt hash"},
		{strings.Repeat("a", 256) + ":" + good + "\n", 1, "a user name of 256 bytes; at most 255"},
		{"a\x01b:" + good + "\n", 1, "control character"},
		{"# only comments\n\n", 0, "no users"},
		{"a:" + strings.Repeat("x", 5000) + "\n", 0, "a line longer than 4096 bytes"},
	}
	for _, tt := range tests {
		_, err := ParseHtpasswd(strings.NewReader(tt.file))
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%.40q: %v, want ...%s...", tt.file, err, tt.msg)
			continue
		}
		var le *LineError
		if errors.As(err, &le) != (tt.line > 0) || (le != nil && le.Line != tt.line) {
			t.Errorf("%.40q: %#v, want line %d", tt.file, err, tt.line)
		}
	}
}

// TestUnknownUserChecksAHash checks what keeps refusals from telling
// which users exist: a user the file does not list costs a bcrypt check
// at the file's highest cost, as a listed user with a wrong password does.
func TestUnknownUserChecksAHash(t *testing.T) {
	h5, err := bcrypt.GenerateFromPassword([]byte("pw"), 5)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ParseHtpasswd(strings.NewReader("a:" + hash(t, "pw") + "\nb:" + string(h5) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := bcrypt.Cost(u.dummy); err != nil || c != 5 {
		t.Errorf("the hash for unknown users has cost %d, %v; want the file's highest, 5", c, err)
	}
	var calls []string
	defer func(f func([]byte, []byte) error) { compare = f }(compare)
	compare = func(h, pw []byte) error {
		calls = append(calls, string(h))
		return bcrypt.CompareHashAndPassword(h, pw)
	}
	if u.Check([]byte("nobody"), []byte("pw")) || len(calls) != 1 || calls[0] != string(u.dummy) {
		t.Errorf("an unknown user: %d checks %v, want one against the dummy hash", len(calls), calls)
	}
	calls = nil
	if u.Check([]byte("a"), []byte("wrong")) || len(calls) != 1 {
		t.Errorf("a wrong password: %d checks", len(calls))
	}
	calls = nil
	u.Check([]byte("a"), []byte("pw"))
	u.Check([]byte("a"), []byte("pw"))
	if len(calls) != 1 {
		t.Errorf("the right password twice: %d checks, want 1 (then remembered)", len(calls))
	}
	// A wrong password is never remembered, and a remembered one is
	// remembered only with its user.
	calls = nil
	if u.Check([]byte("b"), []byte("pw")) != true || u.Check([]byte("a"), []byte("pwx")) || len(calls) != 2 {
		t.Errorf("%d checks, want 2", len(calls))
	}
}

// TestHtpasswdTool checks the file Apache's htpasswd -B writes.
func TestHtpasswdTool(t *testing.T) {
	path, err := exec.LookPath("htpasswd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("htpasswd is required when CI=true: %v", err)
		}
		t.Skipf("htpasswd is missing (Debian: apt-get install apache2-utils); skipping: %v", err)
	}
	file := filepath.Join(t.TempDir(), "users")
	for i, args := range [][]string{{"-cbB", file, "alice", "wonder land"}, {"-bB", "-C", "6", file, "bob", "bücher"}} {
		if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
			t.Fatalf("htpasswd %d: %v: %s", i, err, out)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, err := ParseHtpasswd(f)
	if err != nil {
		t.Fatal(err)
	}
	if !u.Check([]byte("alice"), []byte("wonder land")) || !u.Check([]byte("bob"), []byte("bücher")) || u.Check([]byte("bob"), []byte("bucher")) {
		t.Error("htpasswd's users do not check out")
	}
	out, err := exec.Command(path, "-nbm", "carol", "x").Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseHtpasswd(strings.NewReader(string(out))); err == nil || !strings.Contains(err.Error(), "Apache MD5") {
		t.Errorf("htpasswd -m: %v", err)
	}
}

// FuzzParseHtpasswd checks that ParseHtpasswd never panics, and that a
// file it accepts has users whose hashes are bcrypt's at an accepted cost.
func FuzzParseHtpasswd(f *testing.F) {
	good := "$2y$04$" + strings.Repeat("a", 53)
	for _, s := range []string{"alice:" + good + "\n", "a:" + good + "\r\n#x\n\nb:" + good, "a:$apr1$x$y", "a", ":", "a:{SHA}x", "a:" + good + "\na:" + good, "\x00:" + good} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		u, err := ParseHtpasswd(strings.NewReader(file))
		if err != nil {
			if u != nil {
				t.Fatal("a Users with an error")
			}
			return
		}
		if u.Len() == 0 {
			t.Fatal("no users, and no error")
		}
		for name, h := range u.hashes {
			if name == "" || strings.Contains(name, ":") {
				t.Fatalf("user %q", name)
			}
			if c, err := bcrypt.Cost(h); err != nil || c > MaxCost || len(h) != 60 {
				t.Fatalf("user %q: hash %q: cost %d, %v", name, h, c, err)
			}
		}
	})
}
