// Command dedupctl keeps a dedup table without Kubernetes: it creates the
// table with its first partitions, runs partition maintenance once or on an
// interval (a systemd unit, a cron job, a sidecar), shows the table's window,
// partitions, roles and claim functions, and grants a consumer's role what
// the claim functions and the Go runtime need. It calls the same code the
// operator does (package consumer/dedup: EnsureTable, Maintain,
// GrantConsumer). docs/dedupctl.md has the usage.
//
//	export DATABASE_URL=postgres://...       # or --database-url-file FILE
//	dedupctl create --schema billing
//	dedupctl maintain --schema billing --every 1h
//	dedupctl show --schema billing
//	dedupctl grant --schema billing --role billing_consumer --group billing
//
// The database URL is never a flag: flags show in the process list. Exit
// codes: 0 done, 1 failed, 2 invalid arguments.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idempotency-dev/operator/consumer/dedup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// DefaultOwner is the owner a table made by dedupctl carries in its
// ownership marker. Every later command passes the same --owner; a table
// the operator made (its marker names an object's UID) is refused, so
// dedupctl never maintains it with another policy behind the operator's back.
const DefaultOwner = "dedupctl"

// DefaultLead is how far ahead of now maintenance plans, as the operator's
// --maintenance-lead: the next partition exists this long before its
// interval starts.
const DefaultLead = 5 * time.Minute

const usage = `usage: dedupctl <command> [flags]

commands:
  create    create the table, its positions table, claim functions and first partitions
  maintain  create due partitions and drop expired ones, once or --every DURATION
  show      print the window, partitions, consumer roles and claim functions
  grant     give a consumer's role (--role) what its consumer group (--group) needs

The database URL comes from $DATABASE_URL, or from the file named by
--database-url-file (or $DATABASE_URL_FILE); never from a flag value.
"dedupctl <command> -h" lists the command's flags.
`

// options are the flags the commands share.
type options struct {
	urlFile   string
	table     dedup.Table
	scope     string
	interval  string
	owner     string
	premake   int
	retention time.Duration
	lead      time.Duration
	every     time.Duration
	now       string
	role      string
	group     string
	asJSON    bool
}

// Main runs the command with args and the environment; it returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		for _, c := range []string{"create", "maintain", "show", "grant"} {
			fmt.Fprintf(stderr, "\nflags of %s:\n", c)
			var o options
			o.flags(c, stderr).PrintDefaults()
		}
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	switch cmd {
	case "create", "maintain", "show", "grant":
	default:
		fmt.Fprintf(stderr, "dedupctl: unknown command %q\n%s", cmd, usage)
		return 2
	}
	var o options
	fs := o.flags(cmd, stderr)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dedupctl %s: unexpected argument %q\n", cmd, fs.Arg(0))
		return 2
	}
	url, secret, err := databaseURL(o.urlFile, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl %s: %v\n", cmd, err)
		return 2
	}
	// Nothing the command prints carries the URL's password, whatever an
	// error from below quotes.
	stdout, stderr = &redactor{w: stdout, secrets: secret}, &redactor{w: stderr, secrets: secret}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("command", cmd)

	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error can quote the URL, password included.
		fmt.Fprintf(stderr, "dedupctl %s: the database URL cannot be parsed\n", cmd)
		return 2
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "dedupctl"
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl %s: connecting: %v\n", cmd, err)
		return 1
	}
	defer pool.Close()

	if cmd != "create" {
		// The layout is the table's own, as its marker records it.
		if err := o.layoutFromMarker(ctx, pool); err != nil {
			fmt.Fprintf(stderr, "dedupctl %s: %v\n", cmd, err)
			return 1
		}
	} else {
		o.table.Scope, o.table.Interval = dedup.Scope(o.scope), dedup.Interval(o.interval)
	}
	if err := o.table.Validate(); err != nil {
		fmt.Fprintf(stderr, "dedupctl %s: %v\n", cmd, err)
		return 2
	}
	if cmd == "create" || cmd == "maintain" {
		if err := dedup.ValidatePolicy(o.table.Interval, o.premake, o.retention); err != nil {
			fmt.Fprintf(stderr, "dedupctl %s: %v\n", cmd, err)
			return 2
		}
		if o.every < 0 || o.lead < 0 {
			fmt.Fprintf(stderr, "dedupctl %s: --every and --lead must not be negative\n", cmd)
			return 2
		}
	}
	eng, err := dedup.NewEngine(pool, o.table, dedup.WithoutFirstPartitions()) // its Maintain follows, as the operator's
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl %s: %v\n", cmd, err)
		return 2
	}
	switch cmd {
	case "create":
		return o.create(ctx, eng, log, stdout, stderr)
	case "maintain":
		return o.maintain(ctx, eng, log, stdout, stderr)
	case "show":
		return o.show(ctx, eng, pool, stdout, stderr)
	default:
		return o.grant(ctx, eng, stdout, stderr)
	}
}

