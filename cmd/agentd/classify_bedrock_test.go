package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// `agentd classify` with api "bedrock": Bedrock's exceptions as the
// bedrock provider reports them (the exception name as "type").
func TestClassifyBedrock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, class, reason string
	}{
		{`{"message":"429 ThrottlingException: Too many requests, please wait before trying again.","status":429,"type":"ThrottlingException","api":"bedrock"}`, "transient", "throttling_exception"},
		{`{"message":"429 ThrottlingException: Too many tokens per day, please wait before trying again.","status":429,"type":"ThrottlingException","api":"bedrock"}`, "usage_limit", "00:00 UTC"},
		{`{"message":"200 ModelStreamErrorException: An error occurred while streaming the response. Retry your request.","status":200,"type":"ModelStreamErrorException","api":"bedrock"}`, "transient", "model_stream_error_exception"},
		{`{"message":"200 ModelStreamErrorException: An error occurred while streaming the response. Retry your request.","status":200,"type":"ModelStreamErrorException","api":"bedrock","observableOutput":true}`, "not_retryable", "observable output"},
		{`{"message":"400 ValidationException: Input is too long for requested model.","status":400,"type":"ValidationException","api":"bedrock"}`, "context_overflow", "input is too long"},
		{`{"message":"403 AccessDeniedException: You don't have access to the model with the specified model ID.","status":403,"type":"AccessDeniedException","api":"bedrock"}`, "not_retryable", "access_denied_exception"},
	} {
		var out bytes.Buffer
		if err := runClassify(strings.NewReader(tc.in), &out, fixedNow); err != nil {
			t.Fatal(err)
		}
		var got classifyOutput
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", out.String(), err)
		}
		if got.Class != tc.class || !strings.Contains(got.Reason, tc.reason) {
			t.Errorf("%s\n=> %s, want class %s, reason with %q", tc.in, out.String(), tc.class, tc.reason)
		}
	}
}
