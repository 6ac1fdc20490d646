package devkafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ghostSession is the session timeout of the killed member of
// TestMemberKilledWhileJoiningExpires; livingSession is the living one's,
// long enough that it survives the other's join (a fresh client, a
// rebalance) and the pauses between its own requests on a loaded machine.
const (
	ghostSession  = 300
	livingSession = 10_000
)

// join sends JoinGroup for group g as memberID ("" for a new member,
// answered MEMBER_ID_REQUIRED with its ID, then joined again) with the
// living member's session timeout, and returns the answer.
func join(ctx context.Context, t *testing.T, cl *kgo.Client, g, memberID string) *kmsg.JoinGroupResponse {
	t.Helper()
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = g, memberID, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = livingSession, 60_000
		proto := kmsg.NewJoinGroupRequestProtocol()
		proto.Name, proto.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{"t"}}).AppendTo(nil)
		req.Protocols = append(req.Protocols, proto)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		if resp.ErrorCode == kerr.MemberIDRequired.Code {
			memberID = resp.MemberID
			continue
		}
		if resp.ErrorCode != 0 {
			t.Fatalf("join: error %d", resp.ErrorCode)
		}
		return resp
	}
}

// TestMemberKilledWhileJoiningExpires: a consumer joins a group and is
// killed while its JoinGroup waits for the others to rejoin. The rebalance
// completes with it as a member (its request is in), the leader gives it
// partitions, and the group is stable. Kafka starts every member's session
// timeout when the join completes, answered or not, so the dead member is
// removed after it and its partitions go to the living. kfake started the
// session timer only when the JoinGroup answer was delivered; the dead
// member's could not be, so it stayed in the group for good with its
// partitions, which nobody consumed (the chaos run's "consumer lag still
// N": a partition whose committed offset never moves, no reader for it,
// and stable equal to end). Whether kfake could deliver the answer to the
// closed connection was a coin toss (a buffered channel against the
// connection's end), so the test kills a joining member in 12 groups.
func TestMemberKilledWhileJoiningExpires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.CreateTopic(ctx, "t", 4, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		killWhileJoining(ctx, t, b, fmt.Sprintf("g%d", i))
	}
}

func killWhileJoining(ctx context.Context, t *testing.T, b *Broker, g string) {
	t.Helper()
	a, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ja := join(ctx, t, a, g, "")
	sync := func(j *kmsg.JoinGroupResponse) {
		t.Helper()
		req := kmsg.NewPtrSyncGroupRequest()
		req.Group, req.MemberID, req.Generation = g, j.MemberID, j.Generation
		req.ProtocolType, req.Protocol = kmsg.StringPtr("consumer"), j.Protocol
		for i, m := range j.Members { // the leader hands out the four partitions
			ga := kmsg.NewSyncGroupRequestGroupAssignment()
			ga.MemberID = m.MemberID
			var parts []int32
			for p := int32(i); p < 4; p += int32(len(j.Members)) {
				parts = append(parts, p)
			}
			ga.MemberAssignment = (&kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "t", Partitions: parts}}}).AppendTo(nil)
			req.GroupAssignment = append(req.GroupAssignment, ga)
		}
		resp, err := req.RequestWith(ctx, a)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("sync: %v, error %d", err, resp.ErrorCode)
		}
	}
	sync(ja)

	// B joins; its JoinGroup waits until A rejoins. B is killed meanwhile.
	bcl, err := kgo.NewClient(kgo.SeedBrokers(b.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	bJoined := make(chan struct{})
	go func() {
		defer close(bJoined)
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.ProtocolType = g, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = ghostSession, 60_000
		proto := kmsg.NewJoinGroupRequestProtocol()
		proto.Name, proto.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{"t"}}).AppendTo(nil)
		req.Protocols = append(req.Protocols, proto)
		resp, err := req.RequestWith(ctx, bcl)
		if err != nil || resp.ErrorCode != kerr.MemberIDRequired.Code {
			return
		}
		req.MemberID = resp.MemberID
		_, _ = req.RequestWith(ctx, bcl) // waits in the rebalance until the client is closed
	}()
	if _, err := b.Cluster().WaitGroupInfo(ctx, g, func(gi *kfake.GroupInfo) bool { return gi.State == "PreparingRebalance" && len(gi.Members) == 2 }); err != nil {
		t.Fatal(err)
	}
	bcl.Close() // kill -9: the connection goes away with the JoinGroup waiting
	<-bJoined
	time.Sleep(200 * time.Millisecond)

	ja = join(ctx, t, a, g, ja.MemberID) // A rejoins: the rebalance completes with B in it
	if len(ja.Members) != 2 {
		t.Fatalf("the rebalance completed with %d members; want 2 (A and the killed B, whose JoinGroup was in)", len(ja.Members))
	}
	sync(ja)

	// A heartbeats; B, dead, does not. After B's session timeout the
	// group must drop B and rebalance.
	deadline := time.Now().Add(10 * ghostSession * time.Millisecond)
	for {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Group, req.MemberID, req.Generation = g, ja.MemberID, ja.Generation
		resp, err := req.RequestWith(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode == kerr.RebalanceInProgress.Code {
			break // B was dropped
		}
		if time.Now().After(deadline) {
			gi := b.Cluster().GroupInfo(g)
			t.Fatalf("group %s, 10 session timeouts after the rebalance: %s with %d members at generation %d; the killed member was never dropped, and its partitions stay unconsumed", g, gi.State, len(gi.Members), gi.Epoch)
		}
		time.Sleep(ghostSession / 5 * time.Millisecond)
	}
}
