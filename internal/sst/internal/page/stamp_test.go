package page

import "testing"

// TestValueStampMatchesTheAPI: the rawValue mirror matches this
// parquet-go's Value. If an upgrade changes the layout, writes fall back to
// the (slower) API and this test says so.
func TestValueStampMatchesTheAPI(t *testing.T) {
	if !stampOK {
		t.Fatal("parquet.Value's layout no longer matches rawValue: update stamp.go")
	}
}
