package main

import (
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// answerOffsetFetchLikeKafka makes the broker answer an OffsetFetch for a
// group it does not know (one that never committed nor joined) as Kafka
// does: offset -1 and no error for every partition asked for, instead of
// kfake's GROUP_ID_NOT_FOUND (69), which a kafkajs consumer had to
// special-case. A request naming any group the broker knows is left to
// kfake. The control function stays installed (KeepControl) and looks the
// groups up while the cluster's loop is free (SleepControl: GroupInfo needs
// that loop).
func answerOffsetFetchLikeKafka(c *kfake.Cluster) {
	c.ControlKey(kmsg.OffsetFetch.Int16(), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.OffsetFetchRequest)
		groups := []string{req.Group}
		if req.Version >= 8 {
			groups = groups[:0]
			for _, g := range req.Groups {
				groups = append(groups, g.Group)
			}
		}
		known := false
		c.SleepControl(func() {
			for _, g := range groups {
				if c.GroupInfo(g) != nil {
					known = true
				}
			}
		})
		if known || len(groups) == 0 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		if req.Version < 8 {
			for _, t := range req.Topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		}
		for _, g := range req.Groups {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			for _, t := range g.Topics {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic, rt.TopicID = t.Topic, t.TopicID
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch = p, -1, -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups = append(resp.Groups, rg)
		}
		return resp, nil, true
	})
}
