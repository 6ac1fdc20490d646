package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stressValue is a record's value: a JSON envelope with a fresh UUIDv7, so
// that the runtime can handle it too, naming who wrote it.
func stressValue(src string) []byte {
	id, err := uuid.NewV7()
	if err != nil {
		panic(err)
	}
	v, _ := json.Marshal(map[string]string{"eventId": id.String(), "type": "stress", "src": src})
	return v
}

// stressProducer writes transactions of rng-chosen size, partitions and
// outcome; some stay open while the plain producers write many records.
type stressProducer struct {
	id    string
	addr  string
	topic string
	parts int32
	codec kgo.CompressionCodec
	rng   *rand.Rand
	cl    *kgo.Client

	committed, aborted, failed int
}

func (p *stressProducer) client() (*kgo.Client, error) {
	if p.cl != nil {
		return p.cl, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(p.addr),
		kgo.TransactionalID(p.id),
		kgo.DefaultProduceTopic(p.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(p.codec),
		kgo.TransactionTimeout(10*time.Second),
		kgo.RequestRetries(20),
	)
	if err != nil {
		return nil, err
	}
	p.cl = cl
	return cl, nil
}

func (p *stressProducer) close() {
	if p.cl != nil {
		p.cl.Close()
		p.cl = nil
	}
}

// txn runs one transaction of n records; a transaction the broker's crash
// cut counts as failed (the log says what became of it), and the next
// transaction uses a new client, which fences the old one.
func (p *stressProducer) txn(ctx context.Context, n int) {
	commit := p.rng.IntN(3) != 0
	long := p.rng.IntN(6) == 0
	cl, err := p.client()
	if err == nil {
		err = cl.BeginTransaction()
	}
	for i := 0; err == nil && i < n; {
		k := min(n-i, 1+p.rng.IntN(6))
		recs := make([]*kgo.Record, k)
		part := p.rng.Int32N(p.parts)
		for j := range recs {
			recs[j] = &kgo.Record{Partition: part, Value: stressValue(fmt.Sprintf("%s/%d", p.id, i+j))}
		}
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		i += k
		if long {
			time.Sleep(time.Duration(20+p.rng.IntN(60)) * time.Millisecond)
		}
	}
	if err == nil {
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = cl.EndTransaction(ectx, kgo.TransactionEndTry(commit))
		cancel()
	}
	switch {
	case err != nil:
		p.failed++
		p.close()
	case commit:
		p.committed++
	default:
		p.aborted++
	}
}

// stressWorkload is what writeStressLog writes.
type stressWorkload struct {
	parts           int
	txnProducers    int
	txnsPerProducer int
	// crashAt is the share of the transactions after which the broker
	// crashes (0: no crash).
	crashAt float64
}

// writeStressLog runs the transactional and plain producers of w on topic
// until every transaction is done, crashing the broker once on the way if
// w says so.
func writeStressLog(ctx context.Context, t *testing.T, kf *restartableKafka, topic string, w stressWorkload, rng *rand.Rand) {
	t.Helper()
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.SnappyCompression(), kgo.Lz4Compression(), kgo.ZstdCompression(), kgo.GzipCompression()}
	var producers []*stressProducer
	for i := range w.txnProducers {
		producers = append(producers, &stressProducer{id: fmt.Sprintf("stress-tx-%d", i), addr: kf.addr, topic: topic, parts: int32(w.parts),
			codec: codecs[i%len(codecs)], rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))})
	}
	var txnsDone atomic.Int64
	var prodWG sync.WaitGroup
	for _, p := range producers {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			defer p.close()
			for range w.txnsPerProducer {
				p.txn(ctx, 1+p.rng.IntN(25))
				txnsDone.Add(1)
			}
		}()
	}
	plainDone := make(chan struct{})
	var plainWG sync.WaitGroup
	var plainN, plainFailed atomic.Int64
	for i := range 2 {
		plainWG.Add(1)
		prng := rand.New(rand.NewPCG(rng.Uint64(), 100+uint64(i)))
		go func() {
			defer plainWG.Done()
			cl, err := kgo.NewClient(kgo.SeedBrokers(kf.addr), kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
				kgo.ProducerBatchCompression(codecs[i*3]), kgo.RequestRetries(20))
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			for n := 0; ; n++ {
				select {
				case <-plainDone:
					return
				default:
				}
				k := 1 + prng.IntN(4)
				recs := make([]*kgo.Record, k)
				part := prng.Int32N(int32(w.parts))
				for j := range recs {
					recs[j] = &kgo.Record{Partition: part, Value: stressValue(fmt.Sprintf("plain-%d/%d/%d", i, n, j))}
				}
				pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if err := cl.ProduceSync(pctx, recs...).FirstErr(); err != nil {
					plainFailed.Add(1)
				} else {
					plainN.Add(int64(k))
				}
				cancel()
				time.Sleep(time.Duration(prng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	if w.crashAt > 0 {
		total := int64(len(producers) * w.txnsPerProducer)
		for txnsDone.Load() < int64(float64(total)*w.crashAt) && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("crashing the broker after %d of %d transactions", txnsDone.Load(), total)
		kf.crash(t, 200*time.Millisecond)
	}
	prodWG.Wait()
	close(plainDone)
	plainWG.Wait()
	var committed, aborted, failed int
	for _, p := range producers {
		committed, aborted, failed = committed+p.committed, aborted+p.aborted, failed+p.failed
	}
	t.Logf("transactions: %d committed, %d aborted, %d cut by the crash; plain records: %d (%d produce calls failed)",
		committed, aborted, failed, plainN.Load(), plainFailed.Load())
}
