// Package config loads and validates sluice's YAML config file.
//
// Load and Parse turn a file into a *Config in which every setting
// holds either the value from the file or its documented default, so
// the rest of sluice never checks a setting again. Each field's doc
// comment gives its YAML key, default and accepted range;
// testdata/full.yaml is an annotated example that uses every key. An
// upstream's health section is held in the balancer's own form,
// balance.Options, translated where the file's meaning differs (0 turns a
// passive rule off); Upstream.Health says which key sets which field.
//
// Parsing is strict. Unknown keys (with a suggestion when one is close),
// duplicate keys, values of the wrong type, values out of range and
// routes to undefined upstreams are all errors, and a file with any of
// them is rejected as a whole: the *Error returned lists every problem,
// each with its line, column and key path.
//
// Durations are Go durations, as accepted by time.ParseDuration: 250ms,
// 30s, 1m30s; a bare 0 means zero and no duration may be negative.
// Sizes are a number of bytes (65536) or a whole number with a binary
// unit: B, KiB, MiB or GiB (64KiB). Decimal units such as KB or MB are
// rejected, since whether they mean 1000 or 1024 is anyone's guess.
package config
