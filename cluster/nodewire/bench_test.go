package nodewire

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The bytes of a forwarded acquire and of its answer, as the held fill
// sends them: the leader decodes the request and encodes the reply, the
// follower decodes the reply.
var (
	benchAcquire = EncodeRequest(&Command{fsm.Command{Op: fsm.OpAcquire, Key: "held/00001234", Owner: testOwner, TTL: time.Hour}})
	benchGranted = fsm.Result{Status: fsm.StatusGranted, Token: 1234, ExpiresAt: time.Hour + time.Minute, Now: time.Minute}
	benchReply   []byte // where the leader's reply goes: to the transport, as in a node
)

func BenchmarkCommandAtLeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		req, err := DecodeRequest(benchAcquire)
		if err != nil {
			b.Fatal(err)
		}
		if req.(*Command).Cmd.Key == "" {
			b.Fatal("no key")
		}
		ans := CommandAnswer{benchGranted}
		benchReply = ans.AppendReply(make([]byte, 0, 32)) // the room the leader gives it
	}
}

func BenchmarkCommandReplyAtFollower(b *testing.B) {
	reply := Reply{Code: CodeOK, Kind: KindCommand, Answer: &CommandAnswer{benchGranted}}.AppendBinary(nil)
	var into CommandAnswer // the room a follower keeps beside its request
	b.ReportAllocs()
	for b.Loop() {
		rep, err := DecodeReplyInto(reply, &into)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Answer.(*CommandAnswer).Res.Token != benchGranted.Token {
			b.Fatal("wrong token")
		}
	}
}
