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

func TestHostAllowlist(t *testing.T) {
	a, err := ParseHostAllowlist("db.example.com, *.pg.example.com ,10.1.0.0/16,fd00::/8, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"db.example.com": true, "DB.Example.com.": true, "x.db.example.com": false,
		"a.pg.example.com": true, "pg.example.com": false,
		"10.1.2.3": true, "10.2.0.1": false, "::ffff:10.1.0.9": true, "fd00::1": true, "[fd00::1]": true,
		"192.0.2.7": true, "192.0.2.8": false, "/var/run/postgresql": false, "localhost": false,
	} {
		if got := a.Allows(host); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	if p := a.checkDatabaseHosts("postgres://u@db.example.com,evil.example.org/x"); p == nil {
		t.Error("a fallback host off the list was allowed")
	}
	if p := a.checkDatabaseHosts("host=10.1.0.5 user=u dbname=x"); p != nil {
		t.Errorf("an allowed key=value host was refused: %v", p.message)
	}
	for _, bad := range []string{"10.0.0.0/33", "a b", "*x.com"} {
		if _, err := ParseHostAllowlist(bad); err == nil {
			t.Errorf("ParseHostAllowlist(%q) accepted", bad)
		}
	}
	var empty HostAllowlist
	if !empty.Allows("anything") || empty.checkDatabaseHosts("postgres://x@y/z") != nil {
		t.Error("an empty list refuses")
	}
}