// flags is the flag set of cmd, bound to o.
func (o *options) flags(cmd string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dedupctl "+cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.urlFile, "database-url-file", "", "read the PostgreSQL URL from this file (default $DATABASE_URL_FILE, else $DATABASE_URL)")
	fs.StringVar(&o.table.Schema, "schema", dedup.DefaultSchema, "schema of the table (created if missing)")
	fs.StringVar(&o.table.Name, "table", dedup.DefaultTableName, "the dedup table")
	fs.StringVar(&o.owner, "owner", DefaultOwner, "owner named in the table's ownership marker; every command must pass the same")
	if cmd == "create" {
		fs.StringVar(&o.scope, "scope", string(dedup.DefaultScope), "ConsumerGroup or Global")
		fs.StringVar(&o.interval, "interval", string(dedup.DefaultInterval), "partition span: Hourly, Daily, Weekly or Monthly (cannot change later)")
	}
	if cmd == "create" || cmd == "maintain" {
		fs.IntVar(&o.premake, "premake", dedup.DefaultPremake, "partitions made ahead of the current one")
		fs.DurationVar(&o.retention, "retention", dedup.DefaultRetention, "how long a partition is kept after its range ends")
		fs.DurationVar(&o.lead, "lead", DefaultLead, "plan this far ahead of now (the operator's --maintenance-lead)")
		fs.StringVar(&o.now, "now", "", "plan as of this time (RFC 3339) instead of the clock: for trying a policy out, and tests")
	}
	if cmd == "maintain" {
		fs.DurationVar(&o.every, "every", 0, "run again at this interval until SIGTERM (0: once); a failed run is retried at the next tick")
	}
	if cmd == "grant" {
		fs.StringVar(&o.role, "role", "", "the consumer's PostgreSQL role (must exist)")
		fs.StringVar(&o.group, "group", "", "the consumer group the role works for (its rows only, by row-level security)")
	}
	if cmd == "show" {
		fs.BoolVar(&o.asJSON, "json", false, "print JSON")
	}
	return fs
}

// databaseURL reads the URL from the file (flag, else $DATABASE_URL_FILE) or
// $DATABASE_URL, and returns it with the secrets to keep out of the output.
func databaseURL(file string, getenv func(string) string) (string, []string, error) {
	if file == "" {
		file = getenv("DATABASE_URL_FILE")
	}
	url := getenv("DATABASE_URL")
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", nil, fmt.Errorf("reading the database URL: %w", err)
		}
		url = strings.TrimSpace(string(b))
	}
	if url == "" {
		return "", nil, errors.New("set DATABASE_URL, DATABASE_URL_FILE or --database-url-file")
	}
	secrets := []string{url}
	if cfg, err := pgxpool.ParseConfig(url); err == nil && cfg.ConnConfig.Password != "" {
		secrets = append(secrets, cfg.ConnConfig.Password)
	}
	return url, secrets, nil
}

