package testkit

import "testing"

func TestEdit(t *testing.T) {
	for _, tc := range []struct {
		s     string
		edits []byte
		want  string
	}{
		{"abc", nil, "abc"},
		{"abc", []byte{0, 1, 'X'}, "aXc"},  // replace
		{"abc", []byte{1, 3, 'X'}, "abcX"}, // insert at the end
		{"abc", []byte{2, 0, 0}, "bc"},     // delete
		{"", []byte{2, 0, 'X'}, "X"},       // an empty string only grows
		{"abc", []byte{0, 1}, "abc"},       // an incomplete edit is ignored
	} {
		if got := Edit(tc.s, tc.edits); got != tc.want {
			t.Errorf("Edit(%q, %v) = %q, want %q", tc.s, tc.edits, got, tc.want)
		}
	}
}
