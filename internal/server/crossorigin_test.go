package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
	"github.com/stratadb/strata/internal/server/servertest"
)

// A write a browser sends from another site's page (it would carry the
// credentials the web UI had it keep) is refused; the UI's own requests
// and API clients, which send no Origin, are not.
func TestCrossOriginWritesRefused(t *testing.T) {
	n := servertest.Start(t, objstoretest.Mem(t), servertest.Options{})
	post := func(headers map[string]string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+n.HTTPAddr()+"/api/v2/write?bucket=x&precision=s", strings.NewReader("co,host=a v=1 1767225600\n"))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		what    string
		headers map[string]string
		want    int
	}{
		{"an API client", nil, http.StatusNoContent},
		{"the web UI's page", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusNoContent},
		{"another site's page", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"an older browser on another site", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
	} {
		if got := post(c.headers); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET: %d", resp.StatusCode)
	}
}
