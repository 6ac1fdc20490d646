package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// TestDatabaseMaxConnsBounds: --database-max-conns outside 1..2^31-1 is
// refused with an error naming the flag. 4294967297 (2^32+1) was converted
// to int32 as 1, and 0 or a negative number reached the pool as is.
func TestDatabaseMaxConnsBounds(t *testing.T) {
	parse := func(args ...string) (*config, error) {
		flag.CommandLine = flag.NewFlagSet("manager", flag.ContinueOnError)
		old := os.Args
		defer func() { os.Args = old }()
		os.Args = append([]string{"manager"}, args...)
		return parseFlags()
	}
	for _, v := range []string{"0", "-3", "4294967297", "2147483648"} {
		if _, err := parse("--database-max-conns=" + v); err == nil || !strings.Contains(err.Error(), "--database-max-conns") {
			t.Errorf("--database-max-conns=%s: err %v, want one naming the flag", v, err)
		}
	}
	cfg, err := parse("--database-max-conns=12")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.pool.MaxConns != 12 {
		t.Errorf("MaxConns %d, want 12", cfg.pool.MaxConns)
	}
}
