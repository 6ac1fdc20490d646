#!/usr/bin/env bash
# bench.sh runs the project's benchmarks. Each measures a baseline in the same
# run (the machine is shared and noisy, so absolute numbers mean little) and
# prints one line "RESULT key=value ..." with the ratios; this script prints
# those lines last, prefixed with the benchmark's name.
#
#   make bench                 # all of them
#   BENCH=dedup make bench     # one of: dedup claim anylang consumer replay latency startup rollout slow_sink memory scale outbox operator operator_cost
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which="${BENCH:-dedup claim anylang consumer replay latency startup rollout slow_sink memory scale outbox operator}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

run() {
	local name="$1"; shift
	echo "bench: $name: $*" >&2
	local start=$SECONDS
	if ! "$@" 2>&1 | tee "$out/$name.log" >&2; then
		echo "bench: $name FAILED" >&2
		echo "RESULT $name failed=1" >"$out/$name.result"
		return 1
	fi
	# One RESULT line per benchmark; the scale benchmark prints one per sink
	# and names itself ("RESULT scale sink=...").
	if [ "$name" = scale ] || [ "$name" = latency ] || [ "$name" = replay ] || [ "$name" = outbox ]; then
		# One line per sink or rate (replay, outbox: one), each naming its benchmark.
		grep "^RESULT $name " "$out/$name.log" >"$out/$name.result" || true
	elif [ "$name" = operator_1000 ] || [ "$name" = operator_cost ]; then
		# The run's line, and the operator process's cost per object
		# ("RESULT operator_cost ...", named by the test).
		: >"$out/$name.result"
		if [ "$name" = operator_1000 ]; then
			grep '^RESULT ' "$out/$name.log" | grep -v '^RESULT operator_cost ' | tail -1 | sed "s/^RESULT /RESULT $name /" >"$out/$name.result" || true
		fi
		grep '^RESULT operator_cost ' "$out/$name.log" | tail -1 >>"$out/$name.result" || true
	else
		grep '^RESULT ' "$out/$name.log" | tail -1 | sed "s/^RESULT /RESULT $name /" >"$out/$name.result" || true
	fi
	echo "bench: $name took $((SECONDS - start))s" >&2
}

