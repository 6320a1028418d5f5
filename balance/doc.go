// Package balance chooses the upstream server for each try of a request and
// keeps track of which servers are healthy.
//
// # Model
//
// A Group holds the servers of one upstream. Before every try of a request,
// the first and each retry, the proxy calls Pick with a Request saying which
// servers this request already failed on (Tries) and, for the Hash policy,
// the request's hash key. Pick works in two stages:
//
//  1. Filters, the same for every policy (Group.Pick lists them): drop
//     servers this request already failed on, drop unavailable servers
//     (down, ejected, failing active checks), and use backups only when no
//     primary is left. When the request has failed on every available
//     server, one of those is tried again (a single-server upstream retries
//     its server, as nginx does). When no server is available at all, the
//     group enters panic mode and picks among all its primaries as if they
//     were healthy (Envoy's panic threshold, at 0%): a wrong health verdict
//     on every server should cost retries, not a certain 502. The one
//     exception: a server taken out by passive health whose probe is due
//     gets one try past these filters and the policy (see Passive health).
//     Pick fails, with ErrNoServer, only for a group with no server at all.
//  2. The Policy chooses among what is left. Policies are one type each
//     behind a one-method interface, and the group never looks at which
//     policy it has: RoundRobin (nginx's smooth weighted round robin),
//     LeastRequest, P2C (power of two choices over latency and load, the
//     default), Random, First and Hash (a consistent-hashing ring).
//     ParsePolicy maps configuration names to them.
//
// After the try the proxy calls Report with the outcome (a Result). Pick and
// Report pair up: Pick counts the try as outstanding on its server and
// Report releases it, which is the load LeastRequest and P2C see.
//
// # Passive health
//
// Report feeds two rules per server. The nginx rule: MaxFails failures
// within FailTimeout take the server down for FailTimeout. The Envoy
// outlier rule: ConsecutiveFailures failures in a row eject it for
// BaseEjection times the number of its ejections, capped at MaxEjection,
// unless more than MaxEjectedPercent of the group would then be ejected.
// Connection failures, timeouts and invalid responses count as failures,
// and so do the response statuses in Options.Statuses; a success clears the
// consecutive counts. A server taken out by either rule is probed once half
// its time has passed: the first Pick from then on sends it one try,
// whatever the policy, and that try's Report ends the time (a success) or
// starts it over (a failure); Options.NoProbe turns probes off. All time
// comes from Options.Now.
//
// # Active health
//
// With Options.Active, Start runs a check loop per server: an HTTP request
// (read with package h1) or a TCP connect on a connection of its own, at
// jittered intervals. Fall failed checks in a row take the server out; Rise
// passed ones bring it back. Every change of a server's health, whichever
// rule caused it, is logged once to Options.Log and reported to
// Options.OnChange; Server.State describes the current one.
//
// # Drain
//
// Drain takes a configured server out by hand, as HAProxy's admin socket
// does: Pick offers it to no new try, by any rule, while tries in flight
// finish, and Enable puts it back. A reload (Carry) keeps it drained while
// the server is still configured.
//
// # Slow start
//
// With Options.SlowStart, a server that comes back (a down time or ejection
// ends, its checks pass again, DNS or a config reload adds it) ramps its
// effective weight from 10% to 100% over that time. The weighted policies
// use effective weights; Hash does not, since its ring says where keys live.
//
// # DNS
//
// A configured server whose host is a name, not an IP literal, stands for
// one server per address the name resolves to. Start looks each name up at
// once and then every ResolveInterval (sooner again after a failure, which
// keeps the last good addresses); Resolve looks them up on demand. Servers
// whose address stays keep their state; new ones slow-start. A config reload
// builds a new Group and calls Carry with the old one, which carries health
// state and resolved addresses over to servers with the same address.
//
// # Lifetime
//
// NewGroup needs no cleanup until Start; Close stops everything Start began
// and waits for it. Pick, Report and the Server accessors are safe for
// concurrent use at any time.
package balance
