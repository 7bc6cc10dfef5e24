// Package deploy_test checks the deployment files of deploy/ and the
// top-level Dockerfile against the code: every metric a dashboard panel or an
// alert names is one agentd really exports, the Kubernetes manifests agree
// with each other and with agentd's configuration, and the image runs as
// non-root. Docker cannot build images on the development machines, so the
// Dockerfile is checked statically.
//
//	go test ./deploy/
//	go test ./deploy/ -run TestPrometheusRuleMatchesAlerts -update   # regenerate prometheusrule.yaml
package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/app"
	"github.com/agentd/agentd/internal/config"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite kubernetes/prometheusrule.yaml from prometheus/alerts.yaml")

const (
	dashboardPath      = "grafana/agentd-retries.json"
	alertsPath         = "prometheus/alerts.yaml"
	alertsTestPath     = "prometheus/alerts_test.yaml"
	kubeDir            = "kubernetes"
	prometheusRulePath = "kubernetes/prometheusrule.yaml"
	dockerfilePath     = "../Dockerfile"
	dockerignorePath   = "../.dockerignore"
)

// targetLabels are attached at scrape time by Prometheus or the
// prometheus-operator, so queries may use them on any metric.
var targetLabels = map[string]bool{
	"job": true, "instance": true, "namespace": true, "pod": true, "service": true, "container": true, "endpoint": true,
}

// agentdLabels is the closed list of label names agentd's own metrics may
// use. A new label must be added here on purpose, after checking that its
// values come from a closed set.
var agentdLabels = map[string]bool{
	"provider": true, "model": true, "class": true, "outcome": true, "source": true,
	"reason": true, "role": true, "status": true, "backend": true, "op": true, "component": true,
	"kind": true,
}

// unboundedLabels must never be metric labels: their values are unbounded
// (ids, free text) or secret.
var unboundedLabels = []string{
	"session", "session_id", "sessionid", "prompt", "prompt_id", "request_id", "trace_id", "span_id",
	"credential", "credential_id", "credential_secret", "secret", "api_key", "key", "token", "tenant",
	"user", "user_id", "message", "error", "err", "text", "url", "path", "id",
}

// requiredDashboardMetrics must each appear in at least one panel.
var requiredDashboardMetrics = []string{
	"agentd_retry_attempts_total", "agentd_retry_chains_ended_total", "agentd_retry_backoff_seconds",
	"agentd_sessions_in_backoff", "agentd_credential_blocks_total", "agentd_credential_switches_total",
	"agentd_credentials_blocked", "agentd_credentials", "agentd_banked_resets_redeemed_total",
	"agentd_model_fallbacks_applied_total", "agentd_model_fallbacks_succeeded_total",
	"agentd_model_fallbacks_reverted_total", "agentd_models_in_cooldown",
	"agentd_provider_request_duration_seconds", "agentd_provider_time_to_first_token_seconds",
	"agentd_provider_errors_total", "agentd_sessions_active", "agentd_prompts_total",
	"agentd_prompt_duration_seconds", "agentd_event_subscribers", "agentd_events_dropped_total",
	"agentd_credstore_operations_total", "agentd_credstore_errors_total", "agentd_store_degraded",
	"agentd_redis_round_trips_total", "grpc_server_handled_total", "grpc_server_handling_seconds",
	"agentd_tokens_total", "agentd_cost_usd_total", "agentd_retry_wasted_tokens_total",
	"agentd_model_probes_total", "agentd_retry_budget_tokens", "agentd_retry_budget_refusals_total",
}

// requiredAlerts are the alerts issue 7 asks for.
var requiredAlerts = []string{
	"AgentdRetryStorm", "AgentdAllCredentialsBlocked", "AgentdModelCooldownTooLong",
	"AgentdRetryChainsFailing", "AgentdStoreDegraded", "AgentdProviderErrorRatioHigh",
}

// ---------------------------------------------------------------------------
// The metrics agentd exports.

// metricInfo is one exported metric family.
type metricInfo struct {
	typ    string // counter, gauge, histogram, summary, untyped; "" when unknown
	labels map[string]bool
	from   string
}

type catalog map[string]*metricInfo

func (c catalog) add(name, typ, from string, labels ...string) {
	m := c[name]
	if m == nil {
		m = &metricInfo{labels: map[string]bool{}, from: from}
		c[name] = m
	}
	if m.typ == "" {
		m.typ = typ
	}
	for _, l := range labels {
		m.labels[l] = true
	}
}

// recorder registers on a real registry and remembers the collectors, so
// that their descriptors can be read (a vector without series is invisible
// to Gather).
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// desc is a parsed prometheus.Desc.
type desc struct {
	name   string
	labels []string
}

