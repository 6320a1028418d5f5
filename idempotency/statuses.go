package idempotency

import (
	"errors"
	"strconv"
	"strings"
)

// StatusSet is a set of response statuses, 100 to 599. The zero value is
// empty.
type StatusSet struct {
	bits [8]uint64 // bit s-100
}

// Add adds status s; one outside 100..599 is ignored.
func (s *StatusSet) Add(status int) {
	if status >= 100 && status <= 599 {
		i := status - 100
		s.bits[i/64] |= 1 << (i % 64)
	}
}

// Has reports whether status is in the set.
func (s *StatusSet) Has(status int) bool {
	if status < 100 || status > 599 {
		return false
	}
	i := status - 100
	return s.bits[i/64]&(1<<(i%64)) != 0
}

// DefaultRelease returns the statuses whose answers are not kept by
// default, releasing their key so that a retry goes through: 408 Request
// Timeout, 425 Too Early, 429 Too Many Requests and every 5xx. Each says
// the request was not (or may not have been) done and may be tried
// again, and a kept one would be replayed for the whole ttl (a 503
// replayed for a day).
func DefaultRelease() *StatusSet {
	s, _ := ParseStatuses([]string{"408", "425", "429", "5xx"})
	return s
}

// ParseStatuses reads a list of statuses as the config writes it: each a
// status (100..599) or a class ("1xx" to "5xx", any case).
func ParseStatuses(list []string) (*StatusSet, error) {
	s := new(StatusSet)
	for _, v := range list {
		if len(v) == 3 && '1' <= v[0] && v[0] <= '5' && strings.EqualFold(v[1:], "xx") {
			base := int(v[0]-'0') * 100
			for c := base; c < base+100; c++ {
				s.Add(c)
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 100 || n > 599 || len(v) != 3 {
			return nil, errors.New("want a status 100..599 or a class 1xx..5xx, not " + strconv.Quote(v))
		}
		s.Add(n)
	}
	return s, nil
}
