package localstack

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The scan names exactly the logs that hold the secret, reads only *.log
// files, and refuses an empty secret (which every log would "contain").
func TestSecretInLogs(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"consumer-1.log": "connecting to postgres://app:***@127.0.0.1/db\n",
		"consumer-2.log": "error: postgres://app:s3cret@127.0.0.1/db refused\n",
		"broker.log":     "BROKERS 127.0.0.1:9092\n",
		"notes.txt":      "s3cret\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := SecretInLogs(dir, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	want := LeakReport{Checked: 3, Files: []string{"consumer-2.log"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SecretInLogs = %+v, want %+v", got, want)
	}
	if _, err := SecretInLogs(dir, ""); err == nil {
		t.Fatal("SecretInLogs with an empty secret: no error")
	}
}

func TestSetEnv(t *testing.T) {
	got := SetEnv([]string{"A=1", "CONSUMER_LISTEN_ADDR=:8080", "B=2"}, "CONSUMER_LISTEN_ADDR", "127.0.0.1:1")
	want := []string{"A=1", "B=2", "CONSUMER_LISTEN_ADDR=127.0.0.1:1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SetEnv = %v, want %v", got, want)
	}
}