var (
	descName     = regexp.MustCompile(`fqName: "([^"]*)"`)
	descConst    = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVariable = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	constPair    = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)=`)
	constrained  = regexp.MustCompile(`^c\((.*)\)$`)
)

func parseDesc(d *prometheus.Desc) (desc, error) {
	s := d.String()
	n := descName.FindStringSubmatch(s)
	if n == nil {
		return desc{}, fmt.Errorf("cannot read descriptor %s", s)
	}
	out := desc{name: n[1]}
	if m := descConst.FindStringSubmatch(s); m != nil {
		for _, p := range constPair.FindAllStringSubmatch(m[1], -1) {
			out.labels = append(out.labels, p[1])
		}
	}
	if m := descVariable.FindStringSubmatch(s); m != nil && strings.TrimSpace(m[1]) != "" {
		for _, l := range strings.Split(m[1], ",") {
			l = strings.TrimSpace(l)
			if c := constrained.FindStringSubmatch(l); c != nil {
				l = c[1]
			}
			out.labels = append(out.labels, l)
		}
	}
	return out, nil
}

func collectorType(c prometheus.Collector) string {
	// Gauges first: a Gauge also has a Counter's methods. Summaries and
	// histograms have the same methods; only SummaryVec tells them apart
	// (agentd registers no plain Summary).
	switch c.(type) {
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge"
	case *prometheus.SummaryVec:
		return "summary"
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram"
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter"
	}
	return ""
}

// registryResult is what metrics.New and the gRPC server metrics register.
type registryResult struct {
	cat      catalog
	descs    []desc
	families []familySeries
	opts     metrics.Options
}

// familySeries is one gathered family with its series' labels.
type familySeries struct {
	name   string
	series []map[string]string
}

var (
	registryOnce sync.Once
	registryRes  registryResult
	registryErr  error
)

// registered builds a fresh pedantic registry with metrics.New (label sets
// from the ConfigMap's configuration, as the server builds them) and
// go-grpc-middleware's server metrics initialised for a gRPC server.
func registered(t *testing.T) registryResult {
	t.Helper()
	registryOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				registryErr = fmt.Errorf("registering metrics panicked: %v", r)
			}
		}()
		res := registryResult{cat: catalog{}}
		cfg, err := configMapConfig(t)
		if err != nil {
			registryErr = err
			return
		}
		res.opts = app.MetricsOptions(cfg)
		reg := prometheus.NewPedanticRegistry()
		rec := &recorder{Registerer: reg}
		metrics.New(rec, res.opts)
		grpcMetrics := metrics.NewGRPCServer()
		rec.MustRegister(grpcMetrics)
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		grpcMetrics.Initialize(gs)

		for _, c := range rec.collectors {
			ch := make(chan *prometheus.Desc)
			go func() { c.Describe(ch); close(ch) }()
			for d := range ch {
				pd, err := parseDesc(d)
				if err != nil {
					registryErr = err
					return
				}
				res.descs = append(res.descs, pd)
				res.cat.add(pd.name, collectorType(c), "registry", pd.labels...)
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			registryErr = fmt.Errorf("pedantic registry: %w", err)
			return
		}
		for _, mf := range mfs {
			fam := familySeries{name: mf.GetName()}
			typ := strings.ToLower(mf.GetType().String())
			res.cat.add(mf.GetName(), typ, "registry")
			if m := res.cat[mf.GetName()]; m.typ != typ {
				m.typ = typ // the gathered type wins over a guess from the collector
			}
			for _, s := range mf.GetMetric() {
				lbls := map[string]string{}
				for _, lp := range s.GetLabel() {
					lbls[lp.GetName()] = lp.GetValue()
					res.cat.add(mf.GetName(), typ, "registry", lp.GetName())
				}
				fam.series = append(fam.series, lbls)
			}
			res.families = append(res.families, fam)
		}
		registryRes = res
	})
	if registryErr != nil {
		t.Fatal(registryErr)
	}
	return registryRes
}

var (
	scrapeOnce sync.Once
	scrapeCat  catalog
	scrapeErr  error
)

var (
	typeLine   = regexp.MustCompile(`^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$`)
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// scraped runs a real agentd server (embedded defaults on loopback ports)
// and reads its /metrics: the metrics registered outside metrics.New (such
// as agentd_sessions_active) count as exported too.
func scraped(t *testing.T) catalog {
	t.Helper()
	scrapeOnce.Do(func() {
		scrapeErr = errors.New("the scrape failed in an earlier test")
		scrapeCat, scrapeErr = scrapeServer(t)
	})
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	return scrapeCat
}

func scrapeServer(t *testing.T) (catalog, error) {
	a := agentdtest.Start(t, "")
	resp := a.Do(testkit.Context(t), t, "GET", "/metrics", "", nil)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	cat := catalog{}
	types := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil {
			types[m[1]] = m[2]
			cat.add(m[1], m[2], "server /metrics")
		}
	}
	for _, line := range strings.Split(string(body), "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if _, ok := types[name]; !ok {
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if base := strings.TrimSuffix(name, suf); base != name && types[base] != "" {
					name = base
					break
				}
			}
		}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if lp[1] == "le" || lp[1] == "quantile" {
				continue
			}
			cat.add(name, types[name], "server /metrics", lp[1])
		}
	}
	return cat, nil
}

// exported is every metric agentd exports: what metrics.New and the gRPC
// server metrics register, plus what a running server serves.
func exported(t *testing.T) catalog {
	t.Helper()
	all := catalog{}
	for _, c := range []catalog{registered(t).cat, scraped(t)} {
		for name, m := range c {
			all.add(name, m.typ, m.from, keys(m.labels)...)
		}
	}
	return all
}

// ---------------------------------------------------------------------------
// PromQL: metric names and labels.

var (
	stringLiteral = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	metricRef     = regexp.MustCompile(`\b(?:agentd|grpc_server)_[A-Za-z0-9_:]*`)
	selectorRef   = regexp.MustCompile(`\b((?:agentd|grpc_server)_[A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	labelMatcher  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')`)
	grouping      = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	templateLabel = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
	alertLabelRef = regexp.MustCompile(`\$labels\.([A-Za-z_][A-Za-z0-9_]*)`)
)

// metricNames returns the agentd_ and grpc_server_ metric names an
// expression uses (string literals removed first).
func metricNames(expr string) []string {
	names := metricRef.FindAllString(stringLiteral.ReplaceAllString(expr, `""`), -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// resolve finds the exported family a name in a query belongs to:
// histograms are queried through _bucket, _sum and _count.
func resolve(cat catalog, name string) (family string, info *metricInfo, err error) {
	if m := cat[name]; m != nil {
		if m.typ == "histogram" || m.typ == "summary" {
			return "", nil, fmt.Errorf("%s is a %s: query %s_bucket, _sum or _count", name, m.typ, name)
		}
		return name, m, nil
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		m := cat[base]
		if m == nil {
			break
		}
		switch {
		case m.typ == "histogram", m.typ == "summary" && suf != "_bucket":
			return base, m, nil
		case m.typ == "":
			return base, m, nil // type unknown: the base name exists
		default:
			return "", nil, fmt.Errorf("%s: %s is a %s, it has no %s series", name, base, m.typ, suf)
		}
	}
	return "", nil, fmt.Errorf("%s is not a metric agentd exports", name)
}

// checkExpr checks every metric name of a PromQL expression and the labels
// it filters, groups and templates on. It returns the families used.
func checkExpr(cat catalog, where, expr string, templates []string) (families []string, errs []error) {
	names := metricNames(expr)
	if len(names) == 0 && !strings.Contains(expr, "up{") {
		errs = append(errs, fmt.Errorf("%s: %q names no agentd metric", where, expr))
	}
	known := map[string]bool{}
	for l := range targetLabels {
		known[l] = true
	}
	for _, n := range names {
		fam, info, err := resolve(cat, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		families = append(families, fam)
		for l := range info.labels {
			known[l] = true
		}
		if strings.HasSuffix(n, "_bucket") {
			known["le"] = true
		}
	}
	for _, sel := range selectorRef.FindAllStringSubmatch(expr, -1) {
		fam, info, err := resolve(cat, sel[1])
		if err != nil {
			continue // reported above
		}
		for _, m := range labelMatcher.FindAllStringSubmatch(sel[2], -1) {
			if l := m[1]; !info.labels[l] && !targetLabels[l] && !(l == "le" && fam != sel[1]) {
				errs = append(errs, fmt.Errorf("%s: %s has no label %q", where, sel[1], l))
			}
		}
	}
	stripped := stringLiteral.ReplaceAllString(expr, `""`)
	for _, g := range grouping.FindAllStringSubmatch(stripped, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !known[l] {
				errs = append(errs, fmt.Errorf("%s: groups by %q, a label none of %v has", where, l, names))
			}
		}
	}
	for _, tpl := range templates {
		for _, m := range templateLabel.FindAllStringSubmatch(tpl, -1) {
			if !known[m[1]] {
				errs = append(errs, fmt.Errorf("%s: template %q uses label %q, which none of %v has", where, tpl, m[1], names))
			}
		}
		for _, m := range alertLabelRef.FindAllStringSubmatch(tpl, -1) {
			if !known[m[1]] {
				errs = append(errs, fmt.Errorf("%s: annotation uses $labels.%s, which none of %v has", where, m[1], names))
			}
		}
	}
	return families, errs
}

// ---------------------------------------------------------------------------
// Metrics: labels.

// labelProblems reports the labels of a metric that are unbounded or, for
// agentd's own metrics, outside the closed list of label names.
func labelProblems(name string, labels []string) []string {
	var out []string
	for _, l := range labels {
		if slices.Contains(unboundedLabels, strings.ToLower(l)) {
			out = append(out, fmt.Sprintf("metric %s has the unbounded label %q", name, l))
		} else if strings.HasPrefix(name, "agentd_") && !agentdLabels[l] {
			out = append(out, fmt.Sprintf("metric %s has label %q, not one of the closed label names %v", name, l, keys(agentdLabels)))
		}
	}
	return out
}

// TestLabelCheckCatchesUnboundedLabels makes sure the label check below
// would see a session id, a credential secret or a free-text label.
func TestLabelCheckCatchesUnboundedLabels(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	rec := &recorder{Registerer: reg}
	rec.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_bad_total", Help: "h"}, []string{"provider", "session_id"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agentd_bad2", Help: "h", ConstLabels: prometheus.Labels{"credential_secret": "x"}}, []string{"model"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentd_bad3_seconds", Help: "h"}, []string{"colour"}),
	)
	var problems []string
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			pd, err := parseDesc(d)
			if err != nil {
				t.Fatal(err)
			}
			problems = append(problems, labelProblems(pd.name, pd.labels)...)
		}
	}
	joined := strings.Join(problems, "\n")
	for _, want := range []string{`"session_id"`, `"credential_secret"`, `"colour"`} {
		if !strings.Contains(joined, want) {
			t.Errorf("label check missed %s; it found:\n%s", want, joined)
		}
	}
	if len(problems) != 3 {
		t.Errorf("label check found %d problems, want 3:\n%s", len(problems), joined)
	}
}

