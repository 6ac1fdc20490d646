// Package broker is the runtime's Kafka client side other than the group
// protocol and the partition readers: the dialer and transport every
// connection of one consumer shares (TLS, SASL), kafka-go's logger, and the
// metadata questions the runtime asks (do the topics exist, a topic's record
// size limit, a partition's log bounds).
//
// File map:
//   - broker.go: Config, Clients, Logger and the metadata questions
package broker
