// Package peerwire is the datanodes' own transport for the calls one
// datanode makes to another most often: a remote region's column scan,
// which a point query makes once a remote region and whose owner's work
// is a few microseconds, and a write's share forwarded to its region's
// owner. Over gRPC a scan cost about 100 µs on loopback (HTTP/2 framing,
// a writer goroutine each side, several writes a call); a request and its
// answer on a TCP connection of their own cost about 30 µs
// (docs/design-decisions.md, "A transport of the datanodes' own for
// remote scans", and "Forwarded writes over peerwire"). VictoriaMetrics'
// cluster does the same between vmselect and vmstorage.
//
// It shares the gRPC port: a connection that starts with Magic is
// peerwire's, any other goes on to the gRPC server (Listener). After the
// magic the connection is TLS when the cluster's is (the same
// certificates as gRPC), and its first frame carries the cluster's auth
// token, which the server checks before anything else.
//
// A connection carries one call at a time: the client sends a call frame
// (method, deadline, request); the server answers with message frames and
// one end frame holding the call's status (the messages are buffered and
// written with the end, or as the buffer fills: a small answer is one
// write) (the gRPC status, so that an
// error keeps its code and class across the hop, as over gRPC). An ended
// call leaves the connection for the next one (Client keeps idle ones);
// a call cancelled by its caller closes its connection, which cancels the
// handler on the other side.
package peerwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Magic opens every peerwire connection, before TLS. It cannot begin an
// HTTP/2 client preface ("PRI * HTTP/2.0") or a TLS record (0x16), and it
// is as long as the preface: a gRPC server that does not know peerwire
// (an older datanode) reads it whole as a wrong preface and closes the
// connection at once, which the client takes for ErrUnsupported.
const Magic = "STRATA-PEERWIRE/1\r\n\r\n\r\n\x00"

// version is the protocol's, sent in the hello.
const version byte = 1

// Methods: a call names its handler with one byte.
const (
	// ScanColumns is Datanode.ScanColumns: a pb.ScanRequest in, a stream
	// of pb.ScanColumnsResponse out.
	ScanColumns byte = 1
	// ForwardWrite is Datanode.ForwardWrite: a pb.ForwardWriteRequest in,
	// one pb.WriteResponse out (a region's share of a write, sent to its
	// owner: docs/design-decisions.md, "Forwarded writes over peerwire").
	ForwardWrite byte = 2
)

// Frame types.
const (
	frameHello byte = 1 + iota // client → server: the auth token
	frameReady                 // server → client: the hello's answer (empty: accepted; else a status)
	frameCall                  // client → server: method, deadline (ns from now, 0: none), request
	frameMsg                   // server → client: a message of the answer
	frameEnd                   // server → client: the call's status (empty: OK)
	frameAlive                 // server → client: the call is still running (empty)
)

// A call's answer says something at least every aliveEvery (its messages,
// or an alive frame while the handler works without sending); a client
// that hears nothing for 10 to 15 s (rearmBelow to silence) gives the
// connection up, as gRPC's
// keepalive does a connection whose ping goes unanswered: a network that
// stops carrying packets (a partition, a proxy that hangs) ends the call
// instead of holding it until the caller's deadline.
const (
	aliveEvery = 5 * time.Second
	silence    = 3 * aliveEvery
)

// MaxFrame bounds a frame, as gRPC's receive limit bounds a message;
// maxHello bounds the hello and its answer, read before the peer is
// known (an unauthenticated client cannot make the server hold more).
const (
	MaxFrame = 64 << 20
	maxHello = 4 << 10
)

// ErrProtocol: the other side broke the protocol (a frame out of place,
// too large, or cut short).
var ErrProtocol = errors.New("peerwire: protocol error")

// appendFrame appends a frame (4-byte big-endian length of type and
// payload, the type, the payload) to buf.
func appendFrame(buf []byte, typ byte, payload ...[]byte) []byte {
	n := 1
	for _, p := range payload {
		n += len(p)
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(n))
	buf = append(buf, typ)
	for _, p := range payload {
		buf = append(buf, p...)
	}
	return buf
}

// readFrame reads one frame of at most limit bytes into buf (grown as
// needed) and returns its type and payload, which aliases buf.
func readFrame(r io.Reader, buf *[]byte, limit uint32) (typ byte, payload []byte, err error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 || n > limit {
		return 0, nil, fmt.Errorf("%w: frame of %d bytes", ErrProtocol, n)
	}
	if cap(*buf) < int(n-1) {
		*buf = make([]byte, n-1)
	}
	p := (*buf)[:n-1]
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[4], p, nil
}
