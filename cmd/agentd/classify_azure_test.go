package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// `agentd classify` with api "azure-openai": Azure's 429 and its hints
// (retry-after-ms, x-ms-retry-after-ms, "Please retry after N seconds").
func TestClassifyAzure(t *testing.T) {
	t.Parallel()
	const msg = "429 429: Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 2 seconds."
	for _, tc := range []struct {
		in    string
		class string
		ms    int64
	}{
		{`{"message":"` + msg + `","status":429,"code":"429","api":"azure-openai","headers":{"retry-after-ms":"250","retry-after":"2"}}`, "transient", 250},
		{`{"message":"` + msg + `","status":429,"code":"429","api":"azure-openai","headers":{"x-ms-retry-after-ms":1200}}`, "transient", 1200},
		{`{"message":"` + msg + `","status":429,"code":"429","api":"azure-openai"}`, "transient", 2000},
	} {
		var out bytes.Buffer
		if err := runClassify(strings.NewReader(tc.in), &out, fixedNow); err != nil {
			t.Fatal(err)
		}
		var got classifyOutput
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", out.String(), err)
		}
		if got.Class != tc.class || got.RetryAfterMs == nil || *got.RetryAfterMs != tc.ms {
			t.Errorf("%s\n=> %s, want class %s, retryAfterMs %d", tc.in, out.String(), tc.class, tc.ms)
		}
	}
}
