package observe

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestIdempotencyMetrics(t *testing.T) {
	m := New(nil)
	m.WatchIdempotency(func(report func(IdempotencyState)) {
		report(IdempotencyState{Route: "*/api/", Results: []IdempotencyResult{{"claimed", 7}, {"replayed", 3}, {"store_error", 1}}})
	})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	out := rec.Body.String()
	for _, want := range []string{
		`sluice_idempotency_total{result="claimed",route="*/api/"} 7`,
		`sluice_idempotency_total{result="replayed",route="*/api/"} 3`,
		`sluice_idempotency_total{result="store_error",route="*/api/"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