// layoutFromMarker sets the scope and interval from the table's marker.
func (o *options) layoutFromMarker(ctx context.Context, pool *pgxpool.Pool) error {
	eng, err := dedup.NewEngine(pool, o.table, dedup.WithoutFirstPartitions()) // its Maintain follows, as the operator's
	if err != nil {
		return err
	}
	st, err := eng.Observe(ctx)
	if err != nil {
		return err
	}
	switch {
	case !st.Exists:
		return fmt.Errorf("table %s does not exist: run dedupctl create first", o.table)
	case st.Owner == "":
		return fmt.Errorf("table %s carries no ownership marker: it was not made by dedupctl or the operator", o.table)
	}
	o.table.Scope, o.table.Interval = st.Marker.Scope, st.Marker.Interval
	return nil
}

func (o *options) clock() (time.Time, error) {
	if o.now == "" {
		return time.Now(), nil
	}
	t, err := time.Parse(time.RFC3339, o.now)
	if err != nil {
		return time.Time{}, fmt.Errorf("--now: %w", err)
	}
	return t, nil
}

// runMaintenance is the operator's reconcilePartitions step: EnsureTable
// (which migrates an older layout and keeps the claim functions current),
// then Maintain as of now+lead with retention+lead.
func (o *options) runMaintenance(ctx context.Context, eng *dedup.Engine) (dedup.Result, error) {
	if err := eng.EnsureTable(ctx, o.owner); err != nil {
		return dedup.Result{}, err
	}
	now, err := o.clock()
	if err != nil {
		return dedup.Result{}, err
	}
	return eng.Maintain(ctx, now.Add(o.lead), o.premake, o.retention+o.lead)
}

func (o *options) create(ctx context.Context, eng *dedup.Engine, log *slog.Logger, stdout, stderr io.Writer) int {
	res, err := o.runMaintenance(ctx, eng)
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl create: %v\n", err)
		return 1
	}
	log.Info("table ready", "table", o.table.String(), "created", len(res.Created), "window", res.Window.String())
	fmt.Fprintf(stdout, "table %s ready: %d partitions cover %s\n", o.table, len(res.Partitions), res.Window)
	fmt.Fprintf(stdout, "claim functions: %s(uuid[], text) per batch, %s(uuid, text) per record\n", o.table.ClaimFunction(), o.table.ClaimOneFunction())
	fmt.Fprintf(stdout, "run maintenance on a schedule (dedupctl maintain --every 1h): without it the window closes at %s\n", res.Window.To.UTC().Format(time.RFC3339))
	return 0
}

func (o *options) maintain(ctx context.Context, eng *dedup.Engine, log *slog.Logger, stdout, stderr io.Writer) int {
	once := func() error {
		start := time.Now()
		res, err := o.runMaintenance(ctx, eng)
		attrs := []any{"created", partitionNames(res.Created), "dropped", partitionNames(res.Dropped), "window", res.Window.String(), "took", time.Since(start).Round(time.Millisecond)}
		if err != nil {
			log.Error("maintenance failed", append(attrs, "err", err, "retryable", dedup.IsRetryable(err))...)
			return err
		}
		log.Info("maintenance done", attrs...)
		fmt.Fprintf(stdout, "%s: %d partitions cover %s (created %d, dropped %d)\n", o.table, len(res.Partitions), res.Window, len(res.Created), len(res.Dropped))
		return nil
	}
	err := once()
	if o.every == 0 {
		if err != nil {
			return 1
		}
		return 0
	}
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("stopping")
			return 0
		case <-tick.C:
			_ = once() // logged; the next tick tries again
		}
	}
}

func partitionNames(ps []dedup.Partition) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func (o *options) grant(ctx context.Context, eng *dedup.Engine, stdout, stderr io.Writer) int {
	if o.role == "" || o.group == "" {
		fmt.Fprintln(stderr, "dedupctl grant: --role and --group are required")
		return 2
	}
	if err := eng.EnsureTable(ctx, o.owner); err != nil {
		fmt.Fprintf(stderr, "dedupctl grant: %v\n", err)
		return 1
	}
	res, err := eng.GrantConsumer(ctx, o.role, o.group)
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl grant: %v\n", err)
		return 1
	}
	for _, s := range res.Statements {
		fmt.Fprintln(stdout, s+";")
	}
	switch {
	case res.Unrestricted != "" && len(res.Statements) == 0:
		fmt.Fprintf(stdout, "role %s needs no grant: %s\n", o.role, res.Unrestricted)
	case res.Unrestricted != "":
		fmt.Fprintf(stdout, "role %s may use %s for group %s; no policy holds it back: %s\n", o.role, o.table, o.group, res.Unrestricted)
	case len(res.Statements) == 0:
		fmt.Fprintf(stdout, "role %s already has what group %s needs on %s\n", o.role, o.group, o.table)
	default:
		fmt.Fprintf(stdout, "role %s may use %s for group %s\n", o.role, o.table, o.group)
	}
	return 0
}

