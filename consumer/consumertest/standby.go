package consumertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a streaming standby of pg, the shape of a CloudNativePG
// cluster's replica: pg_basebackup -R (which writes standby.signal and a
// primary_conninfo) into a new cluster directory, started on a port of its own
// with pg's superuser password. Replication is asynchronous unless the primary
// lists the standby (application_name "standby", or "*") in
// synchronous_standby_names. opts apply to the standby's server. Stop removes
// it.
func (pg *Postgres) StartStandby(opts ...PostgresOption) (*Postgres, error) {
	sb := &Postgres{bindir: pg.bindir, password: pg.password, cred: pg.cred}
	for _, o := range opts {
		o(sb)
	}
	base := os.Getenv("PGTEST_TMPDIR")
	var err error
	sb.dir, err = os.MkdirTemp(base, "consumertest-pg-standby-")
	if err != nil {
		return nil, fmt.Errorf("creating standby directory: %w", err)
	}
	if err := sb.chown(sb.dir); err != nil {
		sb.removeDir()
		return nil, err
	}
	bin, err := pgBinary(pg.bindir, "pg_basebackup")
	if err != nil {
		sb.removeDir()
		return nil, err
	}
	cmd := exec.Command(bin, "-D", sb.dataDir(), "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port), "-U", "postgres",
		"-X", "stream", "-c", "fast", "-R", "-d", "application_name=standby")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pg.password)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	cmd.Dir = sb.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		sb.removeDir()
		return nil, fmt.Errorf("pg_basebackup: %w: %s", err, redact(errors.New(tail(out, 2000)), pg.password).Error())
	}
	if err := sb.Start(); err != nil {
		sb.removeDir()
		return nil, fmt.Errorf("starting standby: %w", err)
	}
	return sb, nil
}

// pgBinary finds a PostgreSQL client program: in bindir, else in
// /usr/lib/postgresql/*/bin (Debian puts the server and the clients apart).
func pgBinary(bindir, name string) (string, error) {
	if p := filepath.Join(bindir, name); fileExists(p) {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) > 0 {
		return matches[len(matches)-1], nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s or /usr/lib/postgresql/*/bin", name, bindir)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// DetachStandby stops the standby's replication from its primary, as a
// network partition between the two would: primary_conninfo is cleared and
// the configuration reloaded, so its WAL receiver ends and nothing more
// arrives. The primary keeps committing (asynchronously replicated commits do
// not wait for a standby), so a failover to this standby now loses every
// commit made after it: the data loss of a failover to a standby that lags.
func (pg *Postgres) DetachStandby(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the standby: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''"); err != nil {
		return fmt.Errorf("clearing primary_conninfo: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reloading the configuration: %w", err)
	}
	for {
		var receiving bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_wal_receiver)").Scan(&receiving); err != nil {
			return fmt.Errorf("reading pg_stat_wal_receiver: %w", err)
		}
		if !receiving {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the WAL receiver to stop: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitReplayed waits until the standby has replayed the primary's WAL as of
// now (its current pg_current_wal_lsn).
func (pg *Postgres) WaitReplayed(ctx context.Context, primary *Postgres) error {
	pconn, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the primary: %w", err)
	}
	var lsn string
	err = pconn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	pconn.Close(context.Background())
	if err != nil {
		return fmt.Errorf("reading the primary's WAL position: %w", err)
	}
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the standby: %w", err)
	}
	defer conn.Close(context.Background())
	for {
		var done bool
		if err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done); err != nil {
			return fmt.Errorf("reading the standby's replay position: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the standby to replay %s: %w", lsn, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Promote ends the standby's recovery (pg_promote) and waits until it accepts
// writes.
func (pg *Postgres) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to the standby: %w", err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	if !ok {
		return errors.New("promoting: pg_promote did not finish within 60s")
	}
	return nil
}

// MultiHostURL returns a key/value connection string for database that lists
// the servers in order with target_session_attrs=read-write: the client
// connects to whichever of them is the primary, as after a failover.
func MultiHostURL(database string, servers ...*Postgres) string {
	var hosts, ports string
	for i, s := range servers {
		if i > 0 {
			hosts += ","
			ports += ","
		}
		hosts += "127.0.0.1"
		ports += strconv.Itoa(s.port)
	}
	pw := ""
	if len(servers) > 0 {
		pw = servers[0].password
	}
	return fmt.Sprintf("host=%s port=%s user=postgres password=%s dbname=%s sslmode=disable target_session_attrs=read-write connect_timeout=5",
		hosts, ports, pw, database)
}
