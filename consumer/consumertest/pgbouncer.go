package consumertest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// StartPgBouncer starts a PgBouncer (the pgbouncer binary on PATH, Debian's
// package) in transaction pooling mode in front of the database of
// upstream, a URL such as DatabaseURL returns, and returns the URL that
// reaches the same database through it (the same user and password). It is
// stopped when the test ends. The test is skipped when pgbouncer is not
// installed, and fails instead under CI.
func StartPgBouncer(tb testing.TB, upstream string) string {
	tb.Helper()
	return StartPgBouncerMode(tb, upstream, "transaction")
}

// StartPgBouncerMode is StartPgBouncer with PgBouncer's pool_mode set to
// mode: "session", "transaction" or "statement".
func StartPgBouncerMode(tb testing.TB, upstream, mode string) string {
	tb.Helper()
	if _, err := exec.LookPath("pgbouncer"); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("consumertest: pgbouncer is not installed (Debian package pgbouncer; .ci/run installs it)")
		}
		tb.Skip("pgbouncer is not installed (apt-get install pgbouncer)")
	}
	pooled, stop, err := startPgBouncer(upstream, mode)
	if err != nil {
		tb.Fatalf("consumertest: %v", err)
	}
	tb.Cleanup(stop)
	return pooled
}

// StartPgBouncerProcess is StartPgBouncer outside a test: it returns the
// pooled URL and a function that stops PgBouncer and removes its files.
func StartPgBouncerProcess(upstream string) (pooled string, stop func(), err error) {
	return startPgBouncer(upstream, "transaction")
}

func startPgBouncer(upstream, mode string) (pooled string, stop func(), err error) {
	switch mode {
	case "session", "transaction", "statement":
	default:
		return "", nil, fmt.Errorf("pgbouncer pool_mode %q: want session, transaction or statement", mode)
	}
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		return "", nil, fmt.Errorf("pgbouncer is not installed (Debian package pgbouncer): %w", err)
	}
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, err
	}
	pass, _ := u.User.Password()
	db := u.Path[1:]
	port, err := FreePort()
	if err != nil {
		return "", nil, err
	}
	// Not a test's TempDir: its parent is the test's, which another user
	// can't traverse.
	dir, err := os.MkdirTemp("", "consumertest-pgbouncer-")
	if err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, func(), error) {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root, as PostgreSQL does.
		name := os.Getenv("PGTEST_USER")
		if name == "" {
			name = "postgres"
		}
		if cred, err = lookupCredential(name); err != nil {
			return fail(err)
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	// auth_type any: the client's user name is taken as given and the
	// server connection logs in with the password written here; fine for a
	// throwaway loopback pooler. max_prepared_statements does not exist in
	// 1.18: prepared statements do not survive a transaction there.
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s password=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = %s
default_pool_size = 20
max_client_conn = 500
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, db, u.Hostname(), u.Port(), db, u.User.Username(), pass, port, mode,
		filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o600); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(cfg, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	cmd := exec.Command(bin, cfg) //nolint:gosec // G204: the pgbouncer binary found on PATH, with the harness's own config
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("starting pgbouncer: %w", err))
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = os.RemoveAll(dir)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			stop()
			return "", nil, fmt.Errorf("pgbouncer exited: %s\n%s", out.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("pgbouncer does not listen on %s: %s", addr, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	p := *u
	p.Host = addr
	return p.String(), stop, nil
}
