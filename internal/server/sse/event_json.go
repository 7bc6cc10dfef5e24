package sse

import (
	"math"
	"math/bits"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/jsonenc"
)

// AppendEventJSON appends an event's JSON (every kind but tool_call, whose
// input is a google.protobuf.Value) as the SSE marshaler's protojson
// options write it: the same fields in the same order with the same values
// (64-bit integers as strings, RFC 3339 times with 0, 3, 6 or 9 fractional
// digits, every scalar field even when empty, unset messages left out),
// compact. It reports false for any other event, or one it cannot write
// the same way (a string that is not UTF-8, a time outside protojson's
// range): protojson writes those. Besides being 5× faster, it keeps
// protojson's deep reflection off the stack of a reader's goroutine.
// protojson itself inserts random spaces after commas in some builds, so
// equal output is equal JSON tokens, not equal bytes.
func AppendEventJSON(dst []byte, ev *agentdv1.Event) ([]byte, bool) {
	w := jsonWriter{b: dst, ok: true}
	w.raw(`{"sessionId":`)
	w.str(ev.GetSessionId())
	w.raw(`,"seq":"`)
	w.b = strconv.AppendUint(w.b, ev.GetSeq(), 10)
	w.raw(`","time":`)
	w.time(ev)
	w.raw(`,"type":`)
	w.str(ev.GetType())
	w.raw(`,"promptId":`)
	w.str(ev.GetPromptId())
	switch p := ev.GetPayload().(type) {
	case *agentdv1.Event_MessageUpdate:
		u := p.MessageUpdate
		w.ok = w.ok && u != nil
		w.raw(`,"messageUpdate":{"textDelta":`)
		w.str(u.GetTextDelta())
		w.raw(`,"thinkingDelta":`)
		w.str(u.GetThinkingDelta())
		if d := u.GetToolCallDelta(); d != nil {
			w.raw(`,"toolCallDelta":{"callId":`)
			w.str(d.GetCallId())
			w.raw(`,"name":`)
			w.str(d.GetName())
			w.raw(`,"inputDelta":`)
			w.str(d.GetInputDelta())
			w.raw(`}`)
		}
	case *agentdv1.Event_AgentStart:
		w.ok = w.ok && p.AgentStart != nil
		w.raw(`,"agentStart":{"promptId":`)
		w.str(p.AgentStart.GetPromptId())
	case *agentdv1.Event_AgentEnd:
		w.ok = w.ok && p.AgentEnd != nil
		w.raw(`,"agentEnd":{`)
	case *agentdv1.Event_MessageStart:
		m := p.MessageStart
		w.ok = w.ok && m != nil
		w.raw(`,"messageStart":{"role":`)
		w.str(m.GetRole())
		w.raw(`,"model":`)
		w.str(m.GetModel())
		w.raw(`,"credentialId":`)
		w.str(m.GetCredentialId())
	case *agentdv1.Event_PromptEnd:
		pe := p.PromptEnd
		w.ok = w.ok && pe != nil
		w.raw(`,"promptEnd":{"outcome":`)
		w.str(pe.GetOutcome())
		w.raw(`,"error":`)
		w.str(pe.GetError())
		w.usage(`,"usage":`, pe.GetUsage())
		w.usage(`,"retryUsage":`, pe.GetRetryUsage())
		w.cost(`,"costUsd":`, pe.CostUsd)
		w.cost(`,"retryCostUsd":`, pe.RetryCostUsd)
	case *agentdv1.Event_MessageEnd:
		m := p.MessageEnd
		w.ok = w.ok && m != nil
		w.raw(`,"messageEnd":{"stopReason":`)
		w.str(m.GetStopReason())
		w.raw(`,"errorMessage":`)
		w.str(m.GetErrorMessage())
		if d := m.GetStopDetails(); d != nil {
			w.raw(`,"stopDetails":{"type":`)
			w.str(d.GetType())
			w.raw(`}`)
		}
		w.raw(`,"model":`)
		w.str(m.GetModel())
		w.raw(`,"text":`)
		w.str(m.GetText())
		w.raw(`,"errorClass":`)
		w.str(m.GetErrorClass())
		w.usage(`,"usage":`, m.GetUsage())
		w.cost(`,"costUsd":`, m.CostUsd)
	case *agentdv1.Event_AutoRetryStart:
		r := p.AutoRetryStart
		w.ok = w.ok && r != nil
		w.raw(`,"autoRetryStart":{"attempt":`)
		w.b = strconv.AppendInt(w.b, int64(r.GetAttempt()), 10)
		w.raw(`,"maxAttempts":`)
		w.b = strconv.AppendInt(w.b, int64(r.GetMaxAttempts()), 10)
		w.raw(`,"delayMs":"`)
		w.b = strconv.AppendInt(w.b, r.GetDelayMs(), 10)
		w.raw(`","errorMessage":`)
		w.str(r.GetErrorMessage())
		w.raw(`,"errorClass":`)
		w.str(r.GetErrorClass())
		w.raw(`,"delaySource":`)
		w.str(r.GetDelaySource())
	case *agentdv1.Event_AutoRetryEnd:
		r := p.AutoRetryEnd
		w.ok = w.ok && r != nil
		w.raw(`,"autoRetryEnd":{"success":`)
		w.b = strconv.AppendBool(w.b, r.GetSuccess())
		w.raw(`,"attempt":`)
		w.b = strconv.AppendInt(w.b, int64(r.GetAttempt()), 10)
		w.raw(`,"finalError":`)
		w.str(r.GetFinalError())
	case *agentdv1.Event_RetryFallbackApplied:
		f := p.RetryFallbackApplied
		w.ok = w.ok && f != nil
		w.raw(`,"retryFallbackApplied":{"from":`)
		w.str(f.GetFrom())
		w.raw(`,"to":`)
		w.str(f.GetTo())
		w.raw(`,"role":`)
		w.str(f.GetRole())
	case *agentdv1.Event_RetryFallbackSucceeded:
		f := p.RetryFallbackSucceeded
		w.ok = w.ok && f != nil
		w.raw(`,"retryFallbackSucceeded":{"model":`)
		w.str(f.GetModel())
		w.raw(`,"role":`)
		w.str(f.GetRole())
	case *agentdv1.Event_ModelChange:
		c := p.ModelChange
		w.ok = w.ok && c != nil
		w.raw(`,"modelChange":{"from":`)
		w.str(c.GetFrom())
		w.raw(`,"to":`)
		w.str(c.GetTo())
		w.raw(`,"reason":`)
		w.str(c.GetReason())
		w.raw(`,"cacheLost":`)
		w.b = strconv.AppendBool(w.b, c.GetCacheLost())
	case *agentdv1.Event_CredentialSwitched:
		c := p.CredentialSwitched
		w.ok = w.ok && c != nil
		w.raw(`,"credentialSwitched":{"provider":`)
		w.str(c.GetProvider())
		w.raw(`,"from":`)
		w.str(c.GetFrom())
		w.raw(`,"to":`)
		w.str(c.GetTo())
		w.raw(`,"cacheLost":`)
		w.b = strconv.AppendBool(w.b, c.GetCacheLost())
	case *agentdv1.Event_ContextOverflow:
		c := p.ContextOverflow
		w.ok = w.ok && c != nil
		w.raw(`,"contextOverflow":{"errorMessage":`)
		w.str(c.GetErrorMessage())
	default:
		// tool_call (its input is a google.protobuf.Value), an event
		// without a payload or of a type this build does not know.
		w.ok = false
	}
	if !w.ok {
		return dst, false
	}
	return append(w.b, "}}"...), true
}