status=0
for b in $which; do
	case "$b" in
	dedup)
		# Partition drop vs DELETE of 1M rows; batched dedup insert vs single-row inserts.
		run dedup env DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestBenchmarkReport$' -count=1 -v -timeout 30m || status=1 ;;
	claim)
		# The per-record claim function vs a plain INSERT ... ON CONFLICT DO NOTHING, one call per transaction (RESULT claim per_record_ms=... insert_ms=... vs_insert=...).
		run claim env DEDUP_BENCH=1 go test ./consumer/dedup/ -run '^TestClaimOneCostReport$' -count=1 -v -timeout 10m || status=1 ;;
	anylang)
		# The TypeScript example's src/batch.ts (kafkajs + pg): per-record claim_one and batch _claim vs the same client without the claim (RESULT anylang per_record_vs_naive=... batch_vs_naive=...; needs Node.js 20 and npm).
		run anylang env ANYLANG_BENCH=1 go test ./examples/typescript-kafkajs/ -run '^TestBenchAnyLanguage$' -count=1 -v -timeout 30m || status=1 ;;
	consumer)
		# The runtime vs one transaction + one offset commit per message; vs no dedup; 50% duplicates; consumer RSS.
		run consumer env CONSUMER_BENCH=1 go test ./consumer/ -run '^TestBench$' -count=1 -v -timeout 30m || status=1 ;;
	replay)
		# A dead-letter replay (Consumer.Replay) over N dead letters vs the live consumer over the N events they were made from, same SQL sink, paired rounds (RESULT replay eps=... vs_consumer=... events=... pass=...; target vs_consumer >= 0.8).
		run replay env CONSUMER_BENCH_REPLAY=1 go test ./consumer/ -run '^TestBenchReplay$' -count=1 -v -timeout 30m || status=1 ;;
	latency)
		# Send-to-commit latency at a steady 50 and 500 events/s, SQL sink with default batching vs the per-message pattern, both from PostgreSQL commit timestamps (RESULT latency rate=... p50_ms=... p99_ms=... permsg_p99_ms=... p99_vs_permsg=...).
		run latency env CONSUMER_BENCH_LATENCY=1 go test ./consumer/ -run '^TestBenchLatency$' -count=1 -v -timeout 10m || status=1 ;;
	startup)
		# How soon the first event takes effect after its topic is created (the consumer started 10 s before) and after a partition is added to a live topic (RESULT startup topic_late_first_apply_ms=... partition_added_first_apply_ms=...).
		run startup env CONSUMER_BENCH_STARTUP=1 go test ./consumer/ -run '^TestBenchStartup$' -count=1 -v -timeout 10m || status=1 ;;
	rollout)
		# Three cmd/consumer replicas at 200 events/s, each restarted in turn with SIGTERM: worst send-to-commit latency during the rollout; fails if an event is lost or applied twice (RESULT rollout max_e2e_ms=... lost=0 duplicates_applied=0).
		run rollout env CONSUMER_BENCH_ROLLOUT=1 go test ./consumer/ -run '^TestBenchRollout$' -count=1 -v -timeout 15m || status=1 ;;
	slow_sink)
		# The HTTP sink as an external handler against a 20 ms provider: same-key and re-keyed duplicates, vs the bound and the per-message pattern.
		run slow_sink env CONSUMER_BENCH_SLOW_SINK=1 go test ./consumer/ -run '^TestBenchSlowSink$' -count=1 -v -timeout 10m || status=1 ;;
	memory)
		# cmd/consumer's peak RSS draining 8 partitions of 10 KB, 100 KB and 1 MB events, with and without a 256 MiB CONSUMER_MEMORY_LIMIT.
		run memory env CONSUMER_BENCH_MEMORY=1 go test ./consumer/ -run '^TestBenchMemory$' -count=1 -v -timeout 30m || status=1 ;;
	scale)
		# 1, 2 and 4 cmd/consumer processes on one 8-partition topic, SQL sink and HTTP sink (20 ms provider): eps, CPU of PostgreSQL vs consumers.
		run scale env CONSUMER_BENCH_SCALE=1 go test ./consumer/ -run '^TestBenchScale$' -count=1 -v -timeout 30m || status=1 ;;
	outbox)
		# The outbox relay publishing N committed rows vs a plain kafka-go producer sending the same records from memory, alternating rounds; commit-to-append latency at 50 events/s; n_dead_tup of the outbox after the run (RESULT outbox relay_eps=... raw_producer_eps=... vs_raw=... p50_ms=... p99_ms=... dead_tuples=...; targets vs_raw >= 0.5, p50_ms <= 20, dead_tuples = 0).
		run outbox env OUTBOX_BENCH=1 go test ./consumer/outbox/ -run '^TestBenchOutbox$' -count=1 -v -timeout 30m || status=1 ;;
	operator)
		# 300, then 1000 IdempotentConsumers against one PostgreSQL: time to Ready, reconciles afterwards, RSS, CPU by process.
		# 300: the manager in the test process (db_share: time inside database calls); 1000: cmd/manager as a
		# process of its own (OPERATOR_BENCH_PROCESS), so peak_rss_mib is the operator's alone. Each in its own
		# test process; the 1000-object run's quiet period is 30s.
		assets="$(hack/envtest.sh)"
		run operator env KUBEBUILDER_ASSETS="$assets" OPERATOR_BENCH=1 go test ./controllers/ -run '^TestBenchmarkManyConsumers$' -count=1 -v -timeout 30m || status=1
		# The 1000-object run also prints RESULT operator_cost (CPU ms and KiB per object; targets <= 30 ms, <= 80 KiB).
		run operator_1000 env KUBEBUILDER_ASSETS="$assets" OPERATOR_BENCH=1 OPERATOR_BENCH_PROCESS=1 OPERATOR_BENCH_OBJECTS=1000 OPERATOR_BENCH_QUIET=30s go test ./controllers/ -run '^TestBenchmarkManyConsumers$' -count=1 -v -timeout 30m || status=1 ;;
	operator_cost)
		# Only RESULT operator_cost, with OPERATOR_COST_OBJECTS (default 1000) objects and a short quiet period.
		assets="$(hack/envtest.sh)"
		run operator_cost env KUBEBUILDER_ASSETS="$assets" OPERATOR_BENCH=1 OPERATOR_BENCH_PROCESS=1 OPERATOR_BENCH_OBJECTS="${OPERATOR_COST_OBJECTS:-1000}" OPERATOR_BENCH_QUIET=5s go test ./controllers/ -run '^TestBenchmarkManyConsumers$' -count=1 -v -timeout 30m || status=1 ;;
	*) echo "bench: unknown benchmark $b (dedup, claim, anylang, consumer, replay, latency, startup, rollout, slow_sink, memory, scale, outbox, operator, operator_cost)" >&2; exit 2 ;;
	esac
done
echo
cat "$out"/*.result 2>/dev/null || true
exit $status
