package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-proxy/sluice/config"
)

// TestToken: with a token, every request but /live and /ready carries it,
// as a bearer token or as a basic authentication password; without one,
// none needs to.
func TestToken(t *testing.T) {
	const token = "0123456789abcdef0123"
	tests := []struct {
		name   string
		token  string // set on the server
		method string
		path   string
		header map[string]string
		basic  [2]string // user and password, when set
		want   int
	}{
		{"no token asked", "", "GET", "/api/upstreams", nil, [2]string{}, 200},
		{"none given", token, "GET", "/api/upstreams", nil, [2]string{}, 401},
		{"live needs none", token, "GET", "/live", nil, [2]string{}, 200},
		{"ready needs none", token, "GET", "/ready", nil, [2]string{}, 503},
		{"bearer", token, "GET", "/api/upstreams", map[string]string{"Authorization": "Bearer " + token}, [2]string{}, 200},
		{"bearer, any case", token, "GET", "/status", map[string]string{"Authorization": "bearer " + token}, [2]string{}, 200},
		{"wrong bearer", token, "GET", "/api/upstreams", map[string]string{"Authorization": "Bearer " + token + "x"}, [2]string{}, 401},
		{"basic, any user", token, "GET", "/status", nil, [2]string{"ops", token}, 200},
		{"basic, wrong password", token, "GET", "/status", nil, [2]string{"ops", "guess"}, 401},
		{"drain with it", token, "POST", "/api/upstreams/web/servers/127.0.0.1:9001/drain",
			map[string]string{"Authorization": "Bearer " + token}, [2]string{}, 200},
		{"drain without it", token, "POST", "/api/upstreams/web/servers/127.0.0.1:9001/drain", nil, [2]string{}, 401},
		{"drain from another site", "", "POST", "/api/upstreams/web/servers/127.0.0.1:9001/drain",
			map[string]string{"Sec-Fetch-Site": "cross-site"}, [2]string{}, 403},
		{"drain from another site, with the credentials", token, "POST", "/api/upstreams/web/servers/127.0.0.1:9001/drain",
			map[string]string{"Sec-Fetch-Site": "cross-site"}, [2]string{"ops", token}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := testGeneration()
			a := &Server{Generation: func() *config.Generation { return g }}
			a.SetToken(tt.token)
			r := httptest.NewRequest(tt.method, tt.path, nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			if tt.basic[0] != "" {
				r.SetBasicAuth(tt.basic[0], tt.basic[1])
			}
			rec := httptest.NewRecorder()
			a.Handler().ServeHTTP(rec, r)
			if rec.Code != tt.want {
				t.Errorf("%s %s: %d, want %d (%s)", tt.method, tt.path, rec.Code, tt.want, rec.Body)
			}
			if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate: a browser would not ask for the token")
			}
		})
	}
}
