package config

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A *_ms key takes milliseconds, as it always has, or a Go duration string;
// anything else is refused with the key and its line.
func TestMillisDecoding(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration // when err is ""
		err   string        // the error after "config: sessions.tool_result_timeout_ms: "
	}{
		{value: "1500", want: 1500 * time.Millisecond},
		{value: "0", want: 0},
		{value: "0s", want: 0},
		{value: "'0'", want: 0},
		{value: "500ms", want: 500 * time.Millisecond},
		{value: "5m", want: 5 * time.Minute},
		{value: "1h30m", want: 90 * time.Minute},
		{value: "1.5s", want: 1500 * time.Millisecond},
		{value: "'2s'", want: 2 * time.Second},
		{value: "1e3", want: time.Second}, // a float, read as an integer key always read it
		{value: "0x10", want: 16 * time.Millisecond},
		{value: "9223372036854", want: MaxMillis.Duration()},

		{value: "-1", err: `"-1" is negative; a duration must be >= 0 (line 1)`},
		{value: "-5m", err: `"-5m" is negative; a duration must be >= 0 (line 1)`},
		{value: "-1e30", err: `"-1e30" is negative; a duration must be >= 0 (line 1)`},
		{value: "soon", err: `"soon" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "5 minutes", err: `"5 minutes" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "1h30", err: `"1h30" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "true", err: `"true" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: ".nan", err: `".nan" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "[1]", err: `a list is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "{a: 1}", err: `a mapping is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{value: "'500'", err: `"500" has no unit: write milliseconds unquoted, or a unit (500ms, 5m) (line 1)`},
		{value: "1500us", err: `"1500us" is not a whole number of milliseconds (line 1)`},
		{value: "1ns", err: `"1ns" is not a whole number of milliseconds (line 1)`},
		// Overflow: past time.Duration, as milliseconds, as a number too
		// large for an integer, and as a string.
		{value: "9223372036855", err: `"9223372..." is out of range; a duration is at most 9223372036854 milliseconds (line 1)`},
		{value: "99999999999999999999", err: `"9999999..." is out of range; a duration is at most 9223372036854 milliseconds (line 1)`},
		{value: "3000000h", err: `"3000000h" is out of range; a duration is at most 2562047h47m16.854s (line 1)`},
	} {
		y := "sessions: {tool_result_timeout_ms: " + tc.value + "}"
		c, err := Parse(strings.NewReader(y))
		if tc.err != "" {
			want := "config: sessions.tool_result_timeout_ms: " + tc.err
			if err == nil || err.Error() != want {
				t.Errorf("Parse(%q) = %v;\nwant the error %q", y, err, want)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q) = %v", y, err)
			continue
		}
		if got := c.Sessions.ToolResultTimeoutMs.Duration(); got != tc.want {
			t.Errorf("Parse(%q): tool_result_timeout_ms = %v, want %v", y, got, tc.want)
		}
	}
}

// The errors name the key and the line wherever the key is: nested, in a
// list, optional (a pointer), and several in one file.
func TestMillisErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"retry:\n  base_delay_ms: soon\n", `config: retry.base_delay_ms: "soon" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 2)`},
		{"retry: {max_delay_ms: -1s}", `config: retry.max_delay_ms: "-1s" is negative; a duration must be >= 0 (line 1)`},
		{"store:\n  redis:\n    lease_ms: 10 s\n", `config: store.redis.lease_ms: "10 s" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 3)`},
		{"providers:\n  - name: a\n    kind: anthropic\n    timeout_ms: 1us\n",
			`config: providers[0].timeout_ms: "1us" is not a whole number of milliseconds (line 4)`},
		// A string key holding the same text is not taken for the key in
		// error.
		{"providers: [{name: soon, kind: anthropic, read_timeout_ms: soon}]",
			`config: providers[0].read_timeout_ms: "soon" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1)`},
		{"http: {sse_heartbeat_ms: -1, ticket_ttl_ms: x}\nlimits: {body_timeout_ms: 1.5h5}\n",
			`config: http.sse_heartbeat_ms: "-1" is negative; a duration must be >= 0 (line 1); ` +
				`http.ticket_ttl_ms: "x" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 1); ` +
				`limits.body_timeout_ms: "1.5h5" is not a number of milliseconds or a duration such as 500ms or 1h30m (line 2)`},
	} {
		_, err := Parse(strings.NewReader(tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Parse(%q) = %v;\nwant the error %q", tc.yaml, err, tc.want)
		}
	}
}

// Duration strings go through the same bounds and defaults as milliseconds,
// and an optional key stays unset unless the file sets it.
func TestMillisStringsAndDefaults(t *testing.T) {
	c, err := Parse(strings.NewReader(`
