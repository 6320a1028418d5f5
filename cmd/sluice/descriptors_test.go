package main

import (
	"fmt"
	"testing"

	"github.com/sluice-proxy/sluice/config"
)

func TestDescriptorsNeeded(t *testing.T) {
	file := func(limits, pool string) string {
		return fmt.Sprintf(`listen: [{address: 127.0.0.1:0}]
limits: {%s}
routes: [{upstream: a}]
upstreams:
  a:
    servers: [{address: 127.0.0.1:1}, {address: 127.0.0.1:2}, {address: 127.0.0.1:3}]
    pool: {%s}
  b:
    servers: [{address: 127.0.0.1:4}]
`, limits, pool)
	}
	tests := []struct {
		name          string
		limits, pool  string
		need, idleMax int
	}{
		// Four servers of 32 idle connections each (the default).
		{"defaults", "", "", 64 + 2*128, 128},
		{"per server", "", "max_idle: 100", 64 + 2*332, 332},
		{"global cap", "max_idle_upstream_conns: 200", "max_idle: 100", 64 + 2*200, 200},
		{"no pool", "max_idle_upstream_conns: 0", "", 64, 0},
	}
	for _, tt := range tests {
		cfg, err := config.Parse("t.yaml", []byte(file(tt.limits, tt.pool)))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if need, idle := descriptorsNeeded(cfg); need != tt.need || idle != tt.idleMax {
			t.Errorf("%s: descriptorsNeeded = %d, %d; want %d, %d", tt.name, need, idle, tt.need, tt.idleMax)
		}
	}
}
