package admin

import (
	"encoding"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// Redacted replaces a secret's value in /api/config.
const Redacted = "[redacted]"

// secretField matches the names of fields whose values are secrets:
// passwords, tokens, HMAC keys (an ACME EAB's), and anything said to be
// secret or private. A field that holds a path to a key file (a
// certificate's Key) is not a secret; key material is caught by its PEM
// armour, whatever the field (see secretValue).
var secretField = regexp.MustCompile(`(?i)secret|passw|token|hmac|credential|private|apikey|api_key`)

// secretValue reports whether a string is a secret whatever field it is
// in: key material (PEM armour, as an inline key would have), or a URL
// with a password (a redis:// storage's).
func secretValue(s string) bool {
	if strings.Contains(s, "-----BEGIN") {
		return true
	}
	if strings.Contains(s, "://") && strings.Contains(s, "@") {
		if u, err := url.Parse(s); err == nil && u.User != nil {
			_, set := u.User.Password()
			return set
		}
	}
	return false
}

func (a *Server) config(w http.ResponseWriter, r *http.Request) {
	gen := a.generation()
	if gen == nil || gen.Config == nil {
		writeError(w, http.StatusServiceUnavailable, "no config loaded")
		return
	}
	writeJSON(w, http.StatusOK, ConfigView(gen.Config))
}

// ConfigView returns v (a *config.Config) as JSON-ready values, with the
// config file's key names (snake_case of the field names), durations as Go
// durations, file modes in octal (left out when zero), and secrets redacted: the values of fields named as secrets
// are, and so is any string holding PEM armour. Functions, channels and
// values with nothing exported (a logger, a clock) are left out, as are
// the Line fields that only serve error messages.
func ConfigView(v any) any {
	out, _ := view(reflect.ValueOf(v), false, 0)
	return out
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	modeType     = reflect.TypeFor[fs.FileMode]()
	textType     = reflect.TypeFor[encoding.TextMarshaler]()
)

// view converts v; secret says the field holding it is named as a secret.
// It reports false for a value to leave out.
func view(v reflect.Value, secret bool, depth int) (any, bool) {
	if depth > 32 || !v.IsValid() {
		return nil, false
	}
	switch v.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return nil, false
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, true
		}
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String(), true
	}
	if v.Type() == modeType {
		// As chmod and the file have it, 0660; none (a TCP listener's)
		// is left out.
		return fmt.Sprintf("%04o", v.Uint()), v.Uint() != 0
	}
	if v.Type().Implements(textType) && (v.Kind() != reflect.Pointer || !v.IsNil()) {
		if secret {
			return Redacted, true
		}
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return nil, false
		}
		return string(b), true
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return view(v.Elem(), secret, depth+1)
	case reflect.String:
		s := v.String()
		if s != "" && (secret || secretValue(s)) {
			return Redacted, true
		}
		return s, true
	case reflect.Bool:
		return v.Bool(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if secret {
			return Redacted, true
		}
		return v.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if secret {
			return Redacted, true
		}
		return v.Uint(), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			if v.Len() > 0 && secret {
				return Redacted, true
			}
			if secretValue(string(v.Bytes())) {
				return Redacted, true
			}
			return fmt.Sprintf("%d bytes", v.Len()), true
		}
		list := make([]any, 0, v.Len())
		for i := range v.Len() {
			if e, ok := view(v.Index(i), secret, depth+1); ok {
				list = append(list, e)
			}
		}
		return list, true
	case reflect.Map:
		m := make(map[string]any, v.Len())
		it := v.MapRange()
		for it.Next() {
			k := fmt.Sprint(it.Key().Interface())
			if e, ok := view(it.Value(), secret || secretField.MatchString(k), depth+1); ok {
				m[k] = e
			}
		}
		return m, true
	case reflect.Struct:
		t := v.Type()
		m := map[string]any{}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Name == "Line" {
				continue
			}
			if e, ok := view(v.Field(i), secret || secretField.MatchString(f.Name), depth+1); ok {
				m[snake(f.Name)] = e
			}
		}
		if len(m) == 0 && t.NumField() > 0 {
			return nil, false // nothing exported: a logger, a clock
		}
		return m, true
	}
	return nil, false
}

// snake turns a Go field name into the config file's key style:
// MaxIdleUpstreamConns is max_idle_upstream_conns, HTTPSPort https_port.
func snake(name string) string {
	rs := []rune(name)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
