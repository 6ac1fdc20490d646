package consumer

// lanes orders one partition's ready records by Config.Ordering: a record
// starts when no earlier record of its lane is running. OrderingPartition
// has one lane, OrderingKey one per Kafka key (records without a key share
// one), OrderingUnordered none (every record starts at once).
type lanes struct {
	ordering Ordering
	m        map[string]*lane
	waiting  int // records queued behind a running one of their lane
}

type lane struct {
	queue []*xrec // in offset order, not started
}

func newLanes(o Ordering) *lanes { return &lanes{ordering: o, m: map[string]*lane{}} }

// laneOf returns the lane key of r, and false under OrderingUnordered.
func (l *lanes) laneOf(r *xrec) (string, bool) {
	switch l.ordering {
	case OrderingUnordered:
		return "", false
	case OrderingKey:
		return string(r.msg.Key), true
	default:
		return "", true
	}
}

// add queues r and reports whether it may start now.
func (l *lanes) add(r *xrec) bool {
	k, ok := l.laneOf(r)
	if !ok {
		return true
	}
	ln, busy := l.m[k]
	if !busy {
		l.m[k] = &lane{}
		return true
	}
	ln.queue = append(ln.queue, r)
	l.waiting++
	return false
}

// done ends r's turn and returns the next record of its lane to start, if
// any.
func (l *lanes) done(r *xrec) *xrec {
	k, ok := l.laneOf(r)
	if !ok {
		return nil
	}
	ln := l.m[k]
	if ln == nil {
		return nil
	}
	if len(ln.queue) == 0 {
		delete(l.m, k)
		return nil
	}
	next := ln.queue[0]
	ln.queue[0] = nil
	ln.queue = ln.queue[1:]
	l.waiting--
	return next
}
