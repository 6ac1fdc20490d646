/*
Copyright 2026 The idempotency-dev authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controllers

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	kafkav1alpha1 "github.com/idempotency-dev/operator/api/v1alpha1"
)

// HostAllowlist is the manager's --database-host-allowlist: the database
// hosts the operator may connect to. Empty allows every host. An entry is
// a host name (db.example.com, matched without regard to case), a name
// with a leading "*." (any name below that domain, not the domain itself),
// an IP address or a CIDR. Names match only names and addresses only
// addresses: the operator resolves nothing to decide, so a URL that names
// a host is allowed by its name, one that gives an address by the address.
type HostAllowlist struct {
	names    []string // lower case
	suffixes []string // ".example.com"
	prefixes []netip.Prefix
}

// ParseHostAllowlist parses a comma-separated list of entries (blank
// entries are skipped).
func ParseHostAllowlist(s string) (HostAllowlist, error) {
	var a HostAllowlist
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return HostAllowlist{}, fmt.Errorf("database host allow-list entry %q is not a CIDR: %w", e, err)
			}
			a.prefixes = append(a.prefixes, p.Masked())
		case strings.HasPrefix(e, "*."):
			a.suffixes = append(a.suffixes, strings.ToLower(e[1:]))
		default:
			if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
				continue
			}
			if strings.ContainsAny(e, "*:@ ") {
				return HostAllowlist{}, fmt.Errorf("database host allow-list entry %q is neither a host name, a *.domain, an IP address nor a CIDR", e)
			}
			a.names = append(a.names, strings.ToLower(strings.TrimSuffix(e, ".")))
		}
	}
	return a, nil
}

// Empty reports whether the list allows every host.
func (a HostAllowlist) Empty() bool {
	return len(a.names) == 0 && len(a.suffixes) == 0 && len(a.prefixes) == 0
}

// Allows reports whether host (a name, an address or, for a Unix socket, a
// directory) is on the list. A socket directory is allowed only when listed
// as a name exactly.
func (a HostAllowlist) Allows(host string) bool {
	if a.Empty() {
		return true
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		ip = ip.Unmap().WithZone("")
		for _, p := range a.prefixes {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range a.names {
		if h == n {
			return true
		}
	}
	for _, suf := range a.suffixes {
		if strings.HasSuffix(h, suf) && len(h) > len(suf) {
			return true
		}
	}
	return false
}

// checkDatabaseHosts refuses a database URL naming a host (the first or a
// fallback one) that the allow-list does not list, before anything dials
// it. The message names neither the host nor the list: the namespace user
// who wrote the URL knows the host, and the list is the administrator's.
// A URL that does not parse is left to the connection, which reports it.
func (a HostAllowlist) checkDatabaseHosts(databaseURL string) *problem {
	if a.Empty() {
		return nil
	}
	cfg, err := pgconn.ParseConfig(databaseURL)
	if err != nil {
		return nil
	}
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if !a.Allows(h) {
			return &problem{kafkav1alpha1.ReasonDatabaseHostNotAllowed,
				"The database URL names a host that the operator's --database-host-allowlist does not list; the operator did not connect. Use a database host the cluster's administrators allow, or ask them to add it"}
		}
	}
	return nil
}