func TestMetricLabelsAreBounded(t *testing.T) {
	res := registered(t)
	if len(res.descs) < 20 {
		t.Fatalf("only %d metric descriptors registered; metrics.New registers more", len(res.descs))
	}
	check := func(from, name string, labels []string) {
		for _, p := range labelProblems(name, labels) {
			t.Errorf("%s: %s", from, p)
		}
	}
	for _, d := range res.descs {
		check("descriptor", d.name, d.labels)
	}
	for name, m := range scraped(t) {
		if strings.HasPrefix(name, "agentd_") || strings.HasPrefix(name, "grpc_") {
			check("server /metrics", name, keys(m.labels))
		}
	}
	// Label values: from the closed sets, never free text.
	safe := regexp.MustCompile(`^[A-Za-z0-9_.:/+-]{0,100}$`)
	closed := map[string][]string{
		"provider":  append(res.opts.Providers, metrics.Other),
		"model":     append(res.opts.Models, metrics.Other),
		"role":      append(res.opts.Roles, metrics.Other, "default"),
		"backend":   res.opts.Backends,
		"component": metrics.RedisComponents,
		"kind":      metrics.TokenKinds,
	}
	for _, fam := range res.families {
		for _, s := range fam.series {
			for l, v := range s {
				if !safe.MatchString(v) {
					t.Errorf("%s{%s=%q}: label value is not a short identifier", fam.name, l, v)
				}
				if set, ok := closed[l]; ok && strings.HasPrefix(fam.name, "agentd_") && !slices.Contains(set, v) {
					t.Errorf("%s{%s=%q}: value outside the configured set %v", fam.name, l, v, set)
				}
			}
		}
	}
	// Every label starts at 0: the retry series exist before any retry.
	for _, name := range []string{"agentd_retry_attempts_total", "agentd_retry_chains_ended_total", "agentd_credential_switches_total"} {
		found := false
		for _, fam := range res.families {
			found = found || fam.name == name && len(fam.series) > 0
		}
		if !found {
			t.Errorf("%s has no series before any event: initialise its label sets at 0", name)
		}
	}
}

