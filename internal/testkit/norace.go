//go:build !race

package testkit

// Race reports whether the binary was built with -race (see race.go).
const Race = false
