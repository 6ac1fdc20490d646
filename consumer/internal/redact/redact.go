package redact

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

const redacted = "xxxxx"

// kvPassword matches password=... and sslpassword=... (the client key's
// passphrase) in a key=value DSN, quoted or not.
var kvPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)

// secretParam reports whether a URL query parameter carries a secret:
// password and sslpassword, whatever their case (libpq's names are
// lower case; an upper-case one is masked all the same).
func secretParam(key string) bool {
	return strings.HasSuffix(strings.ToLower(key), "password")
}

// isURL reports whether a connection string is in the URL form.
func isURL(dsn string) bool {
	l := strings.ToLower(dsn)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// DSN returns a PostgreSQL connection string (URL or key=value form)
// with every secret in it replaced, fit for logs and error messages: the
// URL's password, its password and sslpassword query parameters, and the
// password and sslpassword of a key=value string.
func DSN(dsn string) string {
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			// An unparsable URL may still hold a password: keep only the scheme.
			return strings.SplitN(dsn, "://", 2)[0] + "://" + redacted
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = redacted // a query that does not parse may hold one too
			return u.String()
		}
		masked := false
		for k := range q {
			if secretParam(k) {
				q[k] = []string{redacted}
				masked = true
			}
		}
		if masked {
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}"+redacted)
}

// DSNSecrets lists the secret values of a connection string (URL or
// key=value form): its password and the client key's passphrase
// (sslpassword), for a redacting logger and for scrubbing messages.
func DSNSecrets(dsn string) []string {
	var out []string
	add := func(v string) {
		if v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil
		}
		if p, ok := u.User.Password(); ok {
			add(p)
		}
		q, _ := url.ParseQuery(u.RawQuery)
		for k, vs := range q {
			if secretParam(k) {
				for _, v := range vs {
					add(v)
				}
			}
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[2]
		if len(v) >= 2 && strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") {
			v = strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(v[1 : len(v)-1])
		}
		add(v)
	}
	return out
}

// Text replaces every occurrence of each secret (and its URL-escaped
// forms) in s; secrets shorter than 3 bytes are left alone.
func Text(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) < 3 { // too short to replace without mangling the text
			continue
		}
		s = strings.ReplaceAll(s, sec, redacted)
		if esc := url.QueryEscape(sec); esc != sec {
			s = strings.ReplaceAll(s, esc, redacted)
		}
		if esc := url.PathEscape(sec); esc != sec {
			s = strings.ReplaceAll(s, esc, redacted)
		}
	}
	return s
}

func ErrorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Handler wraps a slog.Handler and replaces the given secrets in
// every message and string or error attribute, as a last line of defence:
// the runtime never logs a secret on purpose, but an error from a driver
// might quote one.
func Handler(h slog.Handler, secrets ...string) slog.Handler {
	var keep []string
	for _, s := range secrets {
		if len(s) >= 3 {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return h
	}
	return &redactingHandler{next: h, secrets: keep}
}

type redactingHandler struct {
	next    slog.Handler
	secrets []string
}

func (h *redactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message, h.secrets...), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *redactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String(), h.secrets...))
	case slog.KindGroup:
		attrs := v.Group()
		out := make([]slog.Attr, len(attrs))
		for i, g := range attrs {
			out[i] = h.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, Text(err.Error(), h.secrets...))
		}
		if s, ok := v.Any().(interface{ String() string }); ok {
			return slog.String(a.Key, Text(s.String(), h.secrets...))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

func (h *redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.attr(a)
	}
	return &redactingHandler{next: h.next.WithAttrs(out), secrets: h.secrets}
}

func (h *redactingHandler) WithGroup(name string) slog.Handler {
	return &redactingHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// Err returns err unchanged unless its text holds a secret; then an
// error with the secret replaced, which still unwraps to err.
func Err(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	r := Text(s, secrets...)
	if r == s {
		return err
	}
	return &redactedError{text: r, err: err}
}

type redactedError struct {
	text string
	err  error
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }
