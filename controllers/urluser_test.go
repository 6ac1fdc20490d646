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

import "testing"

// TestURLUser (review finding 11): the role to grant is the user the URL
// names; a URL without one names none, whatever PGUSER or the operator's
// OS user is (pgconn's fallback), so the Outbox says the URL names no user
// instead of granting the relay's privileges to someone else.
func TestURLUser(t *testing.T) {
	t.Setenv("PGUSER", "operator_os_user")
	for in, want := range map[string]string{
		"postgres://relay@db:5432/shop":                 "relay",
		"postgresql://relay:pw@db/shop?sslmode=require": "relay",
		"postgres://db:5432/shop?user=carol":            "carol",
		"host=db user=bob dbname=shop":                  "bob",
		"user = dave host=db":                           "dave",
		"postgres://db:5432/shop":                       "",
		"host=db dbname=shop":                           "",
		"host=db dbname=superuser":                      "",
		"not a url at all ://":                          "",
	} {
		if got := urlUser(in); got != want {
			t.Errorf("urlUser(%q) = %q, want %q", in, got, want)
		}
	}
}
