package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-proxy/sluice/auth"
)

// This file holds the authentication of a route's requests: basic_auth
// and forward_auth.

// routeBasicAuth walks a route's "basic_auth" mapping and reads its file.
func (d *decoder) routeBasicAuth(n *yaml.Node, path string) *BasicAuth {
	ba := &BasicAuth{Line: n.Line, Realm: auth.DefaultRealm}
	var fileNode *yaml.Node
	present := d.mapping(n, path, []field{
		{"file", func(n *yaml.Node, path string) {
			fileNode = n
			d.str(&ba.File, checkNotEmpty)(n, path)
		}},
		{"realm", d.str(&ba.Realm, func(s string) (string, string) {
			if s == "" {
				return "", "must not be empty; leave it out for " + auth.DefaultRealm
			}
			if err := auth.CheckRealm(s); err != nil {
				return "", trimPhase(err.Error(), "basic_auth: ")
			}
			return s, ""
		})},
		{"forward_authorization", d.boolean(&ba.ForwardAuthorization)},
	})
	if n.Kind == yaml.MappingNode {
		d.required(n, path, present, "file")
	}
	if ba.File == "" {
		return ba
	}
	if !filepath.IsAbs(ba.File) {
		ba.File = filepath.Join(filepath.Dir(d.file), ba.File)
	}
	fpath := join(path, "file")
	f, err := os.Open(ba.File)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.addf(fileNode, fpath, "file %s does not exist (a relative path is relative to the config file's directory)", ba.File)
		return ba
	case err != nil:
		d.addf(fileNode, fpath, "%v", err)
		return ba
	}
	defer f.Close()
	users, err := auth.ParseHtpasswd(f)
	if err != nil {
		d.addf(fileNode, fpath, "%s: %v", ba.File, err)
		return ba
	}
	ba.users = users
	return ba
}

// routeForwardAuth walks a route's "forward_auth" mapping.
func (d *decoder) routeForwardAuth(n *yaml.Node, path string) *ForwardAuth {
	fa := &ForwardAuth{Line: n.Line, Path: "/", MaxBody: auth.DefaultForwardMaxBody,
		Timeouts: ForwardAuthTimeouts{Connect: auth.DefaultForwardConnectTimeout, Response: auth.DefaultForwardResponseTimeout}}
	names := func(dst *[]string) func(*yaml.Node, string) {
		return func(n *yaml.Node, path string) {
			if n.Kind == yaml.ScalarNode && !isNull(n) {
				d.addf(n, path, "must be a list of field names, such as [%s]", n.Value)
				return
			}
			list := []string{}
			d.sequence(n, path, func(_ int, n *yaml.Node, path string) {
				var name string
				if d.str(&name, checkFieldName)(n, path); name != "" {
					list = append(list, name)
				}
			})
			*dst = list
		}
	}
	present := d.mapping(n, path, []field{
		{"address", func(n *yaml.Node, path string) { d.address(&fa.Address, n, path, false) }},
		{"path", d.str(&fa.Path, func(s string) (string, string) {
			if !strings.HasPrefix(s, "/") || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
				return "", "must start with / and hold only visible ASCII, no #"
			}
			return s, ""
		})},
		{"host", d.str(&fa.Host, checkCheckHost)},
		{"request_headers", names(&fa.RequestHeaders)},
		{"response_headers", names(&fa.ResponseHeaders)},
		{"timeouts", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"connect", d.duration(&fa.Timeouts.Connect, true)},
				{"response", d.duration(&fa.Timeouts.Response, true)},
			})
		}},
		{"max_body", d.size(&fa.MaxBody, 1, 16<<20)},
	})
	if n.Kind == yaml.MappingNode {
		d.required(n, path, present, "address")
	}
	if fa.Address != "" {
		if _, err := forwardAuthPhase(fa); err != nil {
			d.addf(n, path, "%s", trimPhase(err.Error(), "forward_auth: "))
		}
	}
	return fa
}

// forwardAuthPhase makes the phase asking as fa says.
func forwardAuthPhase(fa *ForwardAuth) (*auth.Forward, error) {
	return auth.NewForward(auth.ForwardOptions{
		Addr: fa.Address, Path: fa.Path, Host: fa.Host,
		RequestHeaders: fa.RequestHeaders, ResponseHeaders: fa.ResponseHeaders,
		ConnectTimeout: fa.Timeouts.Connect, ResponseTimeout: fa.Timeouts.Response,
		MaxBody: fa.MaxBody,
	})
}
