// Package membudget is the memory budget (the consumer's MemoryBudget): it
// sizes each partition's reader for its share and bounds the bytes of the
// records taken from the readers with one byte semaphore for the process
// (membudget.go explains the split).
//
// File map:
//   - membudget.go: Budget, Partition and the reader Plan
package membudget
