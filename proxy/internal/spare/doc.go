// Package spare keeps a file descriptor in reserve for the moment a
// process has no other, so that the clients waiting in a listener's queue
// then get an answer (a 503) rather than their own timeout (Linux; a
// Spare does nothing elsewhere).
package spare
