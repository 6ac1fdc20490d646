package sink_test

import (
	"context"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idempotency-dev/operator/consumer"
	"github.com/idempotency-dev/operator/consumer/sink"
)

// TestHTTPURLUserInfoStaysOut: credentials in the sink URL's user info
// (https://user:password@host/..., or a token as the user name) are sent by
// Go's HTTP client as a Basic Authorization header. A provider that echoes
// that header must not put the encoded credentials, or the token, into the
// handler's error (which becomes the dlq-error header and log lines); nor
// may Secrets miss them, since the runtime redacts with that list.
func TestHTTPURLUserInfoStaysOut(t *testing.T) {
	srv := echoServer(t)
	for _, tc := range []struct{ name, user, password string }{
		{"user and password", "hookuser", "pw-9a8b7c6d5e"},
		{"token as user name", "utok-1a2b3c4d5e6f7a8b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := url.Parse(srv.URL + "/hook")
			if err != nil {
				t.Fatal(err)
			}
			if tc.password != "" {
				u.User = url.UserPassword(tc.user, tc.password)
			} else {
				u.User = url.User(tc.user)
			}
			cfg := sink.HTTPConfig{URL: u.String(), Timeout: 5 * time.Second}
			h, err := sink.HTTP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = h(context.Background(), nil, &consumer.Event{ID: uuid.Must(uuid.NewV7()), Type: "echo", Payload: []byte(`{}`)})
			if err == nil {
				t.Fatal("no error from a 401")
			}
			basic := base64.StdEncoding.EncodeToString([]byte(tc.user + ":" + tc.password))
			secret := tc.password
			if secret == "" {
				secret = tc.user
			}
			for _, s := range []string{basic, secret} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("handler error holds %q: %s", s, err)
				}
			}
			// The runtime's list (Consumer.AddSecrets) must catch them too.
			text := "Authorization: Basic " + basic + " user " + secret
			if got := consumer.Redact(text, cfg.Secrets()...); strings.Contains(got, basic) || strings.Contains(got, secret) {
				t.Errorf("Secrets() misses the URL's credentials: %q redacted to %q", text, got)
			}
		})
	}
}