// ---------------------------------------------------------------------------
// Grafana dashboard.

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
			// Definition is the query of a query variable as text.
			Definition string `json:"definition"`
			Datasource any    `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  any    `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		Datasource   any    `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func readDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d, data
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// usesDatasourceVariable reports whether a panel or target datasource is the
// dashboard's datasource variable, so that the import works on any Grafana.
func usesDatasourceVariable(ds any) bool {
	m, ok := ds.(map[string]any)
	if !ok {
		return false
	}
	uid, _ := m["uid"].(string)
	return uid == "${datasource}" || uid == "$datasource" || uid == "${DS_PROMETHEUS}"
}

func TestDashboard(t *testing.T) {
	d, raw := readDashboard(t)
	cat := exported(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard needs a title and a uid (got %q, %q)", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (Grafana 9+)", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "datasource" && v.Query != "prometheus" {
			t.Errorf("datasource variable %s: query %v, want prometheus", v.Name, v.Query)
		}
		if v.Type == "query" {
			if !usesDatasourceVariable(v.Datasource) {
				t.Errorf("variable %s: datasource %v is not the datasource variable", v.Name, v.Datasource)
			}
			q := v.Definition
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			} else if s, ok := v.Query.(string); ok {
				q = s
			}
			expr := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
			if _, errs := checkExpr(cat, "variable "+v.Name, expr, nil); len(errs) > 0 {
				for _, err := range errs {
					t.Error(err)
				}
			}
		}
	}
	if vars["datasource"] != "datasource" && vars["DS_PROMETHEUS"] != "datasource" {
		t.Errorf("no datasource variable (datasource or DS_PROMETHEUS): %v", vars)
	}
	for _, want := range []string{"provider", "instance"} {
		if vars[want] != "query" {
			t.Errorf("no %s query variable: %v", want, vars)
		}
	}
	// Every $variable used is defined or one of Grafana's own.
	for _, m := range regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(string(raw), -1) {
		if _, ok := vars[m[1]]; !ok && !strings.HasPrefix(m[1], "__") && m[1] != "labels" && m[1] != "value" {
			t.Errorf("dashboard uses $%s, which is not a variable", m[1])
		}
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	graphs := 0
	grid := map[[2]int]string{}
	for _, p := range flatten(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := grid[[2]int{x, y}]; ok {
					t.Errorf("panel %q overlaps panel %q", p.Title, other)
					x, y = 1<<30, 1<<30
					continue
				}
				grid[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if strings.TrimSpace(p.Title) == "" || len(strings.TrimSpace(p.Description)) < 20 {
			t.Errorf("panel %d %q: needs a title and a description", p.ID, p.Title)
		}
		if !usesDatasourceVariable(p.Datasource) {
			t.Errorf("panel %q: datasource %v is not the datasource variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource != nil && !usesDatasourceVariable(tg.Datasource) {
				t.Errorf("panel %q query %s: datasource %v is not the datasource variable", p.Title, tg.RefID, tg.Datasource)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q query %s: empty expression", p.Title, tg.RefID)
				continue
			}
			fams, errs := checkExpr(cat, fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), tg.Expr, []string{tg.LegendFormat})
			for _, err := range errs {
				t.Error(err)
			}
			for _, f := range fams {
				used[f] = true
			}
		}
	}
	if graphs < 10 {
		t.Errorf("%d panels, want at least 10", graphs)
	}
	for _, m := range requiredDashboardMetrics {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	t.Logf("%d panels over %d metrics", graphs, len(used))
}

// ---------------------------------------------------------------------------
// Alerts.

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

var promDuration = regexp.MustCompile(`^([0-9]+(ms|s|m|h|d|w|y))+$`)

func readAlerts(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("%s: %v", alertsPath, err)
	}
	return rf
}

// The retry chains' outcome label: every value a dashboard query or an
// alert filters agentd_retry_chains_ended_total on is one the session
// engine reports, and the panel showing them by outcome, and the deploy
// README, list every one.
func TestChainOutcomesAgree(t *testing.T) {
	const family = "agentd_retry_chains_ended_total"
	var known []string
	for _, o := range session.ChainOutcomes {
		known = append(known, string(o))
	}
	outcomeMatcher := regexp.MustCompile(`outcome\s*(?:=~|!~|!=|=)\s*"([^"]*)"`)
	checkExpr := func(where, expr string) {
		for _, sel := range selectorRef.FindAllStringSubmatch(expr, -1) {
			if sel[1] != family {
				continue
			}
			for _, m := range outcomeMatcher.FindAllStringSubmatch(sel[2], -1) {
				for v := range strings.SplitSeq(m[1], "|") {
					if !slices.Contains(known, v) {
						t.Errorf("%s: %s{outcome=%q}: not a chain outcome %v", where, family, v, known)
					}
				}
			}
		}
	}
	d, _ := readDashboard(t)
	listed := false
	for _, p := range flatten(d.Panels) {
		for _, tg := range p.Targets {
			checkExpr("dashboard panel "+p.Title, tg.Expr)
			if strings.Contains(tg.Expr, "by (outcome)") && strings.Contains(tg.Expr, family) {
				listed = true
				for _, o := range known {
					if !strings.Contains(p.Description, o) {
						t.Errorf("dashboard panel %q: its description does not name the outcome %q", p.Title, o)
					}
				}
			}
		}
	}
	if !listed {
		t.Errorf("no dashboard panel shows %s by outcome", family)
	}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			checkExpr("alert "+r.Alert+r.Record, r.Expr)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(readme), "\n") {
		if strings.Contains(line, "*Retry chain outcomes*") {
			for _, o := range known {
				if !strings.Contains(line, o) {
					t.Errorf("deploy README, retry chain outcomes: %q not listed", o)
				}
			}
		}
	}
}

func TestAlerts(t *testing.T) {
	rf := readAlerts(t)
	cat := exported(t)
	seen := map[string]bool{}
	groups := map[string]bool{}
	for _, g := range rf.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or used twice", g.Name)
		}
		groups[g.Name] = true
		for _, r := range g.Rules {
			where := fmt.Sprintf("alert %q", r.Alert)
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules belong elsewhere): %+v", g.Name, r)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("%s defined twice", where)
			}
			seen[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			}
			if r.For != "" && !promDuration.MatchString(r.For) {
				t.Errorf("%s: for %q is not a duration", where, r.For)
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: labels.severity %q, want critical, warning or info", where, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if len(strings.TrimSpace(r.Annotations[a])) < 10 {
					t.Errorf("%s: annotations.%s missing or too short", where, a)
				}
			}
			var tpls []string
			for _, v := range r.Annotations {
				tpls = append(tpls, v)
			}
			_, errs := checkExpr(cat, where, r.Expr, tpls)
			for _, err := range errs {
				t.Error(err)
			}
		}
	}
	for _, a := range requiredAlerts {
		if !seen[a] {
			t.Errorf("alert %s is missing", a)
		}
	}
}

