package consumertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL names the environment variable that points the harness at an
// existing PostgreSQL server instead of starting a throwaway one. The URL must
// name a role allowed to CREATE DATABASE; each test gets a database of its own.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// Postgres is a throwaway PostgreSQL cluster: initdb into a temporary directory,
// a free loopback port, password authentication, fsync on as in production.
//
// When the process runs as root (PostgreSQL refuses to), the server runs as the
// "postgres" system user, or the user named by PGTEST_USER; as a normal user it
// runs as that user. The server binaries (initdb, postgres, pg_ctl) are taken
// from PATH, then from PGTEST_BINDIR, then from /usr/lib/postgresql/*/bin.
type Postgres struct {
	dir      string
	bindir   string
	port     int
	password string
	cred     *syscall.Credential
	cmd      *exec.Cmd
	exited   chan struct{}
	logPath  string
	settings []string
	// afterInit runs after initdb, before the first start (e.g. WithTLS
	// writing its certificate files into the cluster directory).
	afterInit []func(*Postgres) error
	mu        sync.Mutex
}

// PostgresOption configures StartPostgres.
type PostgresOption func(*Postgres)

// WithSetting sets a server configuration parameter (postgres -c name=value),
// e.g. WithSetting("track_commit_timestamp", "on").
func WithSetting(name, value string) PostgresOption {
	return func(pg *Postgres) { pg.settings = append(pg.settings, "-c", name+"="+value) }
}

// StartPostgres initialises and starts a new cluster. Stop removes it.
func StartPostgres(opts ...PostgresOption) (*Postgres, error) {
	bindir, err := findPGBin()
	if err != nil {
		return nil, err
	}
	pg := &Postgres{bindir: bindir, password: randomHex(16)}
	for _, o := range opts {
		o(pg)
	}
	if os.Geteuid() == 0 {
		name := os.Getenv("PGTEST_USER")
		if name == "" {
			name = "postgres"
		}
		cred, err := lookupCredential(name)
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as another user: %w (create the user or set PGTEST_USER)", err)
		}
		pg.cred = cred
	}
	base := os.Getenv("PGTEST_TMPDIR") // default os.TempDir
	pg.dir, err = os.MkdirTemp(base, "consumertest-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating cluster directory: %w", err)
	}
	if err := pg.chown(pg.dir); err != nil {
		pg.removeDir()
		return nil, err
	}
	if err := pg.initdb(); err != nil {
		pg.removeDir()
		return nil, err
	}
	for _, f := range pg.afterInit {
		if err := f(pg); err != nil {
			pg.removeDir()
			return nil, err
		}
	}
	if err := pg.Start(); err != nil {
		pg.removeDir()
		return nil, err
	}
	return pg, nil
}

func (pg *Postgres) dataDir() string { return filepath.Join(pg.dir, "data") }

func (pg *Postgres) initdb() error {
	pwfile := filepath.Join(pg.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(pg.password+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing password file: %w", err)
	}
	if err := pg.chown(pwfile); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(pg.bindir, "initdb"), //nolint:gosec // G204: the PostgreSQL binaries the harness found on this machine
		"-D", pg.dataDir(), "-U", "postgres", "--pwfile="+pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-instructions")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	cmd.Dir = pg.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %w: %s", err, tail(out, 2000))
	}
	_ = os.Remove(pwfile)
	return nil
}

