package deploy_test

// The label values and claims of the alerts, their runbooks and the
// dashboard, checked against what agentd really exports: a real server
// runs a scripted set of prompts through the simulated provider (retries of
// every class that retries, a credential switch, a model fallback, chains
// that give up, errors that are not retried), then its /metrics gives every
// label value a series has. Each value an alert or a panel filters on, and
// each label value a runbook names, must be among them.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/testkit"
)

// labelValues maps a family to its labels' values: family → label → value.
type labelValues map[string]map[string]map[string]bool

func (lv labelValues) add(family, label, value string) {
	if lv[family] == nil {
		lv[family] = map[string]map[string]bool{}
	}
	if lv[family][label] == nil {
		lv[family][label] = map[string]bool{}
	}
	lv[family][label][value] = true
}

// values lists a family's values of label, sorted.
func (lv labelValues) values(family, label string) []string {
	var out []string
	for v := range lv[family][label] {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// scriptedConfig is the server the script runs on: two credentials (a usage
// limit switches to the other), a fallback chain for role "chat", retries
// with a 1 ms base delay.
const scriptedConfig = `retry: {base_delay_ms: 1, max_retries: 2, fallback_chains: {chat: [sim/backup]}}
providers:
  - name: sim
    kind: simulated
    models: [echo, backup]
    credentials:
      - {id: one, api_key: sk-sim-0000000000000000000000}
      - {id: two, api_key: sk-sim-1111111111111111111111}
`

// scriptedPrompts are the prompts of the scripted run: role, then text.
var scriptedPrompts = [][2]string{
	{"", "plain"},
	{"", "transient [[faults: 529,503,ok]]"},
	{"", "hinted [[faults: 529:retry-after-ms=30,ok]]"},
	{"", "quota [[faults: usage,ok]]"},                      // usage limit: switch to the sibling
	{"", "quota again [[faults: usage,usage]]"},             // both blocked: the chain gives up
	{"", "gives up [[faults: 529,529,529]]"},                // max_retries
	{"", "too long a wait [[faults: 529:retry-after=600]]"}, // max_delay
	{"", "refused [[faults: 401]]"},                         // not retried
	{"", "overflow [[faults: overflow]]"},                   // context overflow
	{"", "stale [[faults: stale,ok]]"},                      // a stale replay retries at once
	{"chat", "fallback [[faults: 529,ok]]"},
	{"chat", "refusal [[faults: refusal,ok]]"},
}

var (
	scriptOnce   sync.Once
	scriptValues labelValues
	scriptErr    error
)

// scriptedRun runs the scripted prompts on a real server and returns the
// label values of its /metrics.
func scriptedRun(t *testing.T) labelValues {
	t.Helper()
	scriptOnce.Do(func() {
		scriptErr = errors.New("the scripted run failed in an earlier test")
		scriptValues, _, scriptErr = runServer(t, scriptedConfig, scriptedPrompts)
	})
	if scriptErr != nil {
		t.Fatal(scriptErr)
	}
	// And what a registry built for the ConfigMap's configuration (sessions
	// in Redis: takeovers, Redis round trips) starts at 0.
	lv := labelValues{}
	for fam, labels := range scriptValues {
		for l, vs := range labels {
			for v := range vs {
				lv.add(fam, l, v)
			}
		}
	}
	for _, fam := range registered(t).families {
		for _, s := range fam.series {
			for l, v := range s {
				if l != "le" && l != "quantile" {
					lv.add(fam.name, l, v)
				}
			}
		}
	}
	return lv
}

// runServer runs a server with yaml (agentdtest.Start: it drains when the
// test ends), runs prompts on it (role, text; each in a session of its
// own) and returns the label values of its /metrics and the series of each
// family.
func runServer(t *testing.T, yaml string, prompts [][2]string) (labelValues, map[string][]map[string]string, error) {
	a := agentdtest.Start(t, yaml)
	ctx := testkit.Context(t)
	do := func(method, path, body, accept string) (string, error) {
		resp := a.Do(ctx, t, method, path, body, http.Header{"Accept": {accept}})
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s %s: %s %s", method, path, resp.Status, b)
		}
		return string(b), err
	}
	idRe := regexp.MustCompile(`"id":\s*"(ses_[a-z0-9]+)"`)
	for _, p := range prompts {
		created, err := do("POST", "/v1/sessions", fmt.Sprintf(`{"model":"sim/echo","role":%q}`, p[0]), "application/json")
		if err != nil {
			return nil, nil, err
		}
		m := idRe.FindStringSubmatch(created)
		if m == nil {
			return nil, nil, fmt.Errorf("CreateSession answered %s", created)
		}
		// The SSE answer ends with the prompt's end.
		stream, err := do("POST", "/v1/sessions/"+m[1]+":prompt", fmt.Sprintf(`{"text":%q}`, p[1]), "text/event-stream")
		if err != nil {
			return nil, nil, err
		}
		if !strings.Contains(stream, "event: prompt_end") {
			return nil, nil, fmt.Errorf("prompt %q: no prompt_end in\n%s", p[1], stream)
		}
	}
	body, err := do("GET", "/metrics", "", "text/plain")
	if err != nil {
		return nil, nil, err
	}
	lv := labelValues{}
	all := map[string][]map[string]string{}
	types := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil {
			types[m[1]] = m[2]
		}
	}
	pair := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	for _, line := range strings.Split(body, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if types[name] == "" {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b := strings.TrimSuffix(name, suf); b != name && types[b] != "" {
					name = b
					break
				}
			}
		}
		labels := map[string]string{}
		for _, lp := range pair.FindAllStringSubmatch(m[2], -1) {
			labels[lp[1]] = lp[2]
			if lp[1] != "le" && lp[1] != "quantile" {
				lv.add(name, lp[1], lp[2])
			}
		}
		all[m[1]] = append(all[m[1]], labels)
	}
	return lv, all, nil
}

