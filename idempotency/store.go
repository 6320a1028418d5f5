package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"time"
)

// State is what a store holds for a key.
type State uint8

const (
	// StateNone: nothing; the key is free.
	StateNone State = iota
	// StateInFlight: a claim whose holder is forwarding the request and
	// renewing its lease.
	StateInFlight
	// StateAbandoned: a claim whose lease ran out without its holder
	// ending it (the holder died, or stopped renewing): the request may
	// have been processed, and nobody will say.
	StateAbandoned
	// StateKept: the request's answer, to replay.
	StateKept
	// StateUnknown: the request may have been processed and got no
	// answer (its holder said so: Claim.Unknown).
	StateUnknown
	// StateNotKept: the request was answered, with an answer larger than
	// the layer keeps (or than a full local store had room for).
	StateNotKept
)

var stateNames = [...]string{"none", "in_flight", "abandoned", "kept", "unknown", "not_kept"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// Token identifies one claim: 64 random bits the process draws once,
// then the count of claims it has made, so that claims made by different
// sluice instances, or by one, never share one. (Drawing 128 random bits
// for each claim took 70 ns, more than the rest of making the claim.)
type Token [16]byte

// tokenBase starts the process's tokens; tokenCount counts them.
var (
	tokenBase = func() (b [8]byte) {
		rand.Read(b[:]) // never fails (crypto/rand, Go 1.24)
		return b
	}()
	tokenCount atomic.Uint64
)

func newToken() Token {
	var t Token
	copy(t[:8], tokenBase[:])
	binary.BigEndian.PutUint64(t[8:], tokenCount.Add(1))
	return t
}

// String returns the token in hex.
func (t Token) String() string { return hex.EncodeToString(t[:]) }

// Terms are a claim's lifetimes.
type Terms struct {
	// Lease is how long a claim lives without its holder renewing it.
	Lease time.Duration
	// TTL is how long a record lives once its claim ended: the kept
	// answer's life. A claimed record lives at least as long as its
	// claim.
	TTL time.Duration
	// Retake claims a key whose record is StateUnknown or
	// StateAbandoned anew (unknown_outcome: forward), instead of
	// reporting it.
	Retake bool
}

// Found is what Store.Begin found for a key, and whether the caller now
// holds its claim.
type Found struct {
	// Claimed says the caller's token now holds the key: the key was
	// free, or (with Terms.Retake) its record was Prior.
	Claimed bool
	// Prior is, with Claimed, what the claim replaced: StateNone, or
	// StateUnknown or StateAbandoned when retaken.
	Prior State
	// State is, without Claimed, the record standing in the way.
	State State
	// Mismatch says, without Claimed, that the record's fingerprint is
	// not the request's: the key was used for another payload.
	Mismatch bool
	// Answer is, with StateKept, the encoded answer (see Answer.Encode).
	Answer []byte
}

// Held is a claim to renew.
type Held struct {
	Key   Key
	Token Token
}

// instant is implemented by stores whose calls never wait for I/O
// (Local): a claim of theirs is ended in the request's own goroutine,
// since there is no round trip to keep the request waiting; with any
// other store, in a goroutine of its own.
type instant interface{ instant() }

// ErrLost is returned when a claim's end is reported after its holder
// lost it: its lease ran out and another request retook the key, or its
// record expired. Nothing was written.
var ErrLost = errors.New("idempotency: the claim was lost (its lease ran out)")

// ErrFull is a Local store's error when it holds as many keys as it may
// and none has expired: the request follows on_store_error.
var ErrFull = errors.New("idempotency: the local store is full")

// Store keeps idempotency records: claims, kept answers and what is known
// of the requests that have neither. Its methods are safe for concurrent
// use; an error says the store could not do what was asked (Redis down
// or too slow, a full local store), and the caller follows
// on_store_error or counts it.
//
// Implementations: Local (this process's memory) and Redis (shared by a
// fleet).
type Store interface {
	// Begin atomically looks key up and, if nothing stands in the way,
	// claims it for token with the request's fingerprint fp: a record
	// in flight, whose claim lives t.Lease unless renewed, and whose
	// record lives at least t.TTL. A record with another fingerprint is
	// reported as a mismatch before anything else.
	Begin(ctx context.Context, key Key, fp Fingerprint, token Token, t Terms) (Found, error)
	// Renew extends the claims in held that their tokens still hold by
	// t.Lease, in one round trip, and reports for each whether it is
	// still held. A claim whose lease ran out but that nobody retook is
	// held again.
	Renew(ctx context.Context, held []Held, t Terms) ([]bool, error)
	// End ends token's claim on key: with StateKept, answer (encoded) is
	// kept for t.TTL; with StateUnknown or StateNotKept, that is kept
	// for t.TTL; with StateNone the record is removed, freeing the key.
	// The claim itself is removed in the same step. It returns the state
	// stored, which a store short of room may lower from StateKept to
	// StateNotKept, or ErrLost when token no longer holds the key.
	End(ctx context.Context, key Key, fp Fingerprint, token Token, s State, answer []byte, t Terms) (State, error)
}