// Start starts the server (again, after Kill or StopServer) on the same port.
func (pg *Postgres) Start() error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd != nil {
		return errors.New("postgres: already running")
	}
	if pg.port == 0 {
		p, err := FreePort()
		if err != nil {
			return err
		}
		pg.port = p
	}
	pg.logPath = filepath.Join(pg.dir, "postgres.log")
	logf, err := os.OpenFile(pg.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644) //nolint:gosec // G302: the throwaway cluster's log, read by the developer
	if err != nil {
		return fmt.Errorf("opening server log: %w", err)
	}
	args := []string{"-D", pg.dataDir(),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(pg.port),
		"-c", "unix_socket_directories=" + pg.dir,
		"-c", "fsync=on",
		"-c", "max_connections=300",
		"-c", "shared_buffers=128MB",
		"-c", "log_min_messages=warning",
		"-c", "max_locks_per_transaction=256",
	}
	cmd := exec.Command(filepath.Join(pg.bindir, "postgres"), append(args, pg.settings...)...) //nolint:gosec // G204: the PostgreSQL binaries the harness found on this machine
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group so a Ctrl-C of the test run doesn't race our shutdown,
	// and Pdeathsig so the server dies with a test binary that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	logf.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	pg.cmd, pg.exited = cmd, exited

	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, pg.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			pg.cmd = nil
			log, _ := os.ReadFile(pg.logPath)
			return fmt.Errorf("postgres exited during start-up: %s", tail(log, 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StopServer shuts the server down (fast shutdown) and keeps the data, so
// Start can bring it back: a database restart as clients see it.
func (pg *Postgres) StopServer() error { return pg.signal(syscall.SIGINT, 30*time.Second) }

// Kill stops the server with SIGKILL: a crash, recovered by the next Start.
func (pg *Postgres) Kill() error { return pg.signal(syscall.SIGKILL, 30*time.Second) }

func (pg *Postgres) signal(sig syscall.Signal, wait time.Duration) error {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd == nil {
		return nil
	}
	// SIGKILL of the postmaster leaves its children, and every backend makes
	// itself a process group leader (InitPostmasterChild calls setsid), so
	// the postmaster's group does not reach them: note them first.
	pid := pg.cmd.Process.Pid
	var children []int
	target := pid
	if sig == syscall.SIGKILL {
		target = -pid
		children = childrenOf(pid)
	}
	_ = syscall.Kill(target, sig)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	select {
	case <-pg.exited:
	case <-time.After(wait):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-pg.exited
	}
	if sig == syscall.SIGKILL {
		// The next Start refuses a data directory whose shared memory block
		// is still attached: wait until the killed backends are gone.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		waitGone(children, 10*time.Second)
	}
	pg.cmd = nil
	return nil
}

// childrenOf lists the processes whose parent is pid, from /proc (none
// without /proc).
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(c); ok && st.ppid == pid {
			out = append(out, c)
		}
	}
	return out
}

// waitGone waits until none of pids is a live (non-zombie) process, or d has
// passed. A zombie has released its memory; its reaping is its new parent's
// business.
func waitGone(pids []int, d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			if st, ok := procStat(p); !ok || st.state == "Z" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

type stat struct {
	state string
	ppid  int
}

// procStat reads the state and parent of pid from /proc/<pid>/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{state: f[0], ppid: ppid}, true
}

// Stop shuts the server down and removes the cluster directory.
func (pg *Postgres) Stop() error {
	err := pg.StopServer()
	pg.removeDir()
	return err
}

func (pg *Postgres) removeDir() {
	if pg.dir != "" {
		_ = os.RemoveAll(pg.dir)
	}
}

// Port is the server's TCP port on 127.0.0.1.
func (pg *Postgres) Port() int { return pg.port }

// Password is the superuser's password (the superuser is "postgres").
func (pg *Postgres) Password() string { return pg.password }

// URL returns a connection URL for the superuser and the given database.
func (pg *Postgres) URL(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", pg.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.port)),
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

func (pg *Postgres) chown(path string) error {
	if pg.cred == nil {
		return nil
	}
	if err := os.Chown(path, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil { //nolint:gosec // G703: a path inside the harness's own temporary directory
		return fmt.Errorf("handing %s to the server user: %w", path, err)
	}
	return nil
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func findPGBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	if d := os.Getenv("PGTEST_BINDIR"); d != "" {
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH, in PGTEST_BINDIR or /usr/lib/postgresql/*/bin; install them or set " + EnvDatabaseURL)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}