// plainAlternatives splits a matcher's value into the label values it
// names: "a" or "a|b|c". ok is false for a real regular expression (".+",
// "5.."), a Grafana variable or an empty value, which name no value.
func plainAlternatives(v string) ([]string, bool) {
	if v == "" || strings.Contains(v, "$") {
		return nil, false
	}
	alts := strings.Split(v, "|")
	for _, a := range alts {
		if !regexp.MustCompile(`^[A-Za-z0-9_:/-]+$`).MatchString(a) {
			return nil, false
		}
	}
	return alts, true
}

var matcherValue = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)

// checkLabelValues checks the label values expr's selectors filter on.
func checkLabelValues(lv labelValues, where, expr string) []error {
	var errs []error
	for _, sel := range selectorRef.FindAllStringSubmatch(expr, -1) {
		fam := sel[1]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b := strings.TrimSuffix(fam, suf); b != fam && lv[b] != nil {
				fam = b
			}
		}
		for _, m := range matcherValue.FindAllStringSubmatch(sel[2], -1) {
			label, value := m[1], m[3]
			if targetLabels[label] || label == "le" {
				continue
			}
			alts, ok := plainAlternatives(value)
			if !ok {
				continue
			}
			for _, a := range alts {
				if !lv[fam][label][a] {
					errs = append(errs, fmt.Errorf("%s: %s{%s=%q}: %q is not a value agentd exports (it has %v)",
						where, sel[1], label, value, a, lv.values(fam, label)))
				}
			}
		}
	}
	return errs
}

// Every label value an alert or a dashboard query filters on is one a
// series really carries, after a run that made every class of retry
// happen.
func TestAlertAndDashboardLabelValuesExist(t *testing.T) {
	lv := scriptedRun(t)
	// The run produced what it is meant to: without these the check below
	// would compare against too little.
	for _, want := range []struct{ family, label, value string }{
		{"agentd_retry_attempts_total", "class", "transient"},
		{"agentd_retry_attempts_total", "class", "usage_limit"},
		{"agentd_retry_chains_ended_total", "outcome", "max_retries"},
		{"agentd_provider_errors_total", "status", "529"},
		{"grpc_server_handled_total", "grpc_code", "OK"},
	} {
		if !lv[want.family][want.label][want.value] {
			t.Errorf("the scripted run left no %s{%s=%q}", want.family, want.label, want.value)
		}
	}
	for _, fl := range [][2]string{{"agentd_retry_attempts_total", "class"}, {"agentd_retry_backoff_seconds", "source"},
		{"agentd_retry_chains_ended_total", "outcome"}, {"agentd_provider_errors_total", "status"}, {"agentd_provider_errors_total", "class"}} {
		t.Logf("%s %s: %v", fl[0], fl[1], lv.values(fl[0], fl[1]))
	}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			for _, err := range checkLabelValues(lv, "alert "+r.Alert, r.Expr) {
				t.Error(err)
			}
		}
	}
	// The alerts' unit tests feed series agentd could export.
	data, err := os.ReadFile(alertsTestPath)
	if err != nil {
		t.Fatal(err)
	}
	inputs := regexp.MustCompile(`series: '([^']*)'`).FindAllStringSubmatch(string(data), -1)
	if len(inputs) == 0 {
		t.Errorf("no input series found in %s", alertsTestPath)
	}
	for _, m := range inputs {
		for _, err := range checkLabelValues(lv, alertsTestPath+" series", m[1]) {
			t.Error(err)
		}
	}
	d, _ := readDashboard(t)
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			for _, err := range checkLabelValues(lv, "dashboard panel "+p.Title, tg.Expr) {
				t.Error(err)
			}
		}
	}
}

