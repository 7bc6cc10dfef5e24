package testkit

import (
	"slices"
	"testing"
)

func TestJSONTokens(t *testing.T) {
	a := JSONTokens([]byte(`{"a": [1, "x", null, true]}`))
	b := JSONTokens([]byte(`{"a":[1,"x",null,true]}`))
	if !slices.Equal(a, b) || len(a) != 9 {
		t.Fatalf("tokens %v and %v: want the same 9", a, b)
	}
	if c := JSONTokens([]byte(`{"a": 1.0}`)); slices.Equal(a, c) || c[2] != "json.Number:1.0" {
		t.Fatalf("tokens of 1.0: %v", c)
	}
	if d := JSONTokens([]byte(`{"a" 1}`)); d[len(d)-1][0] != '!' {
		t.Fatalf("tokens of invalid JSON: %v, want an error last", d)
	}
}