// jsonWriter appends JSON; ok turns false for good at the first value it
// cannot write as protojson does.
type jsonWriter struct {
	b  []byte
	ok bool
}

func (w *jsonWriter) raw(s string) { w.b = append(w.b, s...) }

func (w *jsonWriter) str(s string) {
	var ok bool
	w.b, ok = appendJSONString(w.b, s)
	w.ok = w.ok && ok
}

// usage writes key and u as protojson does (int64s as strings); an unset
// message is left out.
func (w *jsonWriter) usage(key string, u *agentdv1.Usage) {
	if u == nil {
		return
	}
	w.raw(key)
	for _, f := range [...]struct {
		name string
		n    int64
	}{{`{"inputTokens":"`, u.GetInputTokens()}, {`","outputTokens":"`, u.GetOutputTokens()},
		{`","cacheReadTokens":"`, u.GetCacheReadTokens()}, {`","cacheWriteTokens":"`, u.GetCacheWriteTokens()},
		{`","reasoningTokens":"`, u.GetReasoningTokens()}} {
		w.raw(f.name)
		w.b = strconv.AppendInt(w.b, f.n, 10)
	}
	w.raw(`"}`)
}

// cost writes key and an optional double as protojson does, for the values
// it writes in plain decimal notation (0, and 1e-6 <= |v| < 1e21); any other
// value turns the writer off (protojson writes it). Unset: left out.
func (w *jsonWriter) cost(key string, v *float64) {
	if v == nil {
		return
	}
	if a := math.Abs(*v); a != 0 && (a < 1e-6 || a >= 1e21 || math.IsNaN(a)) {
		w.ok = false
		return
	}
	w.raw(key)
	w.b = strconv.AppendFloat(w.b, *v, 'f', -1, 64)
}

