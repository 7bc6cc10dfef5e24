// Package config loads agentd's YAML configuration strictly: an unknown key,
// a bad value, an unknown provider kind or a fallback chain naming an unknown
// provider stops start-up with a message naming the key.
package config

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/retry"
)

// Config is the whole configuration file.
type Config struct {
	Listen    Listen     `yaml:"listen"`
	Store     Store      `yaml:"store"`
	Retry     Retry      `yaml:"retry"`
	Auth      Auth       `yaml:"auth"`
	Providers []Provider `yaml:"providers"`
	Sessions  Sessions   `yaml:"sessions"`
	HTTP      HTTP       `yaml:"http"`
	Limits    Limits     `yaml:"limits"`
	Metrics   Metrics    `yaml:"metrics"`
	Telemetry Telemetry  `yaml:"telemetry"`
}

// Telemetry configures OpenTelemetry tracing (off by default).
type Telemetry struct {
	OTLP OTLP `yaml:"otlp"`
	// CaptureContent puts prompt and answer text on the spans (as span
	// events); off by default: spans carry no prompt text.
	CaptureContent bool `yaml:"capture_content"`
	// ServiceName is the traces' service.name (default "agentd").
	ServiceName string `yaml:"service_name"`
}

// OTLP is the OTLP/gRPC trace exporter's target.
type OTLP struct {
	// Endpoint is host:port of an OTLP/gRPC receiver (an OpenTelemetry
	// Collector, Jaeger, Tempo…), e.g. 127.0.0.1:4317; empty: tracing off.
	Endpoint string `yaml:"endpoint"`
	// Insecure sends without TLS (a collector on the same host or pod).
	// Headers (a hosted backend's API key) come from the exporter's own
	// OTEL_EXPORTER_OTLP_HEADERS, never from this file.
	Insecure bool `yaml:"insecure"`
}

// Metrics places the Prometheus endpoint.
type Metrics struct {
	// Listen, when set, serves /metrics on a listener of its own (host:port)
	// instead of the public HTTP port.
	Listen string `yaml:"listen"`
}

// Limits bound what one request and one tenant may ask of agentd. Unset (0)
// fields take the defaults below; every bound applies on one replica and,
// with the Redis store, across all of them, but max_streams_per_tenant,
// which counts the streams each replica serves.
type Limits struct {
	// MaxRequestBytes bounds a request body (REST, read before anything is
	// parsed) and a gRPC message: REST 413, gRPC RESOURCE_EXHAUSTED.
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// BodyTimeoutMs bounds the time to read a REST request body.
	BodyTimeoutMs Millis `yaml:"body_timeout_ms"`
	// MaxSessionsPerTenant bounds the sessions one tenant holds.
	MaxSessionsPerTenant int `yaml:"max_sessions_per_tenant"`
	// MaxConcurrentPromptsPerTenant bounds the prompts of one tenant that
	// run (or wait in a retry's backoff) at once.
	MaxConcurrentPromptsPerTenant int `yaml:"max_concurrent_prompts_per_tenant"`
	// MaxTools bounds the tools of a session.
	MaxTools int `yaml:"max_tools"`
	// MaxSystemPromptBytes bounds a session's system prompt.
	MaxSystemPromptBytes int `yaml:"max_system_prompt_bytes"`
	// MinBaseDelayMs is the least retry.base_delay_ms a session may ask
	// for: no zero-backoff loop against a provider.
	MinBaseDelayMs Millis `yaml:"min_base_delay_ms"`
	// MaxRetriesCap is the most retry.max_retries a session may ask for.
	MaxRetriesCap int `yaml:"max_retries_cap"`
	// MaxStreamsPerTenant bounds the event streams (StreamEvents, over
	// gRPC, SSE or NDJSON) one tenant holds open on one replica: a stream
	// belongs to the replica that serves its connection.
	MaxStreamsPerTenant int `yaml:"max_streams_per_tenant"`
	// MaxCredentialsPerTenant bounds the credentials a tenant owns of one
	// provider (its own keys; the server's are not bounded).
	MaxCredentialsPerTenant int `yaml:"max_credentials_per_tenant"`
	// MaxHistoryBytes bounds a session's persisted history: a prompt to a
	// session whose history holds as much is refused.
	MaxHistoryBytes int64 `yaml:"max_history_bytes"`
}

