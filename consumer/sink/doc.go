// Package sink provides ready-made consumer.Handlers: HTTP (POST each new
// event to a URL with an Idempotency-Key header), SQL (run a parameterised
// statement in the dedup transaction), Log and None. cmd/consumer selects one
// with CONSUMER_SINK; library users can use them directly or wrap them.
package sink