func (w *jsonWriter) time(ev *agentdv1.Event) {
	var ok bool
	w.b, ok = appendJSONTime(w.b, ev)
	w.ok = w.ok && ok
}

// appendJSONTime appends ev's time as protojson writes a Timestamp.
func appendJSONTime(dst []byte, ev *agentdv1.Event) ([]byte, bool) {
	ts := ev.GetTime()
	if ts == nil {
		// An unset message field is left out: not the fast path's shape.
		return dst, false
	}
	secs, nanos := ts.GetSeconds(), ts.GetNanos()
	// protojson's range: years 0001 to 9999.
	if secs < -62135596800 || secs > 253402300799 || nanos < 0 || nanos > 999999999 {
		return dst, false
	}
	dst = append(dst, '"')
	dst = append(dst, secondOf(secs)...)
	if nanos != 0 {
		var frac [10]byte
		f := strconv.AppendUint(frac[:0], uint64(nanos)+1e9, 10)[1:] // nine digits
		switch {
		case nanos%1e6 == 0:
			f = f[:3]
		case nanos%1e3 == 0:
			f = f[:6]
		}
		dst = append(dst, '.')
		dst = append(dst, f...)
	}
	return append(dst, `Z"`...), true
}

// secondText is a second's 2006-01-02T15:04:05.
type secondText struct {
	secs int64
	text string
}

// lastSecond is the second a frame was last written in: a stream's frames,
// and all the streams' of a moment, fall mostly in the same one.
var lastSecond atomic.Pointer[secondText]

// secondOf returns 2006-01-02T15:04:05 for secs (UTC), without the layout
// parser, and made once per second written rather than once per frame.
func secondOf(secs int64) string {
	if l := lastSecond.Load(); l != nil && l.secs == secs {
		return l.text
	}
	t := time.Unix(secs, 0).UTC()
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	b := make([]byte, 0, len("2006-01-02T15:04:05"))
	b = appendDigits(b, y, 4)
	b = appendDigits(append(b, '-'), int(mo), 2)
	b = appendDigits(append(b, '-'), d, 2)
	b = appendDigits(append(b, 'T'), h, 2)
	b = appendDigits(append(b, ':'), mi, 2)
	b = appendDigits(append(b, ':'), sec, 2)
	l := &secondText{secs: secs, text: string(b)}
	lastSecond.Store(l)
	return l.text
}

// appendDigits appends n (0 ≤ n < 10^width) in width digits, zero-padded.
func appendDigits(dst []byte, n, width int) []byte {
	var buf [4]byte
	for i := width - 1; i >= 0; i-- {
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return append(dst, buf[:width]...)
}

// appendJSONString appends s as protojson quotes a string: only '"', '\\'
// and control characters escaped (\b \f \n \r \t, else \u00XX). It reports
// false for a string that is not UTF-8 (protojson's error).
func appendJSONString(dst []byte, s string) ([]byte, bool) {
	dst = append(dst, '"')
	i, next := 0, 0 // next: where the next word may be tested
	for i < len(s) {
		if i >= next {
			if n := jsonenc.PlainWords(s[i:]); n > 0 {
				i += n
				continue
			}
			next = i + 8 // a byte at a time to the end of this word
		}
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return dst, false
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, '\\')
		switch c {
		case '"', '\\':
			dst = append(dst, c)
		case '\b':
			dst = append(dst, 'b')
		case '\f':
			dst = append(dst, 'f')
		case '\n':
			dst = append(dst, 'n')
		case '\r':
			dst = append(dst, 'r')
		case '\t':
			dst = append(dst, 't')
		default:
			dst = append(dst, 'u')
			dst = append(dst, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			dst = strconv.AppendUint(dst, uint64(c), 16)
		}
		s, i, next = s[i+1:], 0, next-i-1
	}
	dst = append(dst, s...)
	return append(dst, '"'), true
}