// The check sees a value no series carries.
func TestLabelValueCheckCatchesUnknownValues(t *testing.T) {
	lv := labelValues{}
	lv.add("agentd_retry_attempts_total", "class", "transient")
	lv.add("agentd_retry_attempts_total", "class", "usage_limit")
	errs := checkLabelValues(lv, "test", `sum(rate(agentd_retry_attempts_total{class=~"transient|rate_limit",job=~"$job"}[5m]))`)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `"rate_limit" is not a value agentd exports`) {
		t.Errorf("errors %v, want one naming rate_limit", errs)
	}
	if errs := checkLabelValues(lv, "test", `agentd_retry_attempts_total{class=~".+",class!="usage_limit"}`); len(errs) != 0 {
		t.Errorf("a regexp and a known value: %v", errs)
	}
}

// identifier is a snake_case word: a label value, a metric or label name,
// or a configuration key's last part.
var identifier = regexp.MustCompile(`[A-Za-z0-9_.\[\]/-]*[a-z0-9]_[a-z0-9_]*[A-Za-z0-9_.\[\]/-]*`)

// eventTypes are the session events' types, which panel descriptions name.
var eventTypes = []string{"agent_start", "message_start", "message_update", "message_end", "tool_call", "agent_end",
	"auto_retry_start", "auto_retry_end", "retry_fallback_applied", "retry_fallback_succeeded", "model_change",
	"credential_switched", "context_overflow", "prompt_end"}

// configKey is a dotted configuration key ("retry.max_delay_ms").
var configKey = regexp.MustCompile(`^(retry|sessions|store|limits|auth|http|listen|metrics|telemetry|providers)(\.[a-z_]+|\[\])+$`)

// namedValues returns the problems of the snake_case words of a runbook
// text: each must be a label value or label of the metrics agentd exports,
// a metric name, or a configuration key that exists.
func namedValues(t *testing.T, lv labelValues, where, text string) []error {
	known := map[string]bool{}
	for fam, labels := range lv {
		known[fam] = true
		for l, vs := range labels {
			known[l] = true
			for v := range vs {
				known[v] = true
			}
		}
	}
	for name, m := range exported(t) {
		known[name] = true
		if m.typ == "histogram" {
			known[name+"_bucket"], known[name+"_sum"], known[name+"_count"] = true, true, true
		}
	}
	for _, e := range eventTypes {
		known[e] = true
	}
	// The API's field names (after_seq…).
	for _, fd := range []protoreflect.FileDescriptor{agentdv1.File_agentd_v1_agent_proto, agentdv1.File_agentd_v1_credential_proto, agentdv1.File_agentd_v1_event_proto} {
		msgs := fd.Messages()
		for i := range msgs.Len() {
			fields := msgs.Get(i).Fields()
			for j := range fields.Len() {
				known[string(fields.Get(j).Name())] = true
			}
		}
	}
	prefixOfMetric := func(w string) bool {
		for name := range exported(t) {
			if strings.HasPrefix(name, w) {
				return true
			}
		}
		return false
	}
	var errs []error
	text = regexp.MustCompile(`\{\{[^}]*\}\}`).ReplaceAllString(text, "") // templates: checked by TestAlerts
	for _, w := range identifier.FindAllString(text, -1) {
		w = strings.TrimRight(w, ".-/")
		switch {
		case known[w], strings.Contains(w, "/"): // a URL path or a label value with a slash
		case strings.HasSuffix(w, "_") && prefixOfMetric(w): // agentd_model_fallbacks_*
		case configKey.MatchString(w):
			if err := configKeyExists(w); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
			}
		default:
			errs = append(errs, fmt.Errorf("%s names %q, which is neither a label value nor a label of the metrics agentd exports, nor a metric, nor a configuration key", where, w))
		}
	}
	return errs
}

