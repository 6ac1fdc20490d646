package app

import (
	"io"
	"strings"
	"testing"

	"github.com/idempotency-dev/operator/consumer/envvars"
)

// TestHTTPSinkSecrets (issue 12, redaction): the HTTP sink's Authorization
// token and the tokens in its URL's path and query join the values the
// binary keeps out of its log, so that an endpoint echoing one is redacted.
func TestHTTPSinkSecrets(t *testing.T) {
	const bearer, pathTok, queryTok = "tok-bearer-9a8b7c6d5e", "XyZpathtoken0123456789ab", "qsig-77aa88bb99"
	m := base()
	m[envvars.Sink] = "http"
	m[envvars.SinkHTTPURL] = "https://hooks.example.com/services/T01/" + pathTok + "?sig=" + queryTok + "&format=json"
	m[envvars.SinkHTTPAuthorization] = "Bearer " + bearer
	o, err := Parse(nil, env(m), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	echo := "401 from endpoint: token " + bearer + " refused for segment " + pathTok + " (sig " + queryTok + ")"
	got := redact(echo, o.Secrets)
	for _, sec := range []string{bearer, pathTok, queryTok} {
		if strings.Contains(got, sec) {
			t.Errorf("the log keeps %q: %s", sec, got)
		}
	}
	if plain := "batch for services/T01 in json"; redact(plain, o.Secrets) != plain {
		t.Errorf("short path segments and query values redacted too: %s", redact(plain, o.Secrets))
	}
}
