package sink

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idempotency-dev/operator/consumer"
)

// HTTPConfig configures the HTTP sink.
type HTTPConfig struct {
	// URL the event payload is POSTed to. Required, http or https. Its path
	// and query may hold a token: messages show only its scheme and host
	// (see Secrets).
	URL string
	// Timeout of one request; default 10s.
	Timeout time.Duration
	// Authorization, when set, is sent as the Authorization header. Secret.
	Authorization string
	// Transport sends the requests; default http.DefaultTransport's
	// settings with 100 idle connections per host (not 2), enough for the
	// runtime's default MaxInFlight. It is wrapped in
	// consumer.IdempotencyKeyTransport.
	Transport http.RoundTripper
	// RetryableStatuses are the non-2xx answers retried rather than
	// dead-lettered at once; nil means DefaultRetryableStatuses (408, 409,
	// 425, 429 and 5xx). Drop 409 for an API that answers 409 for a real
	// conflict rather than "a request with this key is being processed".
	// ParseStatuses reads the "408,425,429,500-599" form.
	RetryableStatuses []int
	// IdempotencyKey is the template of the Idempotency-Key header; default
	// "{eventId}" (DefaultIdempotencyKey). See IdempotencyKeyTemplate.
	IdempotencyKey string
	// Group is the value of {group} in IdempotencyKey: the consumer group.
	Group string
}

// DefaultHTTPTimeout is the default request timeout.
const DefaultHTTPTimeout = 10 * time.Second

// Tokens in the URL shorter than these are not redacted one by one (the
// whole path and query still are): shorter segments and values are names
// ("services", "json") whose redaction would only garble the log.
const (
	minSecretPathSegment = 16
	minSecretQueryValue  = 8
)

// Secrets returns the values of cfg to keep out of logs, errors and
// dead-letter headers: the Authorization value and its credentials (the part
// after the scheme; for Basic, the decoded user:password and the password),
// the URL's password, its user name when it has no password or is at least
// 16 bytes, the Basic credentials Go's client derives from them, the URL's
// path and query, each query value of at least 8 bytes and each path segment
// of at least 16 (tokens such as a webhook's secret segment). The sink redacts them from its own errors; register them
// with consumer.Consumer.AddSecrets so the runtime does too.
func (cfg HTTPConfig) Secrets() []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if a := strings.TrimSpace(cfg.Authorization); a != "" {
		add(a)
		if scheme, cred, ok := strings.Cut(a, " "); ok {
			cred = strings.TrimSpace(cred)
			add(cred)
			if strings.EqualFold(scheme, "basic") {
				if dec, err := base64.StdEncoding.DecodeString(cred); err == nil {
					add(string(dec))
					if _, pw, ok := strings.Cut(string(dec), ":"); ok {
						add(pw)
					}
				}
			}
		}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return out
	}
	if u.User != nil {
		// Go's client sends the user info as a Basic Authorization header
		// (when none is configured), which a provider may echo. A user name
		// without a password is usually a token; a long one may be.
		user := u.User.Username()
		pw, hasPW := u.User.Password()
		if hasPW {
			add(pw)
		}
		if !hasPW || len(user) >= minSecretPathSegment {
			add(user)
		}
		add(base64.StdEncoding.EncodeToString([]byte(user + ":" + pw)))
	}
	if p := u.EscapedPath(); p != "" && p != "/" {
		add(p)
		add(u.Path)
		for _, seg := range strings.Split(u.Path, "/") {
			if len(seg) >= minSecretPathSegment {
				add(seg)
			}
		}
	}
	if u.RawQuery != "" {
		add(u.RawQuery)
		for _, vs := range u.Query() {
			for _, v := range vs {
				if len(v) >= minSecretQueryValue {
					add(v)
				}
			}
		}
	}
	return out
}

// HTTPError is a non-2xx answer.
type HTTPError struct {
	StatusCode int
	Body       string // the first 256 bytes
}

