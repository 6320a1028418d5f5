package cache

import (
	"time"
)

// httpDate is the IMF-fixdate layout (RFC 9110 §5.6.7), the one sluice
// sends.
const httpDate = "Mon, 02 Jan 2006 15:04:05 GMT"

// dateLayouts are the HTTP-date forms a recipient must accept (RFC 9110
// §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms.
var dateLayouts = [...]string{httpDate, "Monday, 02-Jan-06 15:04:05 GMT", "Mon Jan _2 15:04:05 2006"}

// parseDate parses an HTTP-date. An RFC 850 date's two-digit year is read
// as the nearest year not more than 50 years ahead (RFC 9110 §5.6.7).
func parseDate(v []byte) (time.Time, bool) {
	if len(v) < 20 || len(v) > 40 {
		return time.Time{}, false
	}
	s := string(v)
	for i, l := range dateLayouts {
		t, err := time.Parse(l, s)
		if err != nil {
			continue
		}
		if i == 1 && t.After(time.Now().AddDate(50, 0, 0)) {
			t = t.AddDate(-100, 0, 0)
		}
		return t, true
	}
	return time.Time{}, false
}

// appendDate appends t as an IMF-fixdate.
func appendDate(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, httpDate)
}