store: {backend: redis, redis: {timeout_ms: 2s, lease_ms: 1m, sync_interval_ms: 250ms}}
retry: {base_delay_ms: 1s, max_delay_ms: 2m, fallback_cooldown_ms: 1h}
http: {sse_heartbeat_ms: 5s, ticket_ttl_ms: 1h, idle_timeout_ms: 5m}
limits: {body_timeout_ms: 10s, min_base_delay_ms: 50ms}
sessions: {tool_result_timeout_ms: 30m}
providers: [{name: sim, kind: simulated, first_token_delay_ms: 1s, token_delay_ms: 20ms}]
`))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Store.Redis
	if r.TimeoutMs != 2000 || r.LeaseMs != 60000 || r.SyncIntervalMs != 250 || c.Retry.FallbackCooldownMs != 3600000 ||
		c.HTTP.SSEHeartbeatMs != 5000 || c.HTTP.TicketTTLMs != 3600000 || c.HTTP.IdleTimeoutMs != 300000 || c.Limits.BodyTimeoutMs != 10000 ||
		c.Limits.MinBaseDelayMs != 50 || c.Sessions.ToolResultTimeoutMs != 1800000 ||
		c.Providers[0].FirstTokenDelayMs != 1000 || c.Providers[0].TokenDelayMs != 20 {
		t.Fatalf("durations as read: %+v", c)
	}
	s, err := c.RetrySettings()
	if err != nil || s.BaseDelay != time.Second || s.MaxDelay != 2*time.Minute {
		t.Fatalf("RetrySettings = %+v, %v", s, err)
	}

	// A bound is checked on the value, whichever way it is written.
	for _, y := range []string{"http: {ticket_ttl_ms: 2h}", "http: {ticket_ttl_ms: 7200000}"} {
		if _, err := Parse(strings.NewReader(y)); err == nil || err.Error() != "config: http.ticket_ttl_ms: must be between 1 and 3600000, got 7200000" {
			t.Errorf("Parse(%q) = %v", y, err)
		}
	}
	if _, err := Parse(strings.NewReader("http: {idle_timeout_ms: -5}")); err == nil || err.Error() != `config: http.idle_timeout_ms: "-5" is negative; a duration must be >= 0 (line 1)` {
		t.Errorf("Parse(idle_timeout_ms: -5) = %v", err)
	}

	// Unset, 0 and null keep the defaults.
	for _, y := range []string{"", "http: {sse_heartbeat_ms: 0}\nlimits: {body_timeout_ms: 0s}\nretry: {base_delay_ms: null}"} {
		c, err := Parse(strings.NewReader(y))
		if err != nil {
			t.Fatalf("Parse(%q) = %v", y, err)
		}
		if c.HTTP.SSEHeartbeatMs != DefaultSSEHeartbeatMs || c.HTTP.IdleTimeoutMs != DefaultIdleTimeoutMs || c.Limits.BodyTimeoutMs != DefaultBodyTimeoutMs || c.Retry.BaseDelayMs != nil {
			t.Errorf("Parse(%q): sse_heartbeat_ms %d, body_timeout_ms %d, base_delay_ms %v", y, c.HTTP.SSEHeartbeatMs, c.Limits.BodyTimeoutMs, c.Retry.BaseDelayMs)
		}
	}
}

func TestMillisDuration(t *testing.T) {
	for _, tc := range []struct {
		m    Millis
		want time.Duration
	}{
		{0, 0}, {1, time.Millisecond}, {1500, 1500 * time.Millisecond}, {-2, -2 * time.Millisecond},
		{MaxMillis, time.Duration(MaxMillis) * time.Millisecond},
		{MaxMillis + 1, math.MaxInt64}, {math.MaxInt64, math.MaxInt64}, {-MaxMillis - 1, math.MinInt64},
	} {
		if got := tc.m.Duration(); got != tc.want {
			t.Errorf("Millis(%d).Duration() = %v, want %v", tc.m, got, tc.want)
		}
	}
	if optionalDuration(nil) != nil {
		t.Error("optionalDuration(nil) is set")
	}
	m := Millis(250)
	if d := optionalDuration(&m); d == nil || *d != 250*time.Millisecond {
		t.Errorf("optionalDuration(250) = %v", d)
	}
}

// Every duration key is a Millis: a new *_ms key decodes duration strings
// and reports its errors as the others do.
func TestEveryMsKeyIsMillis(t *testing.T) {
	var walk func(t reflect.Type, path string)
	seen := map[reflect.Type]bool{}
	walk = func(typ reflect.Type, path string) {
		typ = derefType(typ)
		for typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = derefType(typ.Elem())
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if strings.HasSuffix(name, "_ms") && derefType(f.Type) != reflect.TypeFor[Millis]() {
				t.Errorf("%s%s is a %s, not a config.Millis", path, name, f.Type)
			}
			walk(f.Type, path+name+".")
		}
	}
	walk(reflect.TypeFor[Config](), "")
}
