package h2

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/sluice-proxy/sluice/internal/gotool"
)

// TestH2Spec runs the h2spec conformance suite (h2c, prior knowledge),
// the module tool (go tool h2spec), against a Conn: every case must pass.
// Extra flags for h2spec can be given in H2SPEC_FLAGS (e.g. "-S" for strict
// mode, or a test section such as "http2/5.1"), and H2SPEC_REPORT names a
// JUnit report to write.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes a few seconds")
	}
	bin := gotool.Binary(t, "h2spec")
	ts := newTestServer(t, &Settings{IdleTimeout: 30 * time.Second}, func(st *Stream) {
		io.Copy(io.Discard, st)
		st.WriteResponse([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "text/plain"}}, []byte("hello h2spec\n"), true)
	})
	host, port, _ := strings.Cut(ts.addr(), ":")
	args := []string{"-h", host, "-p", port, "-o", "2", "-j", os.Getenv("H2SPEC_REPORT")}
	if args[len(args)-1] == "" {
		args = args[:len(args)-2]
	}
	args = append(args, strings.Fields(os.Getenv("H2SPEC_FLAGS"))...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	t.Logf("h2spec %s\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("h2spec: %v", err)
	}
}