// configKeyExists parses a configuration that sets key (to null) and
// reports whether config.Parse knows it.
func configKeyExists(key string) error {
	parts := strings.Split(strings.ReplaceAll(key, "[]", ""), ".")
	var b strings.Builder
	for i, p := range parts {
		fmt.Fprintf(&b, "%s%s:", strings.Repeat("  ", i), p)
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString(" null\n")
	_, err := config.Parse(strings.NewReader(b.String()))
	if err != nil && strings.Contains(err.Error(), "unknown key") {
		return fmt.Errorf("configuration key %s does not exist: %v", key, err)
	}
	return nil
}

// Runbooks and descriptions name only label values agentd exports (the
// classes a metric carries, its outcomes…), and configuration keys that
// exist.
func TestRunbooksNameRealValues(t *testing.T) {
	lv := scriptedRun(t)
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			for _, a := range []string{"summary", "description", "runbook"} {
				for _, err := range namedValues(t, lv, fmt.Sprintf("alert %s %s", r.Alert, a), r.Annotations[a]) {
					t.Error(err)
				}
			}
		}
	}
	d, _ := readDashboard(t)
	for _, p := range flatten(d.Panels) {
		for _, err := range namedValues(t, lv, "dashboard panel "+p.Title+" description", p.Description) {
			t.Error(err)
		}
	}
}

// The check sees the classes the retry storm runbook once named.
func TestRunbookCheckCatchesWrongClasses(t *testing.T) {
	lv := labelValues{}
	lv.add("agentd_retry_attempts_total", "class", "transient")
	errs := namedValues(t, lv, "test", "the error class (rate_limit, transient, server_error); see retry.max_delay_ms and retry.no_such_key")
	var got []string
	for _, err := range errs {
		got = append(got, err.Error())
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{`"rate_limit"`, `"server_error"`, "retry.no_such_key does not exist"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the runbook check missed %s; it found:\n%s", want, joined)
		}
	}
	if len(errs) != 3 {
		t.Errorf("%d problems, want 3:\n%s", len(errs), joined)
	}
}

// Claims of the runbooks that once contradicted the README: each alert's
// text must not say what is not so, and the README still says what is.
func TestRunbookClaimsMatchREADME(t *testing.T) {
	readme, err := readREADME()
	if err != nil {
		t.Fatal(err)
	}
	claims := []struct {
		alert     string
		wrong     string // what the alert's text must not say
		must      string // what it must say instead
		readmeSay string // what the README says of it
	}{
		// With the Redis backend sessions live in Redis: their calls fail.
		{"AgentdStoreDegraded", "keeps serving from a local view", "UNAVAILABLE",
			"While\nRedis is unreachable, calls that need it fail with `UNAVAILABLE`"},
		// A reader that falls behind is told so, never left with a gap.
		{"AgentdEventSubscribersDropped", "gaps", "OUT_OF_RANGE", "never a silent gap"},
	}
	texts := map[string]string{}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			texts[r.Alert] = r.Annotations["summary"] + "\n" + r.Annotations["description"] + "\n" + r.Annotations["runbook"]
		}
	}
	for _, c := range claims {
		text, ok := texts[c.alert]
		if !ok {
			t.Errorf("alert %s is missing", c.alert)
			continue
		}
		if strings.Contains(text, c.wrong) {
			t.Errorf("alert %s says %q, against the README (%q)", c.alert, c.wrong, c.readmeSay)
		}
		if !strings.Contains(text, c.must) {
			t.Errorf("alert %s does not say %q", c.alert, c.must)
		}
		if !strings.Contains(readme, c.readmeSay) {
			t.Errorf("the README no longer says %q: check alert %s against it again", c.readmeSay, c.alert)
		}
	}
}

// readREADME reads the repository's README.
func readREADME() (string, error) {
	b, err := os.ReadFile("../README.md")
	return string(b), err
}

// A fresh server on the embedded defaults starts few agentd_ series, and
// none of a combination that cannot occur: a model under another provider
// than its own, provider or role "other" (every one is configured).
func TestFreshStartSeries(t *testing.T) {
	_, all, err := runServer(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, ss := range all {
		if !strings.HasPrefix(name, "agentd_") {
			continue
		}
		n += len(ss)
		for _, l := range ss {
			if p, m := l["provider"], l["model"]; m != "" && m != "other" && !strings.HasPrefix(m, p+"/") {
				t.Errorf("%s%v: model %s under provider %s", name, l, m, p)
			}
			if l["provider"] == "other" || l["role"] == "other" {
				t.Errorf("%s%v: started at 0 for a value no configured provider or role gives", name, l)
			}
		}
	}
	// 951 before only the possible combinations started at 0; 326 after.
	t.Logf("%d agentd_ series on a fresh start", n)
	if n > 400 {
		t.Errorf("%d agentd_ series on a fresh start with the defaults, want at most 400", n)
	}
}