func (e *HTTPError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d", e.StatusCode)
	}
	return fmt.Sprintf("HTTP %d: %s", e.StatusCode, e.Body)
}

// HTTP returns a handler that POSTs ev.Payload to cfg.URL with the headers
// Idempotency-Key (the event id, or cfg.IdempotencyKey filled in),
// Content-Type (the record's content-type header, else application/json),
// traceparent/tracestate (the handler span's when tracing is on, else the
// record's own, if it had them), and Authorization when configured.
//
// Outcome (the table in docs/consumer.md, "Sinks"): 2xx is success. The
// retryable statuses (cfg.RetryableStatuses, default 408, 409, 425, 429 and
// 5xx), timeouts and connections lost after the request was sent are
// retried by the runtime with the same Idempotency-Key. 409, 425 and 429,
// and 503 with Retry-After, are consumer.RetryLater: an external handler
// pauses (the Retry-After, seconds or an HTTP date, else the handler
// backoff) without using an attempt, within Config.RetryLaterMax. The other
// retryable answers use attempts, then the event is dead-lettered. Other
// non-2xx answers are dead-lettered at once (consumer.Permanent). A
// connection that can't be established at all (refused, no route, DNS
// failure) means nothing was delivered: the error is consumer.Unavailable,
// so the runtime pauses and retries without dead-lettering while the
// endpoint is down.
func HTTP(cfg HTTPConfig) (consumer.Handler, error) {
	post, err := HTTPExternal(cfg)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, _ pgx.Tx, ev *consumer.Event) error { return post(ctx, ev) }, nil
}

// HTTPExternal is HTTP as an external handler (consumer.NewExternal): the
// request is sent with no database transaction open, concurrently with
// other events' requests as the consumer's ordering allows, and its event id
// is recorded after the answer. This is the form cmd/consumer uses.
func HTTPExternal(cfg HTTPConfig) (consumer.ExternalHandler, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q: must be an absolute http or https URL", redactURL(cfg.URL))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultHTTPTimeout
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("timeout: must not be negative")
	}
	key, err := ParseIdempotencyKey(cfg.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	retryable := DefaultRetryableStatuses
	if cfg.RetryableStatuses != nil {
		if err := checkStatuses(cfg.RetryableStatuses); err != nil {
			return nil, err
		}
		retryable = slices.Clone(cfg.RetryableStatuses)
	}
	base := cfg.Transport
	if base == nil {
		base = defaultTransport()
	}
	client := &http.Client{
		Transport: &consumer.IdempotencyKeyTransport{Base: base},
		Timeout:   cfg.Timeout,
		// A redirect would re-send the body elsewhere; report it instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	target := u.String()
	// Errors name the endpoint without path or query, and lose any secret an
	// answer echoes: they end up in logs and dead-letter headers.
	shown := redactURL(target)
	secrets := cfg.Secrets()
	return func(ctx context.Context, ev *consumer.Event) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(ev.Payload))
		if err != nil {
			return consumer.Permanent(err)
		}
		ct := "application/json"
		if v, ok := ev.Header("content-type"); ok && len(v) > 0 {
			ct = string(v)
		}
		req.Header.Set("Content-Type", ct)
		if ev.Type != "" {
			req.Header.Set("Event-Type", ev.Type)
		}
		if cfg.Authorization != "" {
			req.Header.Set("Authorization", cfg.Authorization)
		}
		req.Header.Set(consumer.IdempotencyKeyHeader, key.Key(cfg.Group, ev))
		resp, err := client.Do(req)
		if err != nil {
			err = fmt.Errorf("POST %s: %w", shown, redactErr(unwrapURLError(err), secrets))
			if notConnected(err) {
				return consumer.Unavailable(err)
			}
			return err
		}
		defer resp.Body.Close()
		// Read past the 256 bytes kept, so that a secret the answer echoes
		// across the cut is still redacted whole.
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return nil
		}
		body := consumer.Redact(strings.TrimSpace(string(snippet)), secrets...)
		if len(body) > 256 {
			body = body[:256]
		}
		herr := &HTTPError{StatusCode: resp.StatusCode, Body: body}
		return classify(herr, slices.Contains(retryable, resp.StatusCode), resp.Header.Get("Retry-After"), time.Now())
	}, nil
}

