package observe

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRateLimitMetrics(t *testing.T) {
	m := New(nil)
	m.WatchRateLimits(func(report func(RateLimitState)) {
		report(RateLimitState{Route: "api.example.com/v1/", Allowed: 7, Limited: 3, StoreError: 1})
	})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`sluice_rate_limit_total{result="allowed",route="api.example.com/v1/"} 7`,
		`sluice_rate_limit_total{result="limited",route="api.example.com/v1/"} 3`,
		`sluice_rate_limit_total{result="store_error",route="api.example.com/v1/"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
