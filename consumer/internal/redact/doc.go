// Package redact keeps secrets out of what the runtime logs and reports:
// it masks the secrets of a PostgreSQL connection string (DSN, DSNSecrets),
// replaces known secret values in text and errors (Text, Err), and wraps a
// slog.Handler to do so for every record (Handler). The public package
// consumer re-exports RedactDSN, DSNSecrets, Redact and RedactingHandler.
//
// File map:
//   - redact.go: DSN, DSNSecrets, Text, Err, Handler
package redact