// HTTP tunes the HTTP face for web frontends: CORS, SSE heartbeats and the
// stream tickets of browser EventSources.
type HTTP struct {
	CORS CORS `yaml:"cors"`
	// SSEHeartbeatMs is the idle time after which an SSE stream gets a
	// ": ping" comment (default 15000).
	SSEHeartbeatMs Millis `yaml:"sse_heartbeat_ms"`
	// TicketTTLMs is how long a stream ticket is accepted (default 60000,
	// at most 3600000).
	TicketTTLMs Millis `yaml:"ticket_ttl_ms"`
	// IdleTimeoutMs is how long a keep-alive connection may wait for its
	// next request before the server closes it (default 120000): a client
	// that opened many and went away does not hold their buffers and
	// goroutines for good.
	IdleTimeoutMs Millis `yaml:"idle_timeout_ms"`
	// TicketKeyEnv names an environment variable holding the key that signs
	// stream tickets (32+ bytes), shared by replicas so that any of them
	// accepts a ticket; without it each process signs with a random key.
	TicketKeyEnv string `yaml:"ticket_key_env"`
	// TicketKey is the key read from TicketKeyEnv (never in the file).
	TicketKey string `yaml:"-"`
	// AllowedHosts are the Host names that local mode (no auth.tokens)
	// answers besides loopback ones (localhost, 127.0.0.1, [::1]); any
	// other Host is refused (DNS rebinding).
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// CORS lists the browser origins allowed to call the REST API.
type CORS struct {
	// AllowedOrigins are scheme://host[:port] origins, or "*" for any.
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// Listen holds the listen addresses.
type Listen struct {
	GRPC string `yaml:"grpc"`
	HTTP string `yaml:"http"`
}

// Store selects where shared state lives.
type Store struct {
	Backend string `yaml:"backend"` // memory or redis
	Redis   Redis  `yaml:"redis"`
}

// Redis configures the Redis store: one server (Addr), a Cluster (Addrs
// and Cluster) or a Sentinel-managed master (Addrs and MasterName).
type Redis struct {
	// Addr is one server's host:port (default 127.0.0.1:6379 when Addrs
	// is empty).
	Addr string `yaml:"addr"`
	// Addrs are a Cluster's seed nodes (with Cluster) or the Sentinels
	// (with MasterName), host:port each.
	Addrs []string `yaml:"addrs"`
	// Cluster: Addrs are Redis Cluster nodes; DB must be 0.
	Cluster bool `yaml:"cluster"`
	// MasterName is the master the Sentinels at Addrs watch.
	MasterName string `yaml:"master_name"`
	// PasswordEnv and SentinelPasswordEnv name environment variables
	// holding Redis' password (AUTH; every node of a Cluster) and the
	// Sentinels' own.
	PasswordEnv         string `yaml:"password_env"`
	SentinelPasswordEnv string `yaml:"sentinel_password_env"`
	Password            string `yaml:"-"`
	SentinelPassword    string `yaml:"-"`
	// Username and SentinelUsername are the ACL users (Redis 6+) the
	// passwords belong to; empty: the default user (AUTH with a password
	// alone).
	Username         string `yaml:"username"`
	SentinelUsername string `yaml:"sentinel_username"`
	// TLS connects to every node (and Sentinel) over TLS.
	TLS RedisTLS `yaml:"tls"`
	// MinReplicaAcks, when > 0, makes session creation, a prompt's start
	// and its end wait (WAIT) until that many replicas of the session's
	// master have them; fewer within the wait is an error (default 0: no
	// wait).
	MinReplicaAcks int    `yaml:"min_replica_acks"`
	DB             int    `yaml:"db"`
	KeyPrefix      string `yaml:"key_prefix"`
	// TimeoutMs bounds each Redis call: a dial, a command's write and
	// read, the wait for a pooled connection, and each store operation
	// (default 500, see redisconn.DefaultTimeout).
	TimeoutMs Millis `yaml:"timeout_ms"`
	// SyncIntervalMs is how often a replica refreshes its local view of the
	// credential store and, while Redis is unreachable, probes it (default
	// 1000).
	SyncIntervalMs Millis `yaml:"sync_interval_ms"`
	// LeaseMs is the lease a replica holds on a session while it runs a
	// prompt, renewed every third of it; a lost replica's prompts are taken
	// over by another within about 1.5 leases (default 10000).
	LeaseMs Millis `yaml:"lease_ms"`
	// SecretKeyEnv names an environment variable holding a 16, 24 or
	// 32-byte key that seals credential secrets in Redis (AES-GCM); every
	// replica needs the same one. Without it Redis holds them in clear.
	SecretKeyEnv string `yaml:"secret_key_env"`
	SecretKey    string `yaml:"-"`
}

// RedisTLS is store.redis.tls.
type RedisTLS struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of the CAs that sign the servers'
	// certificates; empty: the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key (PEM), for
	// servers that ask for one (tls-auth-clients).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the servers' certificates must carry; empty:
	// each address's host.
	ServerName string `yaml:"server_name"`
	// Config is what the fields above make (nil when not enabled).
	Config *tls.Config `yaml:"-"`
}

// Retry is the retry policy's settings group (docs/retry-policy.md). Unset
// fields keep its defaults.
type Retry struct {
	Enabled              *bool               `yaml:"enabled"`
	MaxRetries           *int                `yaml:"max_retries"`
	BaseDelayMs          *Millis             `yaml:"base_delay_ms"`
	MaxDelayMs           *Millis             `yaml:"max_delay_ms"`
	ModelFallback        *bool               `yaml:"model_fallback"`
	FallbackChains       map[string][]string `yaml:"fallback_chains"`
	FallbackRevertPolicy string              `yaml:"fallback_revert_policy"`
	// FallbackCooldownMs is how long a failing model cools down when the
	// provider gave no hint (0: the retry engine's estimate from the error's
	// wording — 30 s rate limit, 60 s overloaded, 20 s server error, 30 min
	// quota, 5 min otherwise).
	FallbackCooldownMs Millis `yaml:"fallback_cooldown_ms"`
	// Budget is the retry budget per provider/model (nil: none).
	Budget *RetryBudget `yaml:"budget"`
	// OverflowFallback: on a context overflow, move to the next chain model
	// with a larger catalog context_window.
	OverflowFallback bool `yaml:"overflow_fallback"`
}

// RetryBudget is retry.budget (gRFC A6 semantics, see retry.Budget):
// max_tokens is required, token_ratio defaults to 0.1.
type RetryBudget struct {
	MaxTokens  int      `yaml:"max_tokens"`
	TokenRatio *float64 `yaml:"token_ratio"`
}

// Auth maps bearer tokens to tenants.
type Auth struct {
	Tokens []Token `yaml:"tokens"`
}

// Token is one bearer token, given inline or by environment variable.
type Token struct {
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"`
	Tenant   string `yaml:"tenant"`
	// Admin lets the token's holder create and delete the credentials that
	// serve every tenant.
	Admin bool `yaml:"admin"`
}

// Provider is one configured upstream.
type Provider struct {
	Name        string            `yaml:"name"`
	Kind        string            `yaml:"kind"`
	BaseURL     string            `yaml:"base_url"`
	Models      []Model           `yaml:"models"`
	Credentials []Credential      `yaml:"credentials"`
	TimeoutMs   Millis            `yaml:"timeout_ms"`
	Headers     map[string]string `yaml:"headers"`
	// AutoRedeem is the default of its credentials' auto_redeem.
	AutoRedeem bool `yaml:"auto_redeem"`
	// ReadTimeoutMs bounds the provider's silence: the wait for the
	// response headers, then between two reads of the stream (0: none).
	ReadTimeoutMs Millis `yaml:"read_timeout_ms"`
	// AuthHeader carries the key: x-api-key (anthropic) or Authorization:
	// Bearer (openai) by default; "api-key" for Azure OpenAI.
	AuthHeader string `yaml:"auth_header"`
	// ChainResponses (openai-responses): send only new messages with
	// previous_response_id (the API stores responses).
	ChainResponses bool `yaml:"chain_responses"`
	// EncryptedReasoning (openai-responses): keep reasoning without
	// server-side state: store: false, reasoning items come back with
	// their encrypted content, which is kept in the history and sent back
	// to the same model and organisation. Not with chain_responses.
	EncryptedReasoning bool `yaml:"encrypted_reasoning"`
	// MaxTokens (anthropic): max_tokens of every request (default 8192).
	MaxTokens int `yaml:"max_tokens"`
	// Pacing (default true): a credential whose successful response shows
	// a rate-limit bucket at 0 remaining is treated as blocked until its
	// reset (reason paced). Off for a provider with auto_redeem credentials
	// (a paced block must not spend a banked reset).
	Pacing *bool `yaml:"pacing"`
	// Simulated provider pacing.
	FirstTokenDelayMs Millis `yaml:"first_token_delay_ms"`
	TokenDelayMs      Millis `yaml:"token_delay_ms"`
	// PromptCache (default true) uses the provider's prompt cache:
	// Anthropic cache breakpoints, OpenAI prompt_cache_key (the session
	// id), the simulated provider's cache. false turns it off.
	PromptCache *bool `yaml:"prompt_cache"`
	// StickyCredentials (default true) keeps each session on the
	// credential it used last while that one is available (the prompt
	// cache is per account); sessions are spread over the credentials when
	// they start. false: every call takes the next credential in rotation.
	StickyCredentials *bool `yaml:"sticky_credentials"`
	// Region (bedrock): the AWS region, e.g. "us-east-1"; empty: the
	// standard AWS chain's (AWS_REGION, the shared config's profile).
	Region string `yaml:"region"`
	// APIVersion (azure-openai): the api-version of every request, e.g.
	// "2024-10-21" (the default) or "2025-04-01-preview".
	APIVersion string `yaml:"api_version"`
	// API (azure-openai): the wire of the deployments, "chat" (Chat
	// Completions, the default) or "responses" (the Responses API).
	API string `yaml:"api"`
	// EntraID (azure-openai): the credentials' secrets are Microsoft Entra
	// ID client credentials ("TENANT_ID:CLIENT_ID:CLIENT_SECRET"), and
	// requests carry their access tokens as "Authorization: Bearer …"
	// instead of an api-key.
	EntraID bool `yaml:"entra_id"`
	// Project (vertex): the Google Cloud project of every request; empty:
	// each credential's (a service-account key's project_id, the
	// application default credentials' project).
	Project string `yaml:"project"`
	// Location (vertex): the region, e.g. "us-central1", or "global" (the
	// default).
	Location string `yaml:"location"`
	// TokenURL (vertex, azure-openai with entra_id): the OAuth 2.0 token
	// endpoint, replacing Google's or Entra ID's (a proxy, a test
	// server); for Entra ID "{tenant}" in it stands for the tenant id.
	TokenURL string `yaml:"token_url"`
}

// PromptCacheOn reports whether the provider uses its prompt cache
// (prompt_cache, default true).
func (p Provider) PromptCacheOn() bool { return p.PromptCache == nil || *p.PromptCache }

// Sticky reports whether sessions keep their credential
// (sticky_credentials, default true).
func (p Provider) Sticky() bool { return p.StickyCredentials == nil || *p.StickyCredentials }

// Paces reports whether the provider paces its credentials from the
// rate-limit headers (providers[].pacing, and no auto_redeem).
func (p Provider) Paces() bool {
	if p.Pacing != nil && !*p.Pacing || p.AutoRedeem {
		return false
	}
	for _, c := range p.Credentials {
		if c.AutoRedeem {
			return false
		}
	}
	return true
}

// Credential is one secret of a provider.
type Credential struct {
	ID           string `yaml:"id"`
	APIKey       string `yaml:"api_key"`
	APIKeyEnv    string `yaml:"api_key_env"`
	BankedResets int    `yaml:"banked_resets"`
	// AutoRedeem lets a usage limit spend one of the credential's banked
	// resets to unblock it at once (opt-in).
	AutoRedeem bool `yaml:"auto_redeem"`
	// Account names the account (organisation) of the key at its
	// provider, which reasoning state is bound to: credentials naming the
	// same account share it (a rotation between them keeps thinking).
	// Empty: the credential is an account of its own.
	Account string `yaml:"account"`
}

// Sessions tunes the session engine.
type Sessions struct {
	// EventBuffer is how many recent events each session keeps for resume.
	EventBuffer int `yaml:"event_buffer"`
	// MaxPromptBytes bounds a prompt's text.
	MaxPromptBytes int `yaml:"max_prompt_bytes"`
	// MaxSessions bounds the sessions of one process (0: no bound).
	MaxSessions int `yaml:"max_sessions"`
	// ToolResultTimeoutMs bounds the wait for a client's tool results
	// (default 600000, 10 min).
	ToolResultTimeoutMs Millis `yaml:"tool_result_timeout_ms"`
}

// Defaults of the values Load fills in.
const (
	DefaultGRPCAddr       = "127.0.0.1:9090"
	DefaultHTTPAddr       = "127.0.0.1:8080"
	DefaultEventBuffer    = 4096
	DefaultMaxPromptBytes = 1 << 20
	DefaultRedisAddr      = "127.0.0.1:6379"
	DefaultKeyPrefix      = "agentd:"

	DefaultMaxRequestBytes               = 4 << 20
	DefaultBodyTimeoutMs                 = 30000
	DefaultMaxSessionsPerTenant          = 1000
	DefaultMaxConcurrentPromptsPerTenant = 256
	DefaultMaxTools                      = 128
	DefaultMaxSystemPromptBytes          = 256 << 10
	DefaultMinBaseDelayMs                = 100
	DefaultMaxRetriesCap                 = 20
	DefaultMaxStreamsPerTenant           = 1000
	DefaultMaxCredentialsPerTenant       = 100
	DefaultMaxHistoryBytes               = 64 << 20
)

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads and validates a configuration. Unknown keys are errors.
func Parse(r io.Reader) (*Config, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c Config
	if len(bytes.TrimSpace(data)) > 0 {
		root, err := oneDocument(data)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config: %s", describeYAMLError(err, root))
		}
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Default is the embedded default configuration: memory store, the sim
// provider, and anthropic / openai providers when their API keys are in the
// environment.
func Default() *Config {
	c := &Config{}
	if os.Getenv("ANTHROPIC_API_KEY") != "" {
		c.Providers = append(c.Providers, Provider{
			Name: "anthropic", Kind: provider.KindAnthropic, BaseURL: os.Getenv("ANTHROPIC_BASE_URL"),
			Credentials: []Credential{{ID: "anthropic-env", APIKeyEnv: "ANTHROPIC_API_KEY"}},
		})
	}
	if os.Getenv("OPENAI_API_KEY") != "" {
		c.Providers = append(c.Providers, Provider{
			Name: "openai", Kind: provider.KindOpenAIResponses, BaseURL: os.Getenv("OPENAI_BASE_URL"),
			Credentials: []Credential{{ID: "openai-env", APIKeyEnv: "OPENAI_API_KEY"}},
		})
	}
	if err := c.finish(); err != nil {
		// The embedded defaults are valid by construction.
		panic(err)
	}
	return c
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	idPattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	tenantPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// finish fills defaults and validates.
func (c *Config) finish() error {
	if c.Listen.GRPC == "" {
		c.Listen.GRPC = DefaultGRPCAddr
	}
	if c.Listen.HTTP == "" {
		c.Listen.HTTP = DefaultHTTPAddr
	}
	switch c.Store.Backend {
	case "":
		c.Store.Backend = "memory"
	case "memory", "redis":
	default:
		return fmt.Errorf("config: store.backend: %q is not memory or redis", c.Store.Backend)
	}
	if err := c.Store.Redis.finish(); err != nil {
		return err
	}
	if c.Sessions.EventBuffer == 0 {
		c.Sessions.EventBuffer = DefaultEventBuffer
	}
	if c.Sessions.EventBuffer < 16 {
		return fmt.Errorf("config: sessions.event_buffer: must be >= 16, got %d", c.Sessions.EventBuffer)
	}
	if c.Sessions.MaxPromptBytes == 0 {
		c.Sessions.MaxPromptBytes = DefaultMaxPromptBytes
	}
	if c.Sessions.MaxPromptBytes < 0 {
		return fmt.Errorf("config: sessions.max_prompt_bytes: must be > 0, got %d", c.Sessions.MaxPromptBytes)
	}
	if c.Sessions.ToolResultTimeoutMs < 0 {
		return fmt.Errorf("config: sessions.tool_result_timeout_ms: must be >= 0, got %d", c.Sessions.ToolResultTimeoutMs)
	}
	if c.Sessions.MaxSessions < 0 {
		return fmt.Errorf("config: sessions.max_sessions: must be >= 0, got %d", c.Sessions.MaxSessions)
	}
	if err := c.finishProviders(); err != nil {
		return err
	}
	if err := c.Limits.finish(c.Sessions.MaxPromptBytes); err != nil {
		return err
	}
	if err := c.finishAuth(); err != nil {
		return err
	}
	if err := c.HTTP.finish(); err != nil {
		return err
	}
	if err := c.checkListen(); err != nil {
		return err
	}
	if e := c.Telemetry.OTLP.Endpoint; e != "" {
		if _, _, err := net.SplitHostPort(e); err != nil {
			return fmt.Errorf("config: telemetry.otlp.endpoint: %q is not host:port", e)
		}
	}
	if c.Telemetry.ServiceName == "" {
		c.Telemetry.ServiceName = "agentd"
	}
	if _, err := c.RetrySettings(); err != nil {
		return err
	}
	if _, err := c.RetryBudget(); err != nil {
		return err
	}
	return nil
}

// RetryBudget returns retry.budget; the zero Budget (not Enabled) when the
// file sets none.
func (c *Config) RetryBudget() (retry.Budget, error) {
	rb := c.Retry.Budget
	if rb == nil {
		return retry.Budget{}, nil
	}
	b := retry.Budget{MaxTokens: rb.MaxTokens, TokenRatio: retry.DefaultBudgetRatio}
	if rb.TokenRatio != nil {
		b.TokenRatio = *rb.TokenRatio
	}
	if err := b.Validate(); err != nil {
		return retry.Budget{}, fmt.Errorf("config: %w", err)
	}
	return b, nil
}

// SetListen overrides listen.grpc and listen.http (an empty string keeps the
// current value), as the serve command's --grpc-addr and --http-addr do, and
// checks the result as Load checks the file: host:port, and loopback only
// without auth.tokens. On error the configuration is left unchanged.
func (c *Config) SetListen(grpc, http string) error {
	old := c.Listen
	if grpc != "" {
		c.Listen.GRPC = grpc
	}
	if http != "" {
		c.Listen.HTTP = http
	}
	if err := c.checkListen(); err != nil {
		c.Listen = old
		return err
	}
	return nil
}

// checkListen checks every listen address: each is host:port and, without
// auth.tokens, on loopback.
func (c *Config) checkListen() error {
	addrs := []struct{ key, addr string }{
		{"listen.grpc", c.Listen.GRPC}, {"listen.http", c.Listen.HTTP}, {"metrics.listen", c.Metrics.Listen},
	}
	for _, a := range addrs {
		if a.addr == "" && a.key == "metrics.listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("config: %s: %q is not host:port", a.key, a.addr)
		}
	}
	if len(c.Auth.Tokens) == 0 {
		// Without tokens there is one local tenant: never reachable from
		// beyond this machine.
		for _, a := range addrs {
			if a.addr != "" && !isLoopback(a.addr) {
				return fmt.Errorf("config: %s: %q is not a loopback address; without auth.tokens agentd listens on loopback only", a.key, a.addr)
			}
		}
	}
	return nil
}

func (c *Config) finishProviders() error {
	hasSim := false
	for _, p := range c.Providers {
		if p.Name == "sim" {
			hasSim = true
		}
	}
	if !hasSim {
		// The simulated provider is always there: demos and tests need no network.
		c.Providers = append(c.Providers, Provider{Name: "sim", Kind: provider.KindSimulated})
	}
	seen := map[string]bool{}
	credIDs := map[string]bool{}
	for i := range c.Providers {
		p := &c.Providers[i]
		key := fmt.Sprintf("providers[%d]", i)
		if !namePattern.MatchString(p.Name) {
			return fmt.Errorf("config: %s.name: %q must match %s", key, p.Name, namePattern)
		}
		if seen[p.Name] {
			return fmt.Errorf("config: %s.name: provider %q is defined twice", key, p.Name)
		}
		seen[p.Name] = true
		known := false
		for _, k := range provider.Kinds {
			known = known || k == p.Kind
		}
		if !known {
			return fmt.Errorf("config: %s.kind: %q is not a provider kind (one of %s)", key, p.Kind, strings.Join(provider.Kinds, ", "))
		}
		if p.TimeoutMs < 0 || p.ReadTimeoutMs < 0 || p.FirstTokenDelayMs < 0 || p.TokenDelayMs < 0 || p.MaxTokens < 0 {
			return fmt.Errorf("config: %s: timeout_ms, read_timeout_ms, max_tokens, first_token_delay_ms and token_delay_ms must be >= 0", key)
		}
		if p.BaseURL != "" {
			u, err := url.Parse(p.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("config: %s.base_url: %q is not an http(s) URL", key, p.BaseURL)
			}
		}

		if p.Kind == provider.KindSimulated && len(p.Models) == 0 {
			p.Models = []Model{{Name: "echo"}, {Name: "backup"}}
		}
		if err := p.checkModels(key); err != nil {
			return err
		}
		switch {
		case p.EncryptedReasoning && p.Kind != provider.KindOpenAIResponses && (p.Kind != provider.KindAzureOpenAI || p.API != "responses"):
			return fmt.Errorf("config: %s.encrypted_reasoning: only an openai-responses provider takes it (or azure-openai with api: responses)", key)
		case p.EncryptedReasoning && p.ChainResponses:
			return fmt.Errorf("config: %s.encrypted_reasoning: set encrypted_reasoning or chain_responses, not both", key)
		case p.Region != "" && p.Kind != provider.KindBedrock:
			return fmt.Errorf("config: %s.region: only a bedrock provider takes it", key)
		}
		if err := p.checkAzure(key); err != nil {
			return err
		}
		if err := p.checkVertex(key); err != nil {
			return err
		}
		for j := range p.Credentials {
			cr := &p.Credentials[j]
			ckey := fmt.Sprintf("%s.credentials[%d]", key, j)
			if !idPattern.MatchString(cr.ID) {
				return fmt.Errorf("config: %s.id: %q must match %s", ckey, cr.ID, idPattern)
			}
			if credIDs[cr.ID] {
				return fmt.Errorf("config: %s.id: credential %q is defined twice", ckey, cr.ID)
			}
			credIDs[cr.ID] = true
			if err := notExpanded(ckey+".api_key", cr.APIKey, "api_key_env"); err != nil {
				return err
			}
			if err := envName(ckey+".api_key_env", cr.APIKeyEnv); err != nil {
				return err
			}
			if cr.APIKey != "" && cr.APIKeyEnv != "" {
				return fmt.Errorf("config: %s: set api_key or api_key_env, not both", ckey)
			}
			if cr.APIKeyEnv != "" {
				cr.APIKey = os.Getenv(cr.APIKeyEnv)
				if cr.APIKey == "" {
					return fmt.Errorf("config: %s.api_key_env: environment variable %s is empty", ckey, cr.APIKeyEnv)
				}
			}
			if _, _, _, ok := provider.SplitEntraSecret(cr.APIKey); p.EntraID && !ok && (cr.APIKey != "" || cr.APIKeyEnv != "") {
				return fmt.Errorf("config: %s: with entra_id a secret is TENANT_ID:CLIENT_ID:CLIENT_SECRET", ckey)
			}
			if cr.BankedResets < 0 {
				return fmt.Errorf("config: %s.banked_resets: must be >= 0", ckey)
			}
			if cr.Account != "" && !idPattern.MatchString(cr.Account) {
				return fmt.Errorf("config: %s.account: %q must match %s", ckey, cr.Account, idPattern)
			}
		}
	}
	return nil
}

func (c *Config) finishAuth() error {
	seen := map[string]bool{}
	for i := range c.Auth.Tokens {
		t := &c.Auth.Tokens[i]
		key := fmt.Sprintf("auth.tokens[%d]", i)
		if err := notExpanded(key+".token", t.Token, "token_env"); err != nil {
			return err
		}
		if err := envName(key+".token_env", t.TokenEnv); err != nil {
			return err
		}
		if t.Token != "" && t.TokenEnv != "" {
			return fmt.Errorf("config: %s: set token or token_env, not both", key)
		}
		if t.TokenEnv != "" {
			t.Token = os.Getenv(t.TokenEnv)
			if t.Token == "" {
				return fmt.Errorf("config: %s.token_env: environment variable %s is empty", key, t.TokenEnv)
			}
		}
		if len(t.Token) < 16 {
			return fmt.Errorf("config: %s.token: must be at least 16 characters", key)
		}
		if !tenantPattern.MatchString(t.Tenant) {
			return fmt.Errorf("config: %s.tenant: %q must match %s", key, t.Tenant, tenantPattern)
		}
		if seen[t.Token] {
			return fmt.Errorf("config: %s.token: the same token is listed twice", key)
		}
		seen[t.Token] = true
	}
	return nil
}

func (l *Limits) finish(maxPromptBytes int) error {
	orDefault(&l.MaxRequestBytes, DefaultMaxRequestBytes)
	orDefault(&l.BodyTimeoutMs, DefaultBodyTimeoutMs)
	orDefault(&l.MaxSessionsPerTenant, DefaultMaxSessionsPerTenant)
	orDefault(&l.MaxConcurrentPromptsPerTenant, DefaultMaxConcurrentPromptsPerTenant)
	orDefault(&l.MaxTools, DefaultMaxTools)
	orDefault(&l.MaxSystemPromptBytes, DefaultMaxSystemPromptBytes)
	orDefault(&l.MinBaseDelayMs, DefaultMinBaseDelayMs)
	orDefault(&l.MaxRetriesCap, DefaultMaxRetriesCap)
	orDefault(&l.MaxStreamsPerTenant, DefaultMaxStreamsPerTenant)
	orDefault(&l.MaxCredentialsPerTenant, DefaultMaxCredentialsPerTenant)
	orDefault(&l.MaxHistoryBytes, DefaultMaxHistoryBytes)
	switch {
	case l.MaxRequestBytes < 4096 || l.MaxRequestBytes > 1<<30:
		return fmt.Errorf("config: limits.max_request_bytes: must be between 4096 and %d, got %d", 1<<30, l.MaxRequestBytes)
	case l.MaxRequestBytes < int64(maxPromptBytes):
		return fmt.Errorf("config: limits.max_request_bytes: %d is below sessions.max_prompt_bytes (%d): such prompts could never be sent", l.MaxRequestBytes, maxPromptBytes)
	case l.BodyTimeoutMs < 0:
		return fmt.Errorf("config: limits.body_timeout_ms: must be > 0, got %d", l.BodyTimeoutMs)
	case l.MaxSessionsPerTenant < 0:
		return fmt.Errorf("config: limits.max_sessions_per_tenant: must be > 0, got %d", l.MaxSessionsPerTenant)
	case l.MaxConcurrentPromptsPerTenant < 0:
		return fmt.Errorf("config: limits.max_concurrent_prompts_per_tenant: must be > 0, got %d", l.MaxConcurrentPromptsPerTenant)
	case l.MaxTools < 0:
		return fmt.Errorf("config: limits.max_tools: must be > 0, got %d", l.MaxTools)
	case l.MaxSystemPromptBytes < 0:
		return fmt.Errorf("config: limits.max_system_prompt_bytes: must be > 0, got %d", l.MaxSystemPromptBytes)
	case l.MinBaseDelayMs < 0:
		return fmt.Errorf("config: limits.min_base_delay_ms: must be > 0, got %d", l.MinBaseDelayMs)
	case l.MaxRetriesCap < 0:
		return fmt.Errorf("config: limits.max_retries_cap: must be > 0, got %d", l.MaxRetriesCap)
	case l.MaxStreamsPerTenant < 0:
		return fmt.Errorf("config: limits.max_streams_per_tenant: must be > 0, got %d", l.MaxStreamsPerTenant)
	case l.MaxCredentialsPerTenant < 0:
		return fmt.Errorf("config: limits.max_credentials_per_tenant: must be > 0, got %d", l.MaxCredentialsPerTenant)
	case l.MaxHistoryBytes < 0:
		return fmt.Errorf("config: limits.max_history_bytes: must be > 0, got %d", l.MaxHistoryBytes)
	}
	return nil
}

// orDefault sets an unset (zero) value to its default.
func orDefault[T int | int64 | Millis](v *T, d T) {
	if *v == 0 {
		*v = d
	}
}

// RetrySettings returns the server-wide retry settings: the retry policy's
// defaults with the file's values applied.
func (c *Config) RetrySettings() (retry.Settings, error) {
	r := c.Retry
	o := retry.Overrides{Enabled: r.Enabled, MaxRetries: r.MaxRetries, ModelFallback: r.ModelFallback, FallbackChains: r.FallbackChains,
		BaseDelay: optionalDuration(r.BaseDelayMs), MaxDelay: optionalDuration(r.MaxDelayMs)}
	if r.FallbackRevertPolicy != "" {
		o.FallbackRevertPolicy = &r.FallbackRevertPolicy
	}
	s := retry.DefaultSettings().With(o)
	s.OverflowFallback = r.OverflowFallback
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("config: %w", err)
	}
	if r.FallbackCooldownMs < 0 {
		return s, fmt.Errorf("config: retry.fallback_cooldown_ms: must be >= 0, got %d", r.FallbackCooldownMs)
	}
	for role, chain := range s.FallbackChains {
		for i, ref := range chain {
			name, model, ok := strings.Cut(ref, "/")
			if !ok || !c.hasProvider(name) {
				return s, fmt.Errorf("config: retry.fallback_chains.%s[%d]: %q does not name a configured provider (provider/model)", role, i, ref)
			}
			// A provider that lists its models serves only those: a chain
			// naming another would make every session of the role fail at
			// creation, blaming the client.
			if models := c.modelsOf(name); len(models) > 0 && !slices.Contains(models, model) {
				return s, fmt.Errorf("config: retry.fallback_chains.%s[%d]: provider %q has no model %q (its models: %s)", role, i, name, model, strings.Join(models, ", "))
			}
		}
	}
	return s, nil
}

// modelsOf lists the models provider name serves (none: any model).
func (c *Config) modelsOf(name string) []string {
	for _, p := range c.Providers {
		if p.Name == name {
			out := make([]string, 0, len(p.Models))
			for _, m := range p.Models {
				out = append(out, m.Name)
			}
			return out
		}
	}
	return nil
}

func (c *Config) hasProvider(name string) bool {
	for _, p := range c.Providers {
		if p.Name == name {
			return true
		}
	}
	return false
}

// isLoopback reports whether a host:port listens on loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var (
	yamlPrefix   = regexp.MustCompile(`^yaml: (unmarshal errors:\n\s*)?`)
	unknownField = regexp.MustCompile(`line (\d+): field (\S+) not found in type config\.(\w+)`)
	// sections names the key path of each configuration type.
	sections = map[string]string{
		"Config": "", "Listen": "listen.", "Store": "store.", "Redis": "store.redis.",
		"Retry": "retry.", "RetryBudget": "retry.budget.", "Auth": "auth.", "Token": "auth.tokens[].", "Provider": "providers[].",
		"Credential": "providers[].credentials[].", "Model": "providers[].models[].",
		"ModelPrice": "providers[].models[].price.", "Sessions": "sessions.",
		"Limits": "limits.", "Metrics": "metrics.", "HTTP": "http.", "CORS": "http.cors.",
		"RedisTLS": "store.redis.tls.", "Telemetry": "telemetry.", "OTLP": "telemetry.otlp.",
	}
)