// TestAlertsUnitTestsCoverEveryAlert checks the promtool unit tests without
// promtool: every alert has a test, and every input series is a metric agentd
// exports, with its labels.
func TestAlertsUnitTestsCoverEveryAlert(t *testing.T) {
	data, err := os.ReadFile(alertsTestPath)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &tf); err != nil {
		t.Fatalf("%s: %v", alertsTestPath, err)
	}
	for _, g := range readAlerts(t).Groups {
		for _, r := range g.Rules {
			if !strings.Contains(string(data), `"`+r.Alert+`"`) && !strings.Contains(string(data), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool unit test in %s", r.Alert, alertsTestPath)
			}
		}
	}
	cat := exported(t)
	n := 0
	for _, tc := range tf.Tests {
		for _, s := range tc.InputSeries {
			n++
			if strings.HasPrefix(s.Series, "up{") {
				continue
			}
			if _, errs := checkExpr(cat, alertsTestPath+" series", s.Series, nil); len(errs) > 0 {
				for _, err := range errs {
					t.Error(err)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("%s has no input series", alertsTestPath)
	}
}

// TestAlertsPromtool runs promtool's syntax check and the rule unit tests of
// prometheus/alerts_test.yaml when promtool is installed (Debian package
// prometheus).
func TestAlertsPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed: skipping promtool check rules / test rules")
	}
	for _, args := range [][]string{{"check", "rules", alertsPath}, {"test", "rules", alertsTestPath}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// grafanaVariables stand in for Grafana's variables when a dashboard query
// is checked by Prometheus' own parser.
var grafanaVariables = strings.NewReplacer(
	"${datasource}", "prometheus", "$__rate_interval", "1m", "$__interval", "30s", "$__range", "1h",
	"$job", ".+", "$instance", ".+", "$provider", ".+",
)

// TestDashboardPromQLSyntax parses every dashboard query with promtool
// (as recording rules), when promtool is installed.
func TestDashboardPromQLSyntax(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed: skipping the PromQL syntax check of the dashboard")
	}
	d, _ := readDashboard(t)
	var rules []map[string]string
	for _, p := range flatten(d.Panels) {
		for i, tg := range p.Targets {
			rules = append(rules, map[string]string{
				"record": fmt.Sprintf("dashboard:panel_%d:%d", p.ID, i),
				"expr":   grafanaVariables.Replace(tg.Expr),
			})
		}
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules (dashboard queries): %v\n%s", err, out)
	}
}

// TestPrometheusRuleMatchesAlerts keeps the prometheus-operator resource in
// step with the plain rule file. Run with -update to regenerate it.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	if *update {
		if err := os.WriteFile(prometheusRulePath, renderPrometheusRule(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(prometheusRulePath)
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       struct {
			Groups []ruleGroup `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatalf("%s: %v", prometheusRulePath, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s: %s %s, want monitoring.coreos.com/v1 PrometheusRule", prometheusRulePath, pr.APIVersion, pr.Kind)
	}
	if want := readAlerts(t).Groups; !reflect.DeepEqual(pr.Spec.Groups, want) {
		t.Errorf("%s differs from %s: run go test ./deploy/ -run TestPrometheusRuleMatchesAlerts -update", prometheusRulePath, alertsPath)
	}
}

// renderPrometheusRule wraps alerts.yaml's groups, text and all, in a
// PrometheusRule.
func renderPrometheusRule(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\ngroups:\n")
	if i < 0 {
		t.Fatalf("%s: no top-level groups: key", alertsPath)
	}
	var b strings.Builder
	b.WriteString(`# Generated from deploy/prometheus/alerts.yaml by
#   go test ./deploy/ -run TestPrometheusRuleMatchesAlerts -update
# Do not edit: edit alerts.yaml and regenerate.
# The prometheus-operator loads it into Prometheus; your Prometheus'
# ruleSelector may require a label here (kube-prometheus-stack:
# release: <helm release>).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: agentd
  labels:
    app.kubernetes.io/name: agentd
    app.kubernetes.io/component: server
spec:
`)
	for _, line := range strings.Split(strings.TrimRight(text[i+1:], "\n"), "\n") {
		if line == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString("  " + line + "\n")
	}
	return []byte(b.String())
}

// ---------------------------------------------------------------------------
// Kubernetes manifests.

type object = map[string]any

// at walks maps by key and lists by index.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := at(v, path...).(string)
	return s
}

func num(v any, path ...any) (int, bool) {
	switch n := at(v, path...).(type) {
	case int:
		return n, true
	case float64:
		return int(n), true
	}
	return 0, false
}

func list(v any, path ...any) []any {
	l, _ := at(v, path...).([]any)
	return l
}

func stringMap(v any, path ...any) map[string]string {
	out := map[string]string{}
	m, _ := at(v, path...).(map[string]any)
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

type manifest struct {
	file string
	obj  object
}

func readManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(kubeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			var o object
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s document %d: %w", path, i, err)
			}
			if o == nil {
				continue
			}
			out = append(out, manifest{file: path, obj: o})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no manifests in %s", kubeDir)
	}
	return out
}

func find(ms []manifest, kind, name string) object {
	for _, m := range ms {
		if str(m.obj, "kind") == kind && str(m.obj, "metadata", "name") == name {
			return m.obj
		}
	}
	return nil
}

// selects reports whether every selector label is among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestKubernetesManifestsParse(t *testing.T) {
	ms := readManifests(t)
	files := map[string]bool{}
	for _, m := range ms {
		files[filepath.Base(m.file)] = true
		if str(m.obj, "apiVersion") == "" || str(m.obj, "kind") == "" {
			t.Errorf("%s: a document without apiVersion or kind", m.file)
		}
		if str(m.obj, "kind") != "Kustomization" && str(m.obj, "metadata", "name") == "" {
			t.Errorf("%s: %s without metadata.name", m.file, str(m.obj, "kind"))
		}
	}
	// kustomization.yaml lists exactly the other files.
	var k object
	for _, m := range ms {
		if str(m.obj, "kind") == "Kustomization" {
			k = m.obj
		}
	}
	if k == nil {
		t.Fatal("no kustomization.yaml")
	}
	var listed []string
	for _, r := range list(k, "resources") {
		listed = append(listed, fmt.Sprint(r))
	}
	var want []string
	for f := range files {
		if f != "kustomization.yaml" {
			want = append(want, f)
		}
	}
	sort.Strings(listed)
	sort.Strings(want)
	if !slices.Equal(listed, want) {
		t.Errorf("kustomization resources %v, files %v", listed, want)
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} {
		found := false
		for _, m := range ms {
			found = found || str(m.obj, "kind") == kind
		}
		if !found {
			t.Errorf("no %s manifest", kind)
		}
	}
}

// TestKustomizeBuilds renders the kustomization with kubectl when it is
// installed (offline: no cluster needed).
func TestKustomizeBuilds(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed: skipping kubectl kustomize")
	}
	out, err := exec.Command(kubectl, "kustomize", kubeDir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", kubeDir, err, out)
	}
	for _, want := range []string{"kind: Deployment", "kind: ServiceMonitor", "kind: PrometheusRule", "namespace: agentd", "image: registry.example.com/agentd/agentd:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl kustomize output lacks %q", want)
		}
	}
}

// agentdContainer returns the Deployment, its pod template and the agentd
// container.
func agentdContainer(t *testing.T, ms []manifest) (deploy, pod, container object) {
	t.Helper()
	deploy = find(ms, "Deployment", "agentd")
	if deploy == nil {
		t.Fatal("no Deployment agentd")
	}
	pod, _ = at(deploy, "spec", "template", "spec").(object)
	for _, c := range list(pod, "containers") {
		if str(c, "name") == "agentd" {
			container, _ = c.(object)
		}
	}
	if container == nil {
		t.Fatal("Deployment agentd has no container named agentd")
	}
	return deploy, pod, container
}

// containerPorts maps the agentd container's port names to numbers.
func containerPorts(c object) map[string]int {
	ports := map[string]int{}
	for _, p := range list(c, "ports") {
		n, _ := num(p, "containerPort")
		ports[str(p, "name")] = n
	}
	return ports
}

// probePort resolves a probe's port (a name or a number) to a number.
func probePort(probe any, ports map[string]int) int {
	switch p := at(probe, "httpGet", "port").(type) {
	case string:
		return ports[p]
	case int:
		return p
	}
	return 0
}

func TestDeployment(t *testing.T) {
	ms := readManifests(t)
	deploy, pod, c := agentdContainer(t, ms)
	if r, _ := num(deploy, "spec", "replicas"); r < 2 {
		t.Errorf("replicas %d, want at least 2", r)
	}
	podLabels := stringMap(deploy, "spec", "template", "metadata", "labels")
	if !selects(stringMap(deploy, "spec", "selector", "matchLabels"), podLabels) {
		t.Errorf("Deployment selector does not match its pod labels %v", podLabels)
	}
	ports := containerPorts(c)
	if ports["grpc"] != 9090 || ports["http"] != 8080 {
		t.Errorf("container ports %v, want grpc 9090 and http 8080", ports)
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %q, want %q", probe, got, path)
		}
		if got := probePort(c[probe], ports); got != ports["http"] || got == 0 {
			t.Errorf("%s port %v, want the http port %d", probe, at(c, probe, "httpGet", "port"), ports["http"])
		}
	}
	grace, _ := num(pod, "terminationGracePeriodSeconds")
	if grace < 40 {
		t.Errorf("terminationGracePeriodSeconds %d, want at least 40 (agentd drains within 30 s)", grace)
	}
	preStop := 0
	if s, ok := num(c, "lifecycle", "preStop", "sleep", "seconds"); ok {
		preStop = s
	} else if cmd := list(c, "lifecycle", "preStop", "exec", "command"); len(cmd) > 0 {
		preStop, _ = strconv.Atoi(fmt.Sprint(cmd[len(cmd)-1]))
	}
	if preStop < 1 || preStop > 15 {
		t.Errorf("preStop sleep %d s, want a few seconds", preStop)
	}
	if preStop+30 > grace {
		t.Errorf("preStop %d s + 30 s drain exceed terminationGracePeriodSeconds %d", preStop, grace)
	}
	for _, r := range []string{"requests", "limits"} {
		if len(stringMap(c, "resources", r)) == 0 {
			t.Errorf("container has no resources.%s", r)
		}
	}
	nonRoot := at(c, "securityContext", "runAsNonRoot") == true || at(pod, "securityContext", "runAsNonRoot") == true
	if !nonRoot {
		t.Error("runAsNonRoot is not set")
	}
	uid, ok := num(c, "securityContext", "runAsUser")
	if !ok {
		uid, ok = num(pod, "securityContext", "runAsUser")
	}
	if ok && uid == 0 {
		t.Error("runAsUser 0")
	}
	if at(c, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if at(c, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("allowPrivilegeEscalation is not false")
	}

	// The config comes from the ConfigMap, mounted where --config points.
	args := list(c, "args")
	var cfgPath string
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			cfgPath = fmt.Sprint(args[i+1])
		} else if s, ok := strings.CutPrefix(fmt.Sprint(a), "--config="); ok {
			cfgPath = s
		}
	}
	if cfgPath != "/etc/agentd/config.yaml" {
		t.Errorf("--config %q, want /etc/agentd/config.yaml", cfgPath)
	}
	mounted := false
	for _, vm := range list(c, "volumeMounts") {
		if str(vm, "mountPath") != "/etc/agentd" {
			continue
		}
		for _, v := range list(pod, "volumes") {
			if str(v, "name") == str(vm, "name") && str(v, "configMap", "name") == "agentd-config" {
				mounted = true
				items := list(v, "configMap", "items")
				if len(items) > 0 && str(items, 0, "path") != filepath.Base(cfgPath) {
					t.Errorf("ConfigMap item path %q, --config names %q", str(items, 0, "path"), filepath.Base(cfgPath))
				}
			}
		}
	}
	if !mounted {
		t.Error("ConfigMap agentd-config is not mounted at /etc/agentd")
	}
	cm := find(ms, "ConfigMap", "agentd-config")
	if cm == nil || str(cm, "data", filepath.Base(cfgPath)) == "" {
		t.Errorf("ConfigMap agentd-config has no key %s", filepath.Base(cfgPath))
	}

	// Every flag the pod passes exists in agentd serve.
	checkFlags(t, "Deployment args", args)
}

// checkFlags checks that each --flag is defined by cmd/agentd.
func checkFlags(t *testing.T, where string, args []any) {
	t.Helper()
	var src strings.Builder
	files, _ := filepath.Glob("../cmd/agentd/*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(data)
	}
	for _, a := range args {
		name, ok := strings.CutPrefix(fmt.Sprint(a), "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !regexp.MustCompile(`\.\w+(Var)?\((&\w+, )?"` + regexp.QuoteMeta(name) + `"`).MatchString(src.String()) {
			t.Errorf("%s: agentd serve has no flag --%s", where, name)
		}
	}
}

func TestServiceAndMonitoring(t *testing.T) {
	ms := readManifests(t)
	deploy, _, c := agentdContainer(t, ms)
	podLabels := stringMap(deploy, "spec", "template", "metadata", "labels")
	ports := containerPorts(c)
	svc := find(ms, "Service", "agentd")
	if svc == nil {
		t.Fatal("no Service agentd")
	}
	if !selects(stringMap(svc, "spec", "selector"), podLabels) {
		t.Errorf("Service selector %v does not select the agentd pods %v", stringMap(svc, "spec", "selector"), podLabels)
	}
	svcPorts := map[string]bool{}
	for _, p := range list(svc, "spec", "ports") {
		name := str(p, "name")
		svcPorts[name] = true
		target := ports[str(p, "targetPort")]
		if n, ok := num(p, "targetPort"); ok {
			target = n
		}
		if target != ports[name] || target == 0 {
			t.Errorf("Service port %s targets %v, the container's %s port is %d", name, at(p, "targetPort"), name, ports[name])
		}
		if str(p, "appProtocol") != name {
			t.Errorf("Service port %s: appProtocol %q, want %q", name, str(p, "appProtocol"), name)
		}
	}
	if !svcPorts["grpc"] || !svcPorts["http"] {
		t.Errorf("Service ports %v, want grpc and http", svcPorts)
	}

	pdb := find(ms, "PodDisruptionBudget", "agentd")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget agentd")
	}
	replicas, _ := num(deploy, "spec", "replicas")
	if n, ok := num(pdb, "spec", "minAvailable"); !ok || n < 1 || n >= replicas {
		t.Errorf("PodDisruptionBudget minAvailable %v, want at least 1 and below replicas %d", at(pdb, "spec", "minAvailable"), replicas)
	}
	if !selects(stringMap(pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("PodDisruptionBudget does not select the agentd pods")
	}

	sm := find(ms, "ServiceMonitor", "agentd")
	if sm == nil {
		t.Fatal("no ServiceMonitor agentd")
	}
	if !selects(stringMap(sm, "spec", "selector", "matchLabels"), stringMap(svc, "metadata", "labels")) {
		t.Error("ServiceMonitor does not select the agentd Service")
	}
	eps := list(sm, "spec", "endpoints")
	if len(eps) == 0 || str(eps, 0, "port") != "http" || str(eps, 0, "path") != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v, want port http path /metrics", eps)
	}
	if !svcPorts[str(eps, 0, "port")] {
		t.Errorf("ServiceMonitor port %q is not a Service port", str(eps, 0, "port"))
	}
}

// secretEnv returns the environment the Deployment gets from Secrets.
func secretEnv(t *testing.T, ms []manifest, c object) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range list(c, "envFrom") {
		name := str(ef, "secretRef", "name")
		if name == "" {
			continue
		}
		s := find(ms, "Secret", name)
		if s == nil {
			t.Fatalf("envFrom names Secret %s, which is not in %s", name, kubeDir)
		}
		for k, v := range stringMap(s, "stringData") {
			env[k] = v
		}
	}
	for _, e := range list(c, "env") {
		if ref := at(e, "valueFrom", "secretKeyRef"); ref != nil {
			s := find(ms, "Secret", str(ref, "name"))
			if s == nil {
				t.Fatalf("env %s names Secret %s, which is not in %s", str(e, "name"), str(ref, "name"), kubeDir)
			}
			env[str(e, "name")] = stringMap(s, "stringData")[str(ref, "key")]
		}
	}
	return env
}

var (
	cfgOnce sync.Once
	cfgText string
	cfgEnv  map[string]string
	cfgErr  error
)

// configMapConfig parses the ConfigMap's agentd configuration with config.Parse,
// with the Secret's values in the environment.
func configMapConfig(t *testing.T) (*config.Config, error) {
	t.Helper()
	cfgOnce.Do(func() {
		ms := readManifests(t)
		_, _, c := agentdContainer(t, ms)
		cm := find(ms, "ConfigMap", "agentd-config")
		if cm == nil {
			cfgErr = errors.New("no ConfigMap agentd-config")
			return
		}
		cfgText = str(cm, "data", "config.yaml")
		cfgEnv = secretEnv(t, ms, c)
	})
	if cfgErr != nil {
		return nil, cfgErr
	}
	for k, v := range cfgEnv {
		if os.Getenv(k) != v {
			t.Setenv(k, v)
		}
	}
	cfg, err := config.Parse(strings.NewReader(cfgText))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap agentd-config config.yaml: %w", err)
	}
	return cfg, nil
}

func TestConfigMapIsAValidConfig(t *testing.T) {
	ms := readManifests(t)
	_, _, c := agentdContainer(t, ms)
	env := secretEnv(t, ms, c)

	// Every environment variable the config names comes from the Secret.
	var raw object
	cm := find(ms, "ConfigMap", "agentd-config")
	if err := yaml.Unmarshal([]byte(str(cm, "data", "config.yaml")), &raw); err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, tok := range list(raw, "auth", "tokens") {
		if str(tok, "token") != "" {
			t.Error("an auth token is written in the ConfigMap: use token_env and the Secret")
		}
		refs = append(refs, str(tok, "token_env"))
	}
	for _, p := range list(raw, "providers") {
		for _, cr := range list(p, "credentials") {
			if str(cr, "api_key") != "" {
				t.Errorf("provider %s: an API key is written in the ConfigMap: use api_key_env and the Secret", str(p, "name"))
			}
			refs = append(refs, str(cr, "api_key_env"))
		}
	}
	for _, key := range [][]any{{"http", "ticket_key_env"}, {"store", "redis", "secret_key_env"}} {
		if r := str(raw, key...); r != "" {
			refs = append(refs, r)
		}
	}
	for _, r := range refs {
		if _, ok := env[r]; !ok || r == "" {
			t.Errorf("the config reads $%s, which the Deployment does not get from a Secret", r)
		}
	}
	// Placeholders only: no real secret is committed.
	for k, v := range env {
		if !strings.Contains(v, "REPLACE-ME") {
			t.Errorf("Secret value %s is not a REPLACE-ME placeholder", k)
		}
	}

	cfg, err := configMapConfig(t)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Auth.Tokens) == 0 {
		t.Error("no auth.tokens: agentd refuses to listen beyond loopback without them")
	}
	ports := containerPorts(c)
	for key, l := range map[string]struct {
		addr string
		port int
	}{"listen.grpc": {cfg.Listen.GRPC, ports["grpc"]}, "listen.http": {cfg.Listen.HTTP, ports["http"]}} {
		host, port, _ := strings.Cut(l.addr, ":")
		if strings.Contains(l.addr, "]") {
			host, port, _ = strings.Cut(strings.TrimPrefix(l.addr, "["), "]:")
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("%s %q: in a pod agentd must listen on every interface", key, l.addr)
		}
		if port != strconv.Itoa(l.port) {
			t.Errorf("%s %q: port differs from the container port %d", key, l.addr, l.port)
		}
	}
	if cfg.Store.Backend != "redis" {
		t.Errorf("store.backend %q, want redis (shared by the replicas)", cfg.Store.Backend)
	}
	host, port, _ := strings.Cut(cfg.Store.Redis.Addr, ":")
	host, _, _ = strings.Cut(host, ".") // redis.agentd.svc... names the Service too
	svc := find(ms, "Service", host)
	if svc == nil {
		t.Errorf("store.redis.addr %q names no Service in %s", cfg.Store.Redis.Addr, kubeDir)
	} else {
		ok := false
		for _, p := range list(svc, "spec", "ports") {
			n, _ := num(p, "port")
			ok = ok || strconv.Itoa(n) == port
		}
		if !ok {
			t.Errorf("store.redis.addr %q: Service %s has no port %s", cfg.Store.Redis.Addr, host, port)
		}
		redis := find(ms, "Deployment", host)
		if redis == nil || !selects(stringMap(svc, "spec", "selector"), stringMap(redis, "spec", "template", "metadata", "labels")) {
			t.Errorf("Service %s selects no Redis Deployment", host)
		}
	}
	for _, want := range []string{"anthropic", "openai"} {
		found := false
		for _, p := range cfg.Providers {
			if p.Name == want {
				found = len(p.Credentials) > 0
			}
		}
		if !found {
			t.Errorf("no provider %s with credentials", want)
		}
	}
	if _, err := cfg.RetrySettings(); err != nil {
		t.Error(err)
	}
}

// sharedKeyProblems lists what a Deployment of several replicas lacks among
// the keys they must share: http.ticket_key_env (without it each replica
// signs browser stream tickets with a random key of its own, and the others
// refuse them) and store.redis.secret_key_env (without it Redis holds the
// credential secrets in clear), each read from a Secret (env: the
// Deployment's environment from Secrets).
func sharedKeyProblems(replicas int, cfg *config.Config, env map[string]string) []string {
	if replicas < 2 {
		return nil
	}
	var out []string
	for _, k := range []struct{ key, name, value string }{
		{"http.ticket_key_env", cfg.HTTP.TicketKeyEnv, cfg.HTTP.TicketKey},
		{"store.redis.secret_key_env", cfg.Store.Redis.SecretKeyEnv, cfg.Store.Redis.SecretKey},
	} {
		switch _, fromSecret := env[k.name]; {
		case k.name == "":
			out = append(out, fmt.Sprintf("%d replicas without %s", replicas, k.key))
		case !fromSecret || k.value == "":
			out = append(out, fmt.Sprintf("%s: %s does not come from a Secret", k.key, k.name))
		}
	}
	return out
}

// Several replicas share the stream tickets' key and the key that seals
// credential secrets in Redis, both from the Secret.
func TestReplicasShareTheirKeys(t *testing.T) {
	ms := readManifests(t)
	deploy, _, c := agentdContainer(t, ms)
	replicas, _ := num(deploy, "spec", "replicas")
	cfg, err := configMapConfig(t)
	if err != nil {
		t.Fatal(err)
	}
	env := secretEnv(t, ms, c)
	for _, p := range sharedKeyProblems(replicas, cfg, env) {
		t.Error(p)
	}
	// The Deployment names both keys in env, from the Secret: a Secret
	// without them keeps the pods from starting.
	named := map[string]bool{}
	for _, e := range list(c, "env") {
		if str(e, "valueFrom", "secretKeyRef", "key") != "" {
			named[str(e, "name")] = true
		}
	}
	for _, name := range []string{cfg.HTTP.TicketKeyEnv, cfg.Store.Redis.SecretKeyEnv} {
		if name != "" && !named[name] {
			t.Errorf("the Deployment's env does not take %s from the Secret (secretKeyRef)", name)
		}
	}

	// The check catches a deployment without them.
	bare, err := config.Parse(strings.NewReader("store: {backend: redis}"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sharedKeyProblems(2, bare, env); len(got) != 2 {
		t.Errorf("sharedKeyProblems of a bare config = %q, want both keys", got)
	}
	if got := sharedKeyProblems(2, cfg, map[string]string{}); len(got) != 2 {
		t.Errorf("sharedKeyProblems without the Secret = %q, want both keys", got)
	}
	if got := sharedKeyProblems(1, bare, env); len(got) != 0 {
		t.Errorf("sharedKeyProblems of one replica = %q, want none", got)
	}
}

// ---------------------------------------------------------------------------
// Dockerfile.

type instruction struct {
	cmd  string
	args string
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		if full := strings.TrimSpace(cur.String()); full != "" {
			cmd, args, _ := strings.Cut(full, " ")
			out = append(out, instruction{strings.ToUpper(cmd), strings.TrimSpace(args)})
		}
		cur.Reset()
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t)
	args := map[string]string{}
	var stages [][]instruction
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok && len(stages) == 0 {
				args[k] = v
			}
		case "FROM":
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%d build stages, want a multi-stage build", len(stages))
	}
	fields := func(in instruction) []string {
		var out []string
		for _, f := range strings.Fields(in.args) {
			if !strings.HasPrefix(f, "--") {
				out = append(out, f)
			}
		}
		return out
	}
	build, final := stages[0], stages[len(stages)-1]
	builder := fields(build[0])[0]
	if !strings.HasPrefix(builder, "golang:") {
		t.Errorf("build stage FROM %s, want golang:", builder)
	}
	// The builder's Go matches go.mod's.
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	tag := strings.TrimPrefix(builder, "golang:")
	tag = strings.ReplaceAll(tag, "${GO_VERSION}", args["GO_VERSION"])
	if goLine == nil || !strings.HasPrefix(tag, string(goLine[1])) {
		t.Errorf("builder golang:%s, go.mod wants go %s", tag, goLine[1])
	}
	var buildCmd string
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			buildCmd = in.args
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "./cmd/agentd"} {
		if !strings.Contains(buildCmd, want) {
			t.Errorf("go build command %q lacks %s", buildCmd, want)
		}
	}
	if _, err := os.Stat("../cmd/agentd/main.go"); err != nil {
		t.Errorf("build target: %v", err)
	}
	base := fields(final[0])[0]
	if strings.HasPrefix(base, "golang:") || !(strings.HasPrefix(base, "gcr.io/distroless/static") || base == "scratch") {
		t.Errorf("final stage FROM %s, want distroless static or scratch", base)
	}
	var user, expose, entrypoint, cmd string
	copied := false
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "EXPOSE":
			expose = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "CMD":
			cmd = in.args
		case "COPY":
			copied = copied || strings.Contains(in.args, "--from=")
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("final stage USER %q: want a non-root user", user)
	}
	if !copied {
		t.Error("final stage copies nothing from the build stage")
	}
	if ports := strings.Fields(expose); !slices.Contains(ports, "9090") || !slices.Contains(ports, "8080") {
		t.Errorf("EXPOSE %q, want 9090 and 8080", expose)
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) < 2 || filepath.Base(ep[0]) != "agentd" || ep[1] != "serve" {
		t.Errorf("ENTRYPOINT %s, want the exec form [\".../agentd\", \"serve\"]", entrypoint)
	}
	var cmdArgs []string
	if cmd != "" {
		if err := json.Unmarshal([]byte(cmd), &cmdArgs); err != nil {
			t.Errorf("CMD %s: want the exec form: %v", cmd, err)
		}
	}
	var anyArgs []any
	for _, a := range cmdArgs {
		anyArgs = append(anyArgs, a)
	}
	checkFlags(t, "Dockerfile CMD", anyArgs)
}

func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(dockerignorePath)
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, strings.TrimPrefix(line, "/"))
		}
	}
	if !slices.Contains(patterns, ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
	// What the build needs must stay in the context.
	for _, need := range []string{"go.mod", "go.sum", "cmd/agentd/main.go", "internal/config/config.go", "api/gen"} {
		for _, p := range patterns {
			if strings.HasPrefix(p, "!") {
				continue
			}
			base := filepath.Base(need)
			matched, _ := filepath.Match(p, need)
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				matched, _ = filepath.Match(rest, base)
			}
			if matched || strings.HasPrefix(need, strings.TrimSuffix(p, "/")+"/") {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", p, need)
			}
		}
	}
}

// ---------------------------------------------------------------------------

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
