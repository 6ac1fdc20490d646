package localstack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// LeakReport is the result of a log scan for a secret.
type LeakReport struct {
	Checked int      // log files read
	Files   []string // base names of those that contain the secret
}

// SecretInLogs reads every *.log file in dir and lists those that contain
// secret. The processes ran with the secret in their environment (a database
// URL with its password): it must appear in none of their logs.
func SecretInLogs(dir, secret string) (LeakReport, error) {
	var r LeakReport
	if secret == "" {
		return r, errors.New("scanning logs for a secret: the secret is empty")
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return r, err
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return r, err
		}
		r.Checked++
		if strings.Contains(string(b), secret) {
			r.Files = append(r.Files, filepath.Base(l))
		}
	}
	return r, nil
}
