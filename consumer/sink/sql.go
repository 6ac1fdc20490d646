package sink

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idempotency-dev/operator/consumer"
)

// SQL statement parameters, by number.
const (
	ParamEventID    = 1 // uuid: the event id
	ParamPayload    = 2 // bytes: the payload; PostgreSQL types it from the statement (jsonb, bytea, text)
	ParamKey        = 3 // bytea: the record key, NULL if none
	ParamTopic      = 4 // text
	ParamPartition  = 5 // integer
	ParamOffset     = 6 // bigint
	ParamType       = 7 // text: the event type, '' if none
	ParamOccurredAt = 8 // timestamptz: the envelope's time, else the UUID v7 time
	MaxParam        = ParamOccurredAt
)

// MaxStatementBytes is the longest statement accepted.
const MaxStatementBytes = 8192

// SQLConfig configures the SQL sink.
type SQLConfig struct {
	// Statement is run once per new event, inside the dedup transaction,
	// with parameters $1..$8 (see the Param constants); it may use any
	// subset, each as often as it likes. Example:
	//   INSERT INTO ledger (event_id, amount) VALUES ($1, ($2::jsonb->>'amount')::numeric)
	Statement string
}

// SQL returns a handler that runs cfg.Statement in the event's transaction.
// Errors of SQLSTATE class 22 (data exception) and 23 (integrity violation)
// come from the event's data and are dead-lettered at once; class 42 (syntax,
// undefined table or column, privileges) means the statement or schema is
// broken, so the batch pauses (consumer.Unavailable) instead of
// dead-lettering every event; anything else is retried, then dead-lettered.
func SQL(cfg SQLConfig) (consumer.Handler, error) {
	stmt, used, err := parseStatement(cfg.Statement)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, tx pgx.Tx, ev *consumer.Event) error {
		args := make([]any, len(used))
		for i, n := range used {
			args[i] = paramValue(ev, n)
		}
		if _, err := tx.Exec(ctx, stmt, args...); err != nil {
			return classifySQLError(err)
		}
		return nil
	}, nil
}

// Check prepares the statement on conn (as the sink will send it), so that a
// syntax error or a missing table shows before the first event.
func (c SQLConfig) Check(ctx context.Context, conn *pgx.Conn) error {
	stmt, _, err := parseStatement(c.Statement)
	if err != nil {
		return err
	}
	_, err = conn.Prepare(ctx, "", stmt)
	return err
}

func paramValue(ev *consumer.Event, n int) any {
	switch n {
	case ParamEventID:
		return ev.ID
	case ParamPayload:
		return ev.Payload
	case ParamKey:
		return ev.Key
	case ParamTopic:
		return ev.Topic
	case ParamPartition:
		return ev.Partition
	case ParamOffset:
		return ev.Offset
	case ParamType:
		return ev.Type
	case ParamOccurredAt:
		return ev.OccurredAt
	}
	return nil
}

func classifySQLError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "22"), strings.HasPrefix(pgErr.Code, "23"):
			return consumer.Permanent(err)
		case strings.HasPrefix(pgErr.Code, "42"):
			return consumer.Unavailable(err)
		}
	}
	return err
}

// ParamCount validates a statement and returns the highest $N it uses. It
// skips string literals, quoted identifiers, dollar-quoted strings and
// comments, so "$1" inside them doesn't count.
func ParamCount(stmt string) (int, error) {
	_, used, err := parseStatement(stmt)
	if err != nil {
		return 0, err
	}
	highest := 0
	for _, n := range used {
		highest = max(highest, n)
	}
	return highest, nil
}

// parseStatement validates stmt and renumbers its parameters densely: a
// statement using only $2 and $5 becomes one using $1 and $2, and used is
// [2 5]. PostgreSQL must infer a type for every parameter up to the highest,
// so parameters the statement doesn't mention can't be sent at all.
func parseStatement(stmt string) (rewritten string, used []int, err error) {
	if strings.TrimSpace(stmt) == "" {
		return "", nil, errors.New("statement: must not be empty")
	}
	if len(stmt) > MaxStatementBytes {
		return "", nil, fmt.Errorf("statement: %d bytes, at most %d", len(stmt), MaxStatementBytes)
	}
	type ref struct{ start, end, n int }
	var refs []ref
	s := stmt
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			j := i + 1
			for ; j < len(s); j++ {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c { // doubled quote
						j++
						continue
					}
					break
				}
			}
			if j >= len(s) {
				return "", nil, errors.New("statement: unterminated quoted string")
			}
			i = j
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return "", nil, errors.New("statement: unterminated comment")
			}
			i += 2 + end + 1
		case c == '$':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if j > i+1 && (i == 0 || !isIdentChar(s[i-1])) { // $N (a$1 is an identifier)
				var n int
				if _, err := fmt.Sscan(s[i+1:j], &n); err != nil || n < 1 || n > MaxParam {
					return "", nil, fmt.Errorf("statement: parameter $%s: only $1..$%d exist", s[i+1:j], MaxParam)
				}
				refs = append(refs, ref{i, j, n})
				i = j - 1
				continue
			}
			// $tag$ ... $tag$ dollar quoting
			k := j
			for k < len(s) && (s[k] == '_' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= '0' && s[k] <= '9') {
				k++
			}
			if k < len(s) && s[k] == '$' && (i == 0 || !isIdentChar(s[i-1])) {
				tag := s[i : k+1]
				end := strings.Index(s[k+1:], tag)
				if end < 0 {
					return "", nil, errors.New("statement: unterminated dollar-quoted string")
				}
				i = k + 1 + end + len(tag) - 1
			}
		}
	}
	seen := map[int]bool{}
	for _, r := range refs {
		if !seen[r.n] {
			seen[r.n] = true
			used = append(used, r.n)
		}
	}
	sort.Ints(used)
	newNum := make(map[int]int, len(used))
	for i, n := range used {
		newNum[n] = i + 1
	}
	var b strings.Builder
	last := 0
	for _, r := range refs {
		b.WriteString(s[last:r.start])
		b.WriteString("$" + strconv.Itoa(newNum[r.n]))
		last = r.end
	}
	b.WriteString(s[last:])
	return b.String(), used, nil
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