// Show is what show prints (with --json, as JSON).
type Show struct {
	Table      string          `json:"table"`
	Owner      string          `json:"owner"`
	Scope      dedup.Scope     `json:"scope"`
	Interval   dedup.Interval  `json:"interval"`
	From       time.Time       `json:"windowFrom"`
	To         time.Time       `json:"windowTo"`
	Partitions []ShowPartition `json:"partitions"`
	Foreign    []string        `json:"foreign,omitempty"`
	Users      []dedup.User    `json:"users,omitempty"`
	Roles      []ShowRole      `json:"roles"`
	Functions  []string        `json:"functions"`
}

// ShowPartition is one attached partition.
type ShowPartition struct {
	Name          string    `json:"name"`
	From          time.Time `json:"from,omitzero"`
	To            time.Time `json:"to,omitzero"`
	Bound         string    `json:"bound"`
	DetachPending bool      `json:"detachPending,omitempty"`
	Rows          int64     `json:"rowsEstimate"`
}

// ShowRole is a role with privileges on the table, and its row-level
// security policies' consumer groups.
type ShowRole struct {
	Role       string   `json:"role"`
	Privileges []string `json:"privileges"`
	Groups     []string `json:"groups,omitempty"`
}

func (o *options) show(ctx context.Context, eng *dedup.Engine, pool *pgxpool.Pool, stdout, stderr io.Writer) int {
	st, err := eng.Observe(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "dedupctl show: %v\n", err)
		return 1
	}
	s := Show{Table: o.table.String(), Owner: st.Owner, Scope: st.Marker.Scope, Interval: st.Marker.Interval,
		From: st.Window.From.UTC(), To: st.Window.To.UTC(), Foreign: st.Foreign, Roles: []ShowRole{}, Functions: []string{}}
	for _, p := range st.Partitions {
		sp := ShowPartition{Name: p.Name, Bound: p.Bound, DetachPending: p.DetachPending, Rows: p.Rows}
		if from, to, ok := p.TimeRange(); ok {
			sp.From, sp.To = from.UTC(), to.UTC()
		}
		s.Partitions = append(s.Partitions, sp)
	}
	if dedup.IsSharedOwner(st.Owner) {
		if s.Users, err = eng.Users(ctx); err != nil {
			fmt.Fprintf(stderr, "dedupctl show: %v\n", err)
			return 1
		}
	}
	if err := readRolesAndFunctions(ctx, pool, o.table, &s); err != nil {
		fmt.Fprintf(stderr, "dedupctl show: %v\n", err)
		return 1
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s); err != nil {
			fmt.Fprintf(stderr, "dedupctl show: %v\n", err)
			return 1
		}
		return 0
	}
	w := stdout
	fmt.Fprintf(w, "table       %s (owner %s, scope %s, interval %s)\n", s.Table, s.Owner, s.Scope, s.Interval)
	fmt.Fprintf(w, "window      %s\n", st.Window)
	if !st.Window.IsZero() {
		left := time.Until(st.Window.To).Round(time.Minute)
		fmt.Fprintf(w, "            ids stamped after %s are outside_window: %s from now unless maintenance runs\n", st.Window.To.UTC().Format(time.RFC3339), left)
	}
	fmt.Fprintf(w, "partitions  %d\n", len(s.Partitions))
	for _, p := range s.Partitions {
		line := "  " + p.Name
		if !p.From.IsZero() {
			line += fmt.Sprintf("  [%s, %s)", p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
		} else {
			line += "  " + p.Bound
		}
		if p.DetachPending {
			line += "  detach pending"
		}
		if p.Rows >= 0 {
			line += fmt.Sprintf("  ~%d rows", p.Rows)
		}
		fmt.Fprintln(w, line)
	}
	if len(s.Foreign) > 0 {
		fmt.Fprintf(w, "foreign     %s (not ours: left alone)\n", strings.Join(s.Foreign, ", "))
	}
	for _, u := range s.Users {
		fmt.Fprintf(w, "user        %s group %s retention %s premake %d\n", u.Object, u.Group, u.Retention, u.Premake)
	}
	if len(s.Roles) == 0 {
		fmt.Fprintln(w, "roles       none besides the owner (dedupctl grant --role R --group G)")
	}
	for _, r := range s.Roles {
		groups := "any group (no policy)"
		if len(r.Groups) > 0 {
			groups = "groups " + strings.Join(r.Groups, ", ")
		}
		fmt.Fprintf(w, "role        %s: %s; %s\n", r.Role, strings.Join(r.Privileges, ", "), groups)
	}
	for _, f := range s.Functions {
		fmt.Fprintf(w, "function    %s\n", f)
	}
	return 0
}

