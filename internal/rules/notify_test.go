package rules

import (
	"strings"
	"testing"
)

// TestAlertmanagerClientRefused: a client certificate without its key,
// and a bearer token beside a URL's user:password, are refused.
func TestAlertmanagerClientRefused(t *testing.T) {
	for _, c := range []struct {
		urls   []string
		client AlertmanagerClient
		want   string
	}{
		{[]string{"https://am:9093"}, AlertmanagerClient{CertFile: "c.pem"}, "both the certificate file and the key file"},
		{[]string{"https://am:9093"}, AlertmanagerClient{KeyFile: "k.pem"}, "both the certificate file and the key file"},
		{[]string{"https://u:p@am:9093"}, AlertmanagerClient{BearerTokenFile: "t"}, "at most one of"},
	} {
		if _, _, err := alertmanagers(c.urls, c.client); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %+v: %v, want an error saying %q", c.urls, c.client, err, c.want)
		} else if strings.Contains(err.Error(), ":p@") {
			t.Errorf("the error shows the password: %v", err)
		}
	}
	conf, _, err := alertmanagers([]string{"https://am:9093"}, AlertmanagerClient{CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", BearerTokenFile: "t"})
	if err != nil {
		t.Fatal(err)
	}
	hc := conf.AlertingConfig.AlertmanagerConfigs[0].HTTPClientConfig
	if hc.TLSConfig.CAFile != "ca.pem" || hc.TLSConfig.CertFile != "c.pem" || hc.TLSConfig.KeyFile != "k.pem" ||
		hc.Authorization == nil || hc.Authorization.Type != "Bearer" || hc.Authorization.CredentialsFile != "t" {
		t.Fatalf("client config: %+v", hc)
	}
}
