package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// JSONTokens lists the JSON tokens of data as text ("!" and the error when
// it is not JSON), numbers as written: two encodings compare equal when
// their tokens do, whatever their spacing.
func JSONTokens(data []byte) []string {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var out []string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			return append(out, "!"+err.Error())
		}
		out = append(out, fmt.Sprintf("%T:%v", tok, tok))
	}
}