// readRolesAndFunctions reads the roles granted privileges on the table (the
// owner left out), their policies' groups and the claim functions.
func readRolesAndFunctions(ctx context.Context, pool *pgxpool.Pool, t dedup.Table, s *Show) error {
	rows, err := pool.Query(ctx, `
SELECT g.grantee::text, array_agg(DISTINCT g.privilege_type::text ORDER BY g.privilege_type::text),
       ARRAY(SELECT DISTINCT substring(p.qual FROM '''(.*)''::text') FROM pg_catalog.pg_policies p
              WHERE p.schemaname = $1 AND p.tablename = $2 AND g.grantee::text = ANY (p.roles::text[])
                AND p.qual IS NOT NULL ORDER BY 1)
  FROM information_schema.role_table_grants g
  JOIN pg_catalog.pg_class c ON c.relname = g.table_name
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace AND n.nspname = g.table_schema
 WHERE g.table_schema = $1 AND g.table_name = $2
   AND g.grantee::text <> pg_catalog.pg_get_userbyid(c.relowner)
 GROUP BY g.grantee ORDER BY 1`, t.Schema, t.Name)
	if err != nil {
		return fmt.Errorf("reading the table's roles: %w", err)
	}
	for rows.Next() {
		var r ShowRole
		var groups []*string
		if err := rows.Scan(&r.Role, &r.Privileges, &groups); err != nil {
			rows.Close()
			return fmt.Errorf("reading the table's roles: %w", err)
		}
		for _, g := range groups {
			if g != nil {
				r.Groups = append(r.Groups, *g)
			}
		}
		s.Roles = append(s.Roles, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the table's roles: %w", err)
	}
	frows, err := pool.Query(ctx, `
SELECT n.nspname || '.' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = $1 AND p.proname = ANY ($2)`, t.Schema, []string{t.Name + "_claim", t.Name + "_claim_one"})
	if err != nil {
		return fmt.Errorf("reading the claim functions: %w", err)
	}
	for frows.Next() {
		var f string
		if err := frows.Scan(&f); err != nil {
			frows.Close()
			return fmt.Errorf("reading the claim functions: %w", err)
		}
		s.Functions = append(s.Functions, f)
	}
	if err := frows.Err(); err != nil {
		return fmt.Errorf("reading the claim functions: %w", err)
	}
	sort.Strings(s.Functions)
	return nil
}

// redactor replaces the secrets (the URL, its password) in what is written
// through it. A write is one message (fmt.Fprintf, a slog record), so a
// secret is never split across two writes.
type redactor struct {
	w       io.Writer
	secrets []string
}

func (r *redactor) Write(p []byte) (int, error) {
	s := string(p)
	for _, sec := range r.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "xxxxx")
		}
	}
	if _, err := io.WriteString(r.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