// cleanYAMLError makes yaml's messages one readable line that names the key,
// e.g. "listen.bogus: unknown key (line 3)".
func cleanYAMLError(err error) string {
	s := yamlPrefix.ReplaceAllString(err.Error(), "")
	s = unknownField.ReplaceAllStringFunc(s, func(m string) string {
		g := unknownField.FindStringSubmatch(m)
		return fmt.Sprintf("%s%s: unknown key (line %s)", sections[g[3]], g[2], g[1])
	})
	s = strings.ReplaceAll(s, "\n  ", "; ")
	return strings.TrimSpace(s)
}

// Defaults of the http section.
const (
	DefaultSSEHeartbeatMs = 15000
	DefaultTicketTTLMs    = 60000
	MaxTicketTTLMs        = 3600000
	DefaultIdleTimeoutMs  = 120000
)

func (h *HTTP) finish() error {
	for i, host := range h.AllowedHosts {
		if host == "" || strings.ContainsAny(host, "/:@ ") && net.ParseIP(strings.Trim(host, "[]")) == nil {
			return fmt.Errorf("config: http.allowed_hosts[%d]: %q is not a host name or address (no port, scheme or path)", i, host)
		}
		h.AllowedHosts[i] = strings.ToLower(strings.Trim(host, "[]"))
	}
	for i, o := range h.CORS.AllowedOrigins {
		norm, err := normalizeOrigin(o)
		if err != nil {
			return fmt.Errorf("config: http.cors.allowed_origins[%d]: %q %v", i, o, err)
		}
		h.CORS.AllowedOrigins[i] = norm
	}
	switch {
	case h.SSEHeartbeatMs == 0:
		h.SSEHeartbeatMs = DefaultSSEHeartbeatMs
	case h.SSEHeartbeatMs < 0:
		return fmt.Errorf("config: http.sse_heartbeat_ms: must be > 0, got %d", h.SSEHeartbeatMs)
	}
	switch {
	case h.TicketTTLMs == 0:
		h.TicketTTLMs = DefaultTicketTTLMs
	case h.TicketTTLMs < 0 || h.TicketTTLMs > MaxTicketTTLMs:
		return fmt.Errorf("config: http.ticket_ttl_ms: must be between 1 and %d, got %d", MaxTicketTTLMs, h.TicketTTLMs)
	}
	switch {
	case h.IdleTimeoutMs == 0:
		h.IdleTimeoutMs = DefaultIdleTimeoutMs
	case h.IdleTimeoutMs < 0:
		return fmt.Errorf("config: http.idle_timeout_ms: must be > 0, got %d", h.IdleTimeoutMs)
	}
	if err := envName("http.ticket_key_env", h.TicketKeyEnv); err != nil {
		return err
	}
	if h.TicketKeyEnv != "" {
		h.TicketKey = os.Getenv(h.TicketKeyEnv)
		if len(h.TicketKey) < 32 {
			return fmt.Errorf("config: http.ticket_key_env: environment variable %s must hold at least 32 bytes", h.TicketKeyEnv)
		}
	}
	return nil
}

// normalizeOrigin checks a CORS origin (scheme://host[:port] or "*") and
// returns it as browsers send it: lower case, without a default port.
func normalizeOrigin(o string) (string, error) {
	if o == "*" {
		return o, nil
	}
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Scheme == "" || u.Host == "" || u.Opaque != "":
		return "", errors.New("is not an origin (scheme://host[:port], or \"*\")")
	case u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(o, "?") || strings.HasSuffix(o, "#"):
		return "", errors.New("must be scheme://host[:port] only: no path (not even \"/\"), query or user")
	}
	port := u.Port()
	if u.Hostname() == "" || strings.HasSuffix(u.Host, ":") {
		return "", errors.New("has no host or an empty port")
	}
	hostPart := u.Host
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", errors.New("has a bad port")
		}
		hostPart = strings.TrimSuffix(u.Host, ":"+port)
	}
	scheme := strings.ToLower(u.Scheme)
	out := scheme + "://" + strings.ToLower(hostPart)
	if port != "" && !(scheme == "http" && port == "80" || scheme == "https" && port == "443") {
		out += ":" + port
	}
	return out, nil
}
