package consumer

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/idempotency-dev/operator/consumer/internal/redact"
)

// RedactDSN returns a PostgreSQL connection string (URL or key=value form)
// with every secret in it replaced, fit for logs and error messages: the
// URL's password, its password and sslpassword query parameters, and the
// password and sslpassword of a key=value string.
func RedactDSN(dsn string) string { return redact.DSN(dsn) }

// DSNSecrets lists the secret values of a connection string (URL or
// key=value form): its password and the client key's passphrase
// (sslpassword), for a redacting logger and for scrubbing messages.
func DSNSecrets(dsn string) []string { return redact.DSNSecrets(dsn) }

// Redact replaces every occurrence of each secret (and of its URL-escaped
// forms) in s; secrets shorter than 3 bytes are left alone. A sink uses it to
// keep its credentials out of the errors it returns, which become log
// attributes and dead-letter headers.
func Redact(s string, secrets ...string) string { return redact.Text(s, secrets...) }

// RedactingHandler wraps a slog.Handler and replaces the given secrets in
// every message and string or error attribute, as a last line of defence:
// the runtime never logs a secret on purpose, but an error from a driver
// might quote one.
func RedactingHandler(h slog.Handler, secrets ...string) slog.Handler {
	return redact.Handler(h, secrets...)
}

// AddSecrets registers values to keep out of the Consumer's log, of the
// errors it reports and of the dlq-error header, as it does with the
// database and SASL passwords: a sink's credentials, for example (see
// sink.HTTPConfig.Secrets). Call it before Run; it fails once Run has
// started.
func (c *Consumer) AddSecrets(secrets ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return errors.New("consumer: AddSecrets called after Run")
	}
	var add []string
	for _, s := range secrets {
		if len(s) >= 3 && !slices.Contains(c.secrets, s) && !slices.Contains(add, s) {
			add = append(add, s)
		}
	}
	if len(add) == 0 {
		return nil
	}
	c.secrets = append(slices.Clip(c.secrets), add...)
	// The logger already redacts the earlier secrets; this layer adds the new ones.
	c.log = slog.New(redact.Handler(c.log.Handler(), add...))
	return nil
}
