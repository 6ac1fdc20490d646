package event

import (
	"errors"
	"fmt"
	"time"
)

// RetryLater marks an error whose source asked to be called again later
// rather than failing: an HTTP 429 or 503 with Retry-After, a 409 or 425
// "a request with this key is still being processed". An external handler
// (NewExternal) that returns it is called again after a pause that uses no
// attempt (HandlerMaxAttempts): after d when d > 0 (a Retry-After), else
// after the handler backoff (HandlerBackoff, doubling up to
// HandlerBackoffMax). The pauses of one event add up to at most
// the consumer's Config.RetryLaterMax: a longer d is cut to what is left, and once it is
// used up the answer counts as an ordinary failed attempt (retried with the
// handler backoff, then the handler_failed policy). No pause is taken with
// a transaction open: the external handler's calls run outside
// transactions, and a transactional Handler's RetryLater error is an
// ordinary failed attempt.
func RetryLater(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryLaterError{err: err, after: max(d, 0)}
}

type retryLaterError struct {
	err   error
	after time.Duration
}

func (e *retryLaterError) Error() string {
	if e.after > 0 {
		return fmt.Sprintf("retry after %v: %v", e.after, e.err)
	}
	return "retry later: " + e.err.Error()
}
func (e *retryLaterError) Unwrap() error { return e.err }

// RetryLaterAfter reports whether err was marked with RetryLater (and not
// Permanent or Unavailable) and the pause it asked for (0: the handler
// backoff).
func RetryLaterAfter(err error) (time.Duration, bool) {
	var r *retryLaterError
	if !errors.As(err, &r) || IsPermanent(err) || IsUnavailable(err) {
		return 0, false
	}
	return r.after, true
}
