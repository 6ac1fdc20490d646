// Package consumertest provides real test infrastructure for code built on the
// consumer runtime: a throwaway PostgreSQL cluster (one per test binary, a fresh
// database per test) and an in-process Kafka-protocol broker. Users of the
// library can use it for their own handler tests; it imports nothing from the
// operator.
package consumertest
