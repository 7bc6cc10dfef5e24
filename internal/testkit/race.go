//go:build race

package testkit

// Race reports whether the binary was built with -race, under which
// sync.Pool drops a share of what is put back on purpose: an allocation
// count that relies on a pool (encoding/json's scanners, for one) is not
// exact there.
const Race = true
