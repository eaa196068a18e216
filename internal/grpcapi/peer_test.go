package grpcapi

import (
	"bytes"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/stratadb/strata/proto/strata/v1"
)

// unmarshalForward reads what proto.Unmarshal reads, skips unknown fields,
// refuses what proto.Unmarshal refuses, and leaves the batch in the frame.
func TestUnmarshalForwardAliasesTheBatch(t *testing.T) {
	want := &pb.ForwardWriteRequest{Table: "cpu", Region: "7/2", Compression: 1, Size: 12345, Batch: bytes.Repeat([]byte("batch"), 100)}
	req, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	req = protowire.AppendTag(req, 99, protowire.BytesType) // a field of a newer sender
	req = protowire.AppendBytes(req, []byte("later"))
	var got pb.ForwardWriteRequest
	if err := unmarshalForward(req, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, want) {
		t.Fatalf("decoded %v, want %v", &got, want)
	}
	if b := uintptr(unsafe.Pointer(unsafe.SliceData(got.Batch))); b < uintptr(unsafe.Pointer(&req[0])) || b >= uintptr(unsafe.Pointer(&req[0]))+uintptr(len(req)) {
		t.Error("the batch was copied out of the frame")
	}
	for name, bad := range map[string][]byte{
		"truncated batch":   req[:len(req)-len("later")-40],
		"truncated tag":     {0x80},
		"table not UTF-8":   protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0xff, 0xfe}),
		"varint past end":   {0x18, 0xff},
		"a group never end": protowire.AppendTag(nil, 7, protowire.StartGroupType),
	} {
		var r pb.ForwardWriteRequest
		if err := unmarshalForward(bad, &r); err == nil {
			t.Errorf("%s: decoded", name)
		}
		if err := proto.Unmarshal(bad, &r); err == nil {
			t.Errorf("%s: proto.Unmarshal takes it, so should this test's case", name)
		}
	}
}
