package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

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