// DefaultRetryableStatuses are the answers the HTTP sink retries by default:
// 408, 409, 425, 429 and 500 to 599. Do not modify.
var DefaultRetryableStatuses = append([]int{
	http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests,
}, statusRange(500, 599)...)

// DefaultRetryableStatusesText is DefaultRetryableStatuses in the form
// ParseStatuses reads.
const DefaultRetryableStatusesText = "408,409,425,429,500-599"

func statusRange(lo, hi int) []int {
	var out []int
	for s := lo; s <= hi; s++ {
		out = append(out, s)
	}
	return out
}

// ParseStatuses reads a comma-separated list of HTTP statuses and ranges
// ("408,425,429,500-599"), each between 400 and 599. An empty string is an
// empty list: nothing is retried.
func ParseStatuses(s string) ([]int, error) {
	out := []int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("retryable statuses: %q is not a status or a range such as 500-599", part)
		}
		for st := a; st <= b; st++ {
			if !slices.Contains(out, st) {
				out = append(out, st)
			}
		}
	}
	if err := checkStatuses(out); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

func checkStatuses(sts []int) error {
	for _, st := range sts {
		if st < 400 || st > 599 {
			return fmt.Errorf("retryable statuses: %d is not between 400 and 599", st)
		}
	}
	return nil
}

// classify turns a non-2xx answer into the runtime's error kinds.
func classify(herr *HTTPError, retryable bool, retryAfter string, now time.Time) error {
	st := herr.StatusCode
	switch {
	case !retryable:
		return consumer.Permanent(herr)
	case st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable:
		if d, ok := parseRetryAfter(retryAfter, now); ok {
			return consumer.RetryLater(herr, d)
		}
		if st == http.StatusTooManyRequests {
			return consumer.RetryLater(herr, 0)
		}
		return herr
	case st == http.StatusConflict || st == http.StatusTooEarly:
		// "A request with this key is still being processed": the handler
		// backoff, without using an attempt.
		return consumer.RetryLater(herr, 0)
	default:
		return herr
	}
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110 10.2.3). A date in the past is no pause; anything else is
// ignored.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(24*time.Hour/time.Second) {
			n = int64(24 * time.Hour / time.Second) // the runtime caps it far lower anyway
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), time.Millisecond), true
}

// defaultTransport is http.DefaultTransport keeping as many idle connections
// per host as in all (100): the default keeps 2, so with the runtime's 64
// calls in flight to one provider nearly every request would open a new
// connection (and a TLS handshake).
func defaultTransport() http.RoundTripper {
	dt, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t := dt.Clone()
	t.MaxIdleConnsPerHost = max(t.MaxIdleConns, consumer.DefaultMaxInFlight)
	return t
}

// notConnected reports a failure to establish the connection, when the
// request certainly was not delivered.
func notConnected(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial" && !opErr.Timeout()
}

// unwrapURLError drops the url.Error wrapper, whose text repeats the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redactURL shows a URL in messages as its scheme and host: user info, path
// and query may hold tokens.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<invalid URL>"
	}
	out := u.Scheme + "://" + u.Host
	if u.User != nil {
		out = u.Scheme + "://xxxxx@" + u.Host
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		out += "/xxxxx"
	}
	return out
}

// redactErr returns err, or an error with the secrets replaced in its text
// that still unwraps to err (for notConnected and errors.Is).
func redactErr(err error, secrets []string) error {
	text := consumer.Redact(err.Error(), secrets...)
	if text == err.Error() {
		return err
	}
	return &redactedError{text: text, err: err}
}

type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }
