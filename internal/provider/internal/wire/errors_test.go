package wire

import (
	"strings"
	"testing"
)

func TestParseErrorBody(t *testing.T) {
	for _, tc := range []struct {
		body string
		want APIError
	}{
		{`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, APIError{Type: "overloaded_error", Message: "Overloaded"}},
		{`{"error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}`, APIError{Type: "request_too_large", Message: "Request exceeds the maximum size"}},
		{`{"type":"error","error":{"type":"permission_error","message":"m","details":{"error_code":"oauth_not_allowed_for_organization"}}}`,
			APIError{Type: "permission_error", Code: "oauth_not_allowed_for_organization", Message: "m"}},
		{`{"error": {"message": "q", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}`,
			APIError{Type: "insufficient_quota", Code: "insufficient_quota", Message: "q"}},
		{`{"error":{"code":"429","message":"Requests to the API have exceeded the rate limit."}}`, APIError{Code: "429", Message: "Requests to the API have exceeded the rate limit."}},
		{`{"error":{"message":"n","type":"invalid_request_error","code":400}}`, APIError{Type: "invalid_request_error", Code: "400", Message: "n"}},
		{`{"object":"error","message":"vllm says","type":"BadRequestError","param":null,"code":400}`, APIError{Type: "BadRequestError", Code: "400", Message: "vllm says"}},
		{`{"error":"plain string"}`, APIError{Message: "plain string"}},
		{`{"detail":"Not Found"}`, APIError{Message: "Not Found"}},
		{`[{"error":{"code":503,"message":"unavailable","status":"UNAVAILABLE"}}]`, APIError{Type: "UNAVAILABLE", Code: "503", Message: "unavailable"}},
		{"<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>", APIError{Message: "502 Bad Gateway"}},
		{"  upstream   connect error\n", APIError{Message: "upstream connect error"}},
		{"", APIError{}},
		{`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"gone"}}`,
			APIError{Type: "invalid_request_error", Code: "previous_response_not_found", Message: "gone"}},
		{`{"error":{"code":429,"message":"Provider returned error","metadata":{"raw":"upstream says slow down","provider_name":"Chutes"}}}`,
			APIError{Code: "429", Message: "Provider returned error (Chutes: upstream says slow down)"}},
		{`{"error":{"code":429,"message":"m","metadata":"odd"}}`, APIError{Code: "429", Message: "m"}},
		{`{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1s"}]}}`,
			APIError{Type: "RESOURCE_EXHAUSTED", Code: "429", Message: "m"}},
	} {
		got := ParseErrorBody([]byte(tc.body))
		got.Body = ""
		if got != tc.want {
			t.Errorf("ParseErrorBody(%s) = %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	if got := truncate("héllo", 2); got != "h…" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("ok\xff", 10); got != "ok\uFFFD" {
		t.Errorf("truncate = %q", got)
	}
	if got := plainText([]byte(strings.Repeat("é", 600))); len(got) > 515 || !strings.HasSuffix(got, "é…") {
		t.Errorf("plainText = %q", got)
	}
}
