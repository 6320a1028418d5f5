package acme

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/libdns/libdns"
	"github.com/miekg/dns"
)

// HookTimeout bounds each run of a DNS's Exec hook.
const HookTimeout = 2 * time.Minute

// hook adds and removes TXT records by running the operator's program:
// the libdns provider certmagic's DNS-01 solver calls when DNS.Exec is set.
type hook struct{ argv []string }

func (h *hook) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, h.each(ctx, "present", zone, recs)
}

func (h *hook) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	return recs, h.each(ctx, "cleanup", zone, recs)
}

// each runs the hook for every record of recs, TXT records of zone.
func (h *hook) each(ctx context.Context, action, zone string, recs []libdns.Record) error {
	for _, rec := range recs {
		rr := rec.RR()
		if rr.Type != "TXT" {
			return fmt.Errorf("dns hook: a %s record; only TXT records are written", rr.Type)
		}
		if err := h.run(ctx, action, dns.Fqdn(libdns.AbsoluteName(rr.Name, dns.Fqdn(zone))), rr.Data); err != nil {
			return err
		}
	}
	return nil
}

// hookOutput is how much of a failed hook's output its error keeps.
const hookOutput = 1 << 10

// run runs the hook once: its program with the arguments given, then
// action, fqdn and value, no shell between.
func (h *hook) run(ctx context.Context, action, fqdn, value string) error {
	ctx, cancel := context.WithTimeout(ctx, HookTimeout)
	defer cancel()
	args := append(append([]string(nil), h.argv[1:]...), action, fqdn, value)
	cmd := exec.CommandContext(ctx, h.argv[0], args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second // a grandchild holding the output does not hold this
	err := cmd.Run()
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w (timed out)", err)
	}
	text := strings.TrimSpace(out.String())
	if len(text) > hookOutput {
		text = "…" + text[len(text)-hookOutput:]
	}
	if text != "" {
		return fmt.Errorf("dns hook %s %s %s: %v: %s", h.argv[0], action, fqdn, err, text)
	}
	return fmt.Errorf("dns hook %s %s %s: %v", h.argv[0], action, fqdn, err)
}
